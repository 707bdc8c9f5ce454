"""The split what-if's curves: each layout's share of requests meeting both SLOs over the arrival rates, its goodput
(DistServe's) and no-SLO capacity, what holds it back, the crossover, and the one computed sentence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from explorer.scale.split import (
    ATTAINMENT_TARGET,
    PREFILL_TOKEN_BUDGET,
    RATE_POINTS,
    TIE,
    Layout,
    Outcome,
    StepModel,
    Workload,
    batch_under_tpot,
    iteration_s,
)
from explorer.scale.split_sim import Budget, simulate


def attainment(work: Workload, outcomes: Sequence[Outcome]) -> float:
    """The share of requests meeting both SLOs."""
    return sum(all(work.meets(o)) for o in outcomes) / len(outcomes)


def goodput(rates: Sequence[float], attained: Sequence[float], target: float = ATTAINMENT_TARGET) -> float:
    """DistServe's goodput from a curve: the highest rate whose attainment is at least `target`, interpolated
    linearly to where the curve crosses it after the last rate that meets it; 0 if the lowest rate misses; the
    highest rate if none does (a lower bound, said as such)."""
    for j, share in enumerate(attained):
        if share < target:
            if j == 0:
                return 0.0
            low, high = rates[j - 1], rates[j]
            return low + (high - low) * (attained[j - 1] - target) / (attained[j - 1] - share)
    return rates[-1]


def capacity_per_s(model: StepModel, work: Workload, layout: Layout) -> float:
    """Throughput with no SLO (requests/s, all instances): the busiest resource at its best batch.
    Colocated, per instance: 1 / (prefill per request + (O - 1) decode steps at the memory's batch / that batch).
    Disaggregated: min(prefill pool, the links, decode pool), each at its best."""
    per_prompt = max(1, PREFILL_TOKEN_BUDGET // model.prompt_tokens)
    prefill_s = iteration_s(model, 0, per_prompt * model.prompt_tokens) / per_prompt
    decode_s = (work.output_tokens - 1) * iteration_s(model, work.memory_batch, 0) / work.memory_batch
    if layout.kind == "colocated":
        return layout.instances / (prefill_s + decode_s)
    link = layout.prefill_instances / work.transfer_s if work.transfer_s else math.inf
    return min(layout.prefill_instances / prefill_s, link, layout.decode_instances / decode_s)


@dataclass(frozen=True)
class Curve:
    """One layout over the rates: attainment, TTFT/TPOT misses, and its goodput."""

    layout: Layout
    gpus: int
    rates_per_s: tuple[float, ...]
    attainment: tuple[float, ...]
    ttft_met: tuple[float, ...]
    tpot_met: tuple[float, ...]
    goodput_per_s: float  # all its GPUs together
    capacity_per_s: float  # no SLO
    limit: str = ""  # what holds it back, in words (`why_limited`)
    limit_kind: str = ""  # "tpot", "link", "prefill queue", "none"

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput_per_s / self.gpus

    @property
    def capacity_per_gpu(self) -> float:
        return self.capacity_per_s / self.gpus

    def met_per_gpu(self) -> list[float]:
        """Requests/s per GPU meeting both SLOs at each rate."""
        return [rate * share / self.gpus for rate, share in zip(self.rates_per_s, self.attainment, strict=True)]


def rate_grid(top_per_s: float, points: int = RATE_POINTS) -> list[float]:
    return [top_per_s * (k + 1) / points for k in range(points)]


def why_limited(model: StepModel, work: Workload, layout: Layout, outcomes: Sequence[Outcome]) -> tuple[str, str]:
    """What fails first past the goodput: TPOT misses (the decode batch the TPOT SLO allows; colocated, prefills
    stalling or slowing decode steps) or TTFT misses (the link's exposed transfer, or the prefill queue)."""
    missed = [(o, *work.meets(o)) for o in outcomes]
    ttft_misses = [o for o, ttft_ok, _ in missed if not ttft_ok]
    tpot_misses = sum(1 for _, _, tpot_ok in missed if not tpot_ok)
    if not ttft_misses and not tpot_misses:
        return "none", "no SLO missed up to the highest rate modelled"
    if tpot_misses >= len(ttft_misses):
        if layout.kind == "disaggregated":
            batch = batch_under_tpot(model, work.tpot_slo_s, work.memory_batch)
            return "tpot", f"the decode batch the TPOT SLO allows (at most {batch:,} per decode instance)"
        if layout.chunk_tokens:
            return "tpot", "prompt chunks slowing every decode step past the TPOT SLO"
        return "tpot", "prefills stalling its decode steps past the TPOT SLO"
    queue_s = sum(o.queue_s for o in ttft_misses) / len(ttft_misses)
    link_s = sum(o.exposed_s for o in ttft_misses) / len(ttft_misses)
    if link_s > queue_s:
        return "link", f"the link: {link_s * 1e3:,.0f} ms of KV transfer exposed per request that misses TTFT"
    return "prefill queue", f"the prefill queue: {queue_s * 1e3:,.0f} ms waited per request that misses TTFT"


def curve(
    model: StepModel,
    work: Workload,
    layout: Layout,
    gpus_per_instance: int,
    rates: Sequence[float],
    budget: Budget | None = None,
) -> Curve:
    """Attainment at each rate (`budget`: the what-if's simulated iterations left). A rate above the layout's no-SLO
    capacity is not simulated: its queue grows without bound, so in the long run every request misses (a finite run of
    a few hundred requests would hide that, its early requests served before the backlog builds), and its attainment
    is 0."""
    capacity = capacity_per_s(model, work, layout)
    attained, ttft_met, tpot_met, runs = [], [], [], []
    for rate in rates:
        if rate > capacity:
            attained.append(0.0), ttft_met.append(0.0), tpot_met.append(0.0)
            continue
        outcomes = simulate(model, work, layout, rate, budget)
        runs.append(outcomes)
        meets = [work.meets(o) for o in outcomes]
        attained.append(sum(a and b for a, b in meets) / len(meets))
        ttft_met.append(sum(a for a, _ in meets) / len(meets))
        tpot_met.append(sum(b for _, b in meets) / len(meets))
    best = min(goodput(rates, attained), capacity)
    past = next((j for j, share in enumerate(attained) if share < ATTAINMENT_TARGET), None)
    if past is not None and rates[past] > capacity:
        kind, limit = "capacity", capacity_words(model, work, layout)
    else:
        outcomes = runs[past] if past is not None else runs[-1]
        kind, limit = why_limited(model, work, layout, outcomes)
    return Curve(
        layout,
        layout.instances * gpus_per_instance,
        tuple(rates),
        tuple(attained),
        tuple(ttft_met),
        tuple(tpot_met),
        best,
        capacity,
        limit,
        kind,
    )


def capacity_words(model: StepModel, work: Workload, layout: Layout) -> str:
    """Which resource sets a layout's no-SLO capacity, in words."""
    if layout.kind == "colocated":
        return f"its capacity ({capacity_per_s(model, work, layout):.3g} requests/s: prefill and decode share the GPUs)"
    per_prompt = max(1, PREFILL_TOKEN_BUDGET // model.prompt_tokens)
    prefill = layout.prefill_instances * per_prompt / iteration_s(model, 0, per_prompt * model.prompt_tokens)
    link = layout.prefill_instances / work.transfer_s if work.transfer_s else math.inf
    decode = (
        layout.decode_instances
        * work.memory_batch
        / ((work.output_tokens - 1) * iteration_s(model, work.memory_batch, 0))
    )
    side = min(("the prefill pool", prefill), ("the link", link), ("the decode pool", decode), key=lambda kv: kv[1])
    return f"{side[0]}'s capacity ({side[1]:.3g} requests/s)"


def crossover_per_s(first: Curve, second: Curve) -> float | None:
    """The lowest rate at which the better of the two (requests/s per GPU meeting both SLOs) changes; None if never."""
    sign = None
    for rate, a, b in zip(first.rates_per_s, first.met_per_gpu(), second.met_per_gpu(), strict=True):
        if abs(a - b) <= TIE * max(a, b, 1e-12):
            continue
        now = a > b
        if sign is not None and now != sign:
            return rate
        sign = now
    return None


def verdict(colocated: Curve, disaggregated: Curve) -> str:
    """The one sentence computed from the curves: which layout wins (the better colocated one against the
    disaggregated one), by how much, and why."""
    ranked = sorted((colocated, disaggregated), key=lambda c: c.goodput_per_gpu, reverse=True)
    best, runner = ranked
    if best.goodput_per_gpu == 0:
        return (
            "No layout meets both SLOs for 90 % of requests even at the lowest rate: "
            + "; ".join(f"{c.layout.label} is held back by {c.limit}" for c in ranked)
            + "."
        )
    figures = f"{best.goodput_per_gpu:.3g} vs {runner.goodput_per_gpu:.3g} requests/s per GPU meeting both SLOs"
    if runner.goodput_per_gpu >= best.goodput_per_gpu * (1 - TIE):
        return (
            f"{best.layout.label} and {runner.layout.label} tie ({figures}, within {TIE:.0%}): "
            f"{best.layout.label} is held back by {best.limit}; {runner.layout.label} by {runner.limit}."
        )
    ratio = best.goodput_per_gpu / runner.goodput_per_gpu if runner.goodput_per_gpu else math.inf
    by = f"{ratio:.2f}x" if math.isfinite(ratio) else "the other meets none"
    return (
        f"{best.layout.label} wins by {by} ({figures}): {runner.layout.label} is held back by {runner.limit}; "
        f"{best.layout.label} by {best.limit}."
    )
