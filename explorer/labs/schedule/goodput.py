"""Goodput under the session's SLO pair for a served workload (the Scheduling lab and the Room): each request met or
missed its TTFT SLO and its TPOT SLO, and how many met both. TPOT is a request's mean time per output token after the
first, (last token - first token) / (tokens - 1), as DistServe (arXiv 2401.09670) and vLLM's benchmarks define it;
the session's ITL SLO is read as the TPOT SLO. Met means strictly under, as every SLO check of the explorer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SloVerdict:
    """One request against the SLO pair (measured times)."""

    request: str
    ttft_s: float
    tpot_s: float | None  # None: one token only, so no time per output token (it meets TPOT trivially)
    ttft_met: bool
    tpot_met: bool

    @property
    def met(self) -> bool:
        return self.ttft_met and self.tpot_met


def tpot_of(token_times_s: Sequence[float]) -> float | None:
    if len(token_times_s) < 2:
        return None
    return (token_times_s[-1] - token_times_s[0]) / (len(token_times_s) - 1)


def verdict(request: str, arrival_s: float, token_times_s: Sequence[float], slos_s: tuple[float, float]) -> SloVerdict:
    ttft_slo_s, tpot_slo_s = slos_s
    ttft_s, tpot_s = token_times_s[0] - arrival_s, tpot_of(token_times_s)
    return SloVerdict(request, ttft_s, tpot_s, ttft_s < ttft_slo_s, tpot_s is None or tpot_s < tpot_slo_s)


@dataclass(frozen=True)
class GoodputCount:
    """Every request's verdict, the counts, and the goodput: requests meeting both SLOs per second of the span."""

    verdicts: tuple[SloVerdict, ...]
    ttft_slo_s: float
    tpot_slo_s: float
    span_s: float  # first arrival to the last token

    @property
    def met(self) -> int:
        return sum(v.met for v in self.verdicts)

    @property
    def ttft_missed(self) -> int:
        return sum(not v.ttft_met for v in self.verdicts)

    @property
    def tpot_missed(self) -> int:
        return sum(not v.tpot_met for v in self.verdicts)

    @property
    def goodput_per_s(self) -> float:
        return self.met / self.span_s if self.span_s > 0 else 0.0

    def sentence(self) -> str:
        n = len(self.verdicts)
        return (
            f"{self.met} of {n} requests met both SLOs (TTFT < {self.ttft_slo_s * 1e3:,.0f} ms, TPOT < "
            f"{self.tpot_slo_s * 1e3:,.3g} ms): {self.ttft_missed} missed TTFT, {self.tpot_missed} missed TPOT; "
            f"goodput {self.goodput_per_s:.3g} requests/s"
        )


def goodput_count(
    requests: Sequence[tuple[str, float, Sequence[float]]], ttft_slo_s: float, tpot_slo_s: float
) -> GoodputCount:
    """From (id, arrival, token times) of each request, all on one clock; no requests: a count of zero (a round or
    a mode that served nobody is still drawn)."""
    verdicts = tuple(verdict(name, arrival, times, (ttft_slo_s, tpot_slo_s)) for name, arrival, times in requests)
    if not requests:
        return GoodputCount(verdicts, ttft_slo_s, tpot_slo_s, 0.0)
    span_s = max(times[-1] for _, _, times in requests) - min(arrival for _, arrival, _ in requests)
    return GoodputCount(verdicts, ttft_slo_s, tpot_slo_s, span_s)
