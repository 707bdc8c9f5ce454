"""What a sweep measured, as the CLI writes it and the Endpoint page reads it: one record per streamed request, one
result per concurrency level, the sweep with its settings (a JSON round trip), and the per-token ITL rule.

How the figures are defined (the same words as vLLM's `bench serve`, SGLang's `bench_serving` and NVIDIA AIPerf):

- TTFT: from just before the connection is opened (so it counts connecting, queueing on the server, prefill and
  the network) to the arrival of the first streamed chunk that carries output text. Chunks without text (the chat
  API's opening `role` chunk, a trailing usage chunk) are not tokens, as in AIPerf.
- ITL, per token: a chunk can carry several tokens (speculative decoding, servers that batch their stream). A chunk
  that brings n >= 1 new tokens g seconds after the previous token-bearing chunk contributes n inter-token latencies
  of g / n each (SGLang `bench_serving`'s rule, and vLLM's pull request #42661; vLLM's released `bench serve` records
  one gap per chunk, which is the same thing whenever a chunk holds one token). Extra tokens in the first chunk
  arrive with the first token and add no gap; a chunk counted as 0 tokens adds no gap and its wait rolls into the
  next. So a request's mean ITL equals AIPerf's per-request ITL and vLLM's TPOT, (E2E - TTFT) / (tokens - 1),
  whenever the first chunk carries one token.
- E2E: to the last token-bearing chunk. Output tokens/s of a request: output tokens / E2E.
- Per concurrency level, TTFT and ITL percentiles (linear interpolation, numpy's default, over every request's TTFT
  and every token's ITL), total output tokens/s (every output token of the level / the level's wall time, vLLM's
  "output token throughput") and goodput: requests with TTFT < the TTFT SLO and p99 of their ITLs < the ITL SLO
  (the Latency page's strict check, applied per request).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Literal

from explorer.core.errors import BadInput, one_line
from explorer.core.trace import ItlPercentiles, JsonRecord, percentile
from explorer.remote.endpoint import Endpoint
from explorer.remote.metrics import ServerDelta

TokenSource = Literal["usage", "tokenizer", "chunks"]
SCHEMA_VERSION = 1
PERCENTILES = (50, 90, 99)  # the fields of LevelSummary below, in this order

ITL_RULE = (
    "ITL is per token: a chunk bringing n tokens g ms after the previous token-bearing chunk counts as n gaps of "
    "g/n ms (the rule of SGLang's `bench_serving`; vLLM's `bench serve` counts one gap per chunk, the same when "
    "n = 1). TTFT runs from opening "
    "the connection to the first chunk with text, so it holds connecting, queueing, prefill and the network."
)


def per_token_itls(arrivals_s: Sequence[float], tokens: Sequence[int]) -> tuple[float, ...]:
    """The ITL rule (module docstring): chunk k with n_k tokens, g after the last token-bearing chunk, gives n_k
    gaps of g / n_k; the first token-bearing chunk gives none; a chunk of 0 tokens gives none and keeps the clock."""
    gaps: list[float] = []
    previous_s: float | None = None
    for arrival_s, n in zip(arrivals_s, tokens):
        if n <= 0:
            continue
        if previous_s is not None:
            gaps.extend([(arrival_s - previous_s) / n] * n)
        previous_s = arrival_s
    return tuple(gaps)


# --- one request -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestSummary:
    """A record's derived figures, written beside it in the JSON for readers of the file (ignored on load)."""

    itl_s: tuple[float, ...]
    tpot_s: float | None
    tokens_per_s: float | None
    chunk_tokens_total: int
    tokens_disagree: bool


@dataclass(frozen=True)
class RequestRecord(ItlPercentiles):
    """One streamed request: when each token-bearing chunk arrived and how many tokens it held, or why it failed."""

    index: int  # submission order within its level (-1: the warm-up request)
    start_s: float  # when it was sent, seconds since its level started
    ttft_s: float | None  # None when it failed before any text
    e2e_s: float | None
    chunk_arrivals_s: tuple[float, ...]  # every chunk with output text, seconds since the request was sent
    chunk_tokens: tuple[int, ...]  # tokens in each of those chunks
    output_tokens: int
    output_tokens_from: TokenSource  # what counted output_tokens
    chunk_tokens_from: TokenSource  # what counted chunk_tokens
    prompt_tokens: int | None  # from the server's usage, when sent
    finish_reason: str | None
    text: str
    error: str = ""  # one line; empty when the request succeeded
    cached_tokens: int | None = None  # prompt tokens the server took from its prefix cache (its usage), when sent

    @classmethod
    def failed(cls, index: int, start_s: float, error: str) -> RequestRecord:
        return cls(index, start_s, None, None, (), (), 0, "chunks", "chunks", None, None, "", error or "failed")

    @property
    def ok(self) -> bool:
        return not self.error and self.ttft_s is not None

    @cached_property  # derived once: every percentile, the SLO check and the tables read it (frozen: never stale)
    def itl_s(self) -> tuple[float, ...]:
        return per_token_itls(self.chunk_arrivals_s, self.chunk_tokens)

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (tokens - 1): AIPerf's per-request ITL, vLLM's TPOT."""
        if not self.ok or self.output_tokens < 2 or self.e2e_s is None or self.ttft_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.e2e_s if self.ok and self.e2e_s else None

    def meets_slos(self, ttft_slo_s: float, itl_slo_s: float) -> bool:
        """Strictly under both: TTFT, and the p99 of this request's ITLs (a one-token request has no ITL to miss)."""
        if not self.ok or self.ttft_s is None or not self.ttft_s < ttft_slo_s:
            return False
        itl_p99_s = self.itl_p99_s
        return itl_p99_s is None or itl_p99_s < itl_slo_s

    @property
    def chunk_tokens_total(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def unstreamed_tokens_allowed(self) -> int:
        """A request that stopped on its end-of-sequence token has that token in the server's usage but no text in
        any chunk (seen on transformers serve; vLLM counts it the same way): one token the chunks cannot show."""
        return 1 if self.finish_reason == "stop" else 0

    @property
    def tokens_disagree(self) -> bool:
        """The chunks' token counts do not add up to the server's own total (beyond an unstreamed stop token): the
        ITLs are spread over the wrong number of tokens (one token per chunk assumed, or another tokenizer)."""
        unexplained = self.output_tokens - self.chunk_tokens_total
        return self.ok and self.output_tokens_from == "usage" and unexplained not in (0, self.unstreamed_tokens_allowed)

    @property
    def summary(self) -> RequestSummary:
        return RequestSummary(self.itl_s, self.tpot_s, self.tokens_per_s, self.chunk_tokens_total, self.tokens_disagree)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["chunk_arrivals_s"] = tuple(float(x) for x in values["chunk_arrivals_s"])
        values["chunk_tokens"] = tuple(int(x) for x in values["chunk_tokens"])
        return cls(**values)


# --- one concurrency level ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LevelSummary:
    """A level's figures against two SLOs: what the table, the charts and the JSON's `summary` show."""

    concurrency: int
    requests: int
    succeeded: int
    failed: int
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p90_s: float | None
    itl_p99_s: float | None
    output_tokens: int
    total_output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    requests_per_s: float | None
    goodput_requests: int
    goodput_fraction: float | None
    goodput_requests_per_s: float | None

    @property
    def ttft_percentiles_s(self) -> tuple[float | None, ...]:
        """p50, p90, p99 (PERCENTILES)."""
        return (self.ttft_p50_s, self.ttft_p90_s, self.ttft_p99_s)

    @property
    def itl_percentiles_s(self) -> tuple[float | None, ...]:
        return (self.itl_p50_s, self.itl_p90_s, self.itl_p99_s)


@dataclass(frozen=True)
class LevelResult:
    """Every request sent with at most `concurrency` in flight."""

    concurrency: int
    wall_s: float  # from the first send to the last answer of this level
    records: tuple[RequestRecord, ...]
    server: ServerDelta | None = None  # the server's /metrics over this level, where it publishes them

    @cached_property  # derived once, as a request's ITLs are: a level is frozen
    def succeeded(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if r.ok)

    @property
    def failed(self) -> int:
        return len(self.records) - len(self.succeeded)

    @cached_property
    def ttfts_s(self) -> tuple[float, ...]:
        return tuple(r.ttft_s for r in self.succeeded if r.ttft_s is not None)

    @cached_property
    def itls_s(self) -> tuple[float, ...]:
        return tuple(gap for r in self.succeeded for gap in r.itl_s)

    def ttft_percentile_s(self, q: float) -> float | None:
        return percentile(self.ttfts_s, q)

    def itl_percentile_s(self, q: float) -> float | None:
        return percentile(self.itls_s, q)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.succeeded)

    @property
    def total_output_tokens_per_s(self) -> float | None:
        return self.output_tokens / self.wall_s if self.wall_s > 0 and self.succeeded else None

    @property
    def total_tokens_per_s(self) -> float | None:
        """Prompt and output tokens per second (vLLM's "total token throughput"); None without prompt counts."""
        if not self.succeeded or self.wall_s <= 0 or any(r.prompt_tokens is None for r in self.succeeded):
            return None
        return sum((r.prompt_tokens or 0) + r.output_tokens for r in self.succeeded) / self.wall_s

    @property
    def requests_per_s(self) -> float | None:
        return len(self.succeeded) / self.wall_s if self.wall_s > 0 else None

    def goodput(self, ttft_slo_s: float, itl_slo_s: float) -> int:
        return sum(r.meets_slos(ttft_slo_s, itl_slo_s) for r in self.records)

    def summary(self, ttft_slo_s: float, itl_slo_s: float) -> LevelSummary:
        good = self.goodput(ttft_slo_s, itl_slo_s)
        ttft_p50_s, ttft_p90_s, ttft_p99_s = (self.ttft_percentile_s(q) for q in PERCENTILES)
        itl_p50_s, itl_p90_s, itl_p99_s = (self.itl_percentile_s(q) for q in PERCENTILES)
        return LevelSummary(
            concurrency=self.concurrency,
            requests=len(self.records),
            succeeded=len(self.succeeded),
            failed=self.failed,
            ttft_p50_s=ttft_p50_s,
            ttft_p90_s=ttft_p90_s,
            ttft_p99_s=ttft_p99_s,
            itl_p50_s=itl_p50_s,
            itl_p90_s=itl_p90_s,
            itl_p99_s=itl_p99_s,
            output_tokens=self.output_tokens,
            total_output_tokens_per_s=self.total_output_tokens_per_s,
            total_tokens_per_s=self.total_tokens_per_s,
            requests_per_s=self.requests_per_s,
            goodput_requests=good,
            goodput_fraction=good / len(self.records) if self.records else None,
            goodput_requests_per_s=good / self.wall_s if self.wall_s > 0 else None,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LevelResult:
        records = tuple(RequestRecord.from_dict(r) for r in data["records"])
        server = ServerDelta.from_dict(data["server"]) if data.get("server") else None
        return cls(int(data["concurrency"]), float(data["wall_s"]), records, server)


# --- the sweep ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepResult(JsonRecord):
    """A concurrency sweep against one endpoint, as the CLI writes it and the Endpoint page reads it: the levels that
    finished, and why the sweep stopped before its last level when it did."""

    endpoint: Endpoint
    prompt: str
    max_tokens: int
    requests_per_level: int
    ttft_slo_s: float  # the SLOs given when measuring; the page can re-read the records against others
    itl_slo_s: float
    levels: tuple[LevelResult, ...]
    warmup: RequestRecord | None  # sent first, left out of every statistic
    created_at: str
    itl_rule: str = ITL_RULE
    schema: int = SCHEMA_VERSION
    stopped: str = ""  # one line when the sweep ended early (a level failed, the time limit, Ctrl-C); "" when whole
    interrupted: bool = False  # stopped by Ctrl-C (the CLI exits 130 after keeping what finished)
    server_total: ServerDelta | None = None  # the server's /metrics from before the warm-up to after the last level
    metrics_note: str = ""  # why the server's own figures are missing, one line; "" when it published them

    @property
    def partial(self) -> bool:
        """The sweep stopped before its last level (a level failed, the time limit, Ctrl-C): what it holds is what
        finished, not every level asked for. Written into the JSON for its readers; derived, so ignored on load."""
        return bool(self.stopped)

    @property
    def token_sources(self) -> str:
        """'usage (totals), chunks (per chunk)' over every successful request, for a caption."""
        records = [r for level in self.levels for r in level.succeeded]
        totals = sorted({r.output_tokens_from for r in records})
        chunks = sorted({r.chunk_tokens_from for r in records})
        return f"{'/'.join(totals) or 'n/a'} (totals), {'/'.join(chunks) or 'n/a'} (per chunk)"

    def level(self, concurrency: int) -> LevelResult:
        return next(level for level in self.levels if level.concurrency == concurrency)

    @property
    def disagreeing_records(self) -> tuple[RequestRecord, ...]:
        """Requests whose per-chunk token counts do not sum to the server's usage total."""
        return tuple(r for level in self.levels for r in level.records if r.tokens_disagree)

    @property
    def tokens_note(self) -> str:
        """One line when some per-chunk counts disagree with the server's totals; empty when none do."""
        bad = self.disagreeing_records
        if not bad:
            return ""
        first = bad[0]
        return (
            f"{len(bad)} of {sum(len(level.records) for level in self.levels)} requests: the tokens counted per chunk "
            f"(by {first.chunk_tokens_from}) sum to {first.chunk_tokens_total}, but the server's usage says "
            f"{first.output_tokens} (request {first.index}): their ITLs are spread over the wrong number of tokens. "
            "Count chunks with a tokenizer (on the Endpoint page its 'Count chunk tokens with the embedded tokenizer' "
            "switch, on the command line --tokenizer FOLDER) or use a server that reports usage per chunk."
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for level, level_data in zip(self.levels, data["levels"]):
            # Derived, written for readers of the file (percentiles, tokens/s, goodput); ignored on load.
            level_data["summary"] = asdict(level.summary(self.ttft_slo_s, self.itl_slo_s))
            for record, record_data in zip(level.records, level_data["records"]):
                record_data["summary"] = asdict(record.summary)
        data["tokens_disagree_requests"] = len(self.disagreeing_records)
        data["tokens_note"] = self.tokens_note
        data["partial"] = self.partial
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        if data.get("schema") != SCHEMA_VERSION:
            raise BadInput(
                f"This file is not a remote sweep of schema {SCHEMA_VERSION}: write one with "
                "`python -m explorer remote --json FILE`."
            )
        try:
            return cls(
                endpoint=Endpoint(**data["endpoint"]),
                prompt=data["prompt"],
                max_tokens=int(data["max_tokens"]),
                requests_per_level=int(data["requests_per_level"]),
                ttft_slo_s=float(data["ttft_slo_s"]),
                itl_slo_s=float(data["itl_slo_s"]),
                levels=tuple(LevelResult.from_dict(level) for level in data["levels"]),
                warmup=RequestRecord.from_dict(data["warmup"]) if data.get("warmup") else None,
                created_at=str(data["created_at"]),
                itl_rule=str(data.get("itl_rule", ITL_RULE)),
                stopped=str(data.get("stopped") or ""),
                interrupted=bool(data.get("interrupted", False)),
                server_total=ServerDelta.from_dict(data["server_total"]) if data.get("server_total") else None,
                metrics_note=str(data.get("metrics_note") or ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"This remote sweep file is incomplete or damaged ({one_line(exc)}).") from exc

    @classmethod
    def from_json(cls, text: str) -> SweepResult:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, 4,300-digit integers, 100,000 nested `[`
            raise BadInput(f"This file is not JSON ({one_line(exc)}): load a file written by --json.") from exc
        if not isinstance(data, dict):
            raise BadInput("This file is not a remote sweep: load a file written by `python -m explorer remote`.")
        return cls.from_dict(data)
