"""Split the phases: prefill and decode on separate GPUs (xPyD) against the same GPUs colocated, with and without
chunked prefill, under the session's TTFT and TPOT SLOs: each request's TTFT and TPOT, and goodput as DistServe
defines it (arXiv 2401.09670: the highest request rate at which at least 90 % of requests meet both SLOs), per GPU.

Step times come from a `StepModel`: the roofline of `explorer.scale.floors` (modelled, spec figures), or a run's own
measured prefill and decode times (`explorer.scale.split_measured`). Every formula is in `split_explain`.

Queueing: a small deterministic simulation, not a closed formula. Requests arrive as a Poisson stream (exponential
gaps from a fixed seed, the same gaps scaled for every rate: common random numbers, so the curves are smooth and a
rerun gives the same figures). Why not M/D/c or M/M/c: a prefill server is deterministic (M/D/c fits it), but the
decode side is a batch whose step time grows with its size, colocated prefills stall decode steps, and a slow link
queues transfers; no textbook formula covers those together, and an iteration-level simulation is how Vidur and
DistServe's own simulator answer the same question. Each instance runs iteration by iteration as vLLM's scheduler
does: colocated, prefill first (a waiting prompt pauses every decode step: the stall), or chunked (each iteration
carries every running request's next token and up to `chunk_tokens` of prompt, as Sarathi-Serve); disaggregated, a
prefill pool takes prompts from one FCFS queue, each prefill instance sends each request's KV over its link (FCFS),
and a decode pool (requests dealt round robin) batches them.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from explorer.core.errors import BadInput

ATTAINMENT_TARGET = 0.9  # DistServe's goodput: the rate at which 90 % of requests meet both SLOs
PREFILL_TOKEN_BUDGET = 8192  # prompt tokens one iteration may take (an assumption, of the order of vLLM's
# max_num_batched_tokens); at least one whole prompt
REQUESTS = 300  # simulated per rate: enough for a 90th percentile, few enough for a page
RATE_POINTS = 24
TIE = 0.05  # goodputs within 5 % of each other are a tie, not a win
SEED = 0


@dataclass(frozen=True)
class Parts:
    """One pass's roofline parts: maths, weights read, KV moved, all-reduces (seconds)."""

    compute_s: float
    weights_s: float
    kv_s: float
    link_s: float = 0.0

    @property
    def floor_s(self) -> float:
        return max(self.compute_s, self.weights_s + self.kv_s) + self.link_s


class StepModel(Protocol):
    """Where a what-if takes its step times from: the roofline (modelled) or a run (measured)."""

    prompt_tokens: int
    layers: int  # a streamed transfer sends one layer's KV as each layer finishes
    source: str  # "modelled" or "measured ..."

    def prefill(self) -> Parts: ...  # one prompt of `prompt_tokens`

    def decode(self, batch: int) -> Parts: ...  # one step of `batch` requests at the mean decode context

    def taken(self) -> dict[str, Any]: ...  # what it took from a run ({} for the roofline)


def iteration_s(model: StepModel, batch: int, prompt_tokens: int) -> float:
    """One engine iteration: `batch` requests' next token and `prompt_tokens` of prefill (whole prompts or a chunk).
    The weights are read once for both; the prompt's FLOPs, KV and all-reduces scale with its share of a prompt:
    max(decode compute + c/P prefill compute, weights + decode KV + c/P prefill KV) + all-reduces."""
    pre = model.prefill()
    share = prompt_tokens / model.prompt_tokens
    step = model.decode(batch) if batch else Parts(0.0, pre.weights_s, 0.0)
    return (
        max(step.compute_s + share * pre.compute_s, step.weights_s + step.kv_s + share * pre.kv_s)
        + step.link_s
        + share * pre.link_s
    )


def exposed_streamed_s(transfer_s: float, prefill_s: float, layers: int) -> float:
    """Sent layer by layer as the prefill computes them (Mooncake, Dynamo): layer i's KV leaves once layer i is done,
    so the last transfer ends at max(prefill + one layer's transfer, first layer + whole transfer). What the prefill
    does not hide: max(t_x / L, t_x - t_p (L - 1) / L)."""
    return max(transfer_s / layers, transfer_s - prefill_s * (layers - 1) / layers)


def batch_under_tpot(model: StepModel, tpot_slo_s: float, memory_batch: int) -> int:
    """The largest decode batch whose step meets the TPOT SLO (strictly under it) and fits memory (0: not even one
    request meets it); a step's time grows with its batch, so bisect."""
    low, high = 0, memory_batch
    while low < high:
        middle = (low + high + 1) // 2
        if iteration_s(model, middle, 0) < tpot_slo_s:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class Layout:
    """How the GPUs serve: colocated instances (each prefill and decode), or x prefill and y decode instances."""

    kind: str  # "colocated" or "disaggregated"
    instances: int  # colocated: all of them; disaggregated: x + y
    prefill_instances: int = 0
    decode_instances: int = 0
    chunk_tokens: int = 0  # colocated: 0 = prefill first (a prompt stalls decode); else chunked prefill

    @property
    def label(self) -> str:
        if self.kind == "disaggregated":
            return f"{self.prefill_instances}P{self.decode_instances}D"
        return f"colocated x{self.instances}" + (f", chunks of {self.chunk_tokens}" if self.chunk_tokens else "")


@dataclass(frozen=True)
class Outcome:
    """One simulated request (seconds)."""

    arrival_s: float
    ttft_s: float  # its first token's time less its arrival: queue + prefill (+ the exposed KV transfer)
    tpot_s: float  # (last token - first token) / (output tokens - 1)
    queue_s: float  # waiting for a prefill to start
    exposed_s: float  # the KV transfer the prefill did not hide (0 colocated)


@dataclass(frozen=True)
class Workload:
    """What the simulation serves and checks."""

    output_tokens: int
    ttft_slo_s: float
    tpot_slo_s: float
    memory_batch: int  # requests one instance's memory holds at the longest context (prompt + output)
    transfer_s: float = 0.0  # one request's KV over the link, whole
    streamed: bool = True
    requests: int = REQUESTS
    seed: int = SEED

    def meets(self, outcome: Outcome) -> tuple[bool, bool]:
        return outcome.ttft_s < self.ttft_slo_s, outcome.tpot_s < self.tpot_slo_s  # strictly under, as every SLO check


def arrivals(rate_per_s: float, requests: int, seed: int) -> list[float]:
    """Poisson arrivals: exponential gaps of unit mean from a fixed seed, divided by the rate."""
    draw = random.Random(seed)
    times, now = [], 0.0
    for _ in range(requests):
        now += draw.expovariate(1.0)
        times.append(now / rate_per_s)
    return times


def _take_prompts(waiting: deque[int], times: Sequence[float], now: float, room: int, prompt_tokens: int) -> list[int]:
    """FCFS prompts arrived by `now`, as many as the token budget and the memory's `room` allow (at least one)."""
    fit = max(1, PREFILL_TOKEN_BUDGET // prompt_tokens)
    taken: list[int] = []
    while waiting and times[waiting[0]] <= now and len(taken) < min(fit, room):
        taken.append(waiting.popleft())
    return taken


def simulate_colocated(model: StepModel, work: Workload, times: Sequence[float], layout: Layout) -> list[Outcome]:
    """Colocated instances sharing one FCFS queue; each iteration is prefill-first or chunked (`Layout`)."""
    n, decode_steps = len(times), work.output_tokens - 1
    waiting = deque(range(n))
    first = [math.inf] * n
    started = [math.inf] * n
    last = [math.inf] * n
    # Per instance: clock, decode steps taken, running requests as (step they finish at, request), and the prompt
    # being chunked with the tokens done of it.
    clocks = [(0.0, i) for i in range(layout.instances)]
    steps = [0] * layout.instances
    running: list[list[tuple[int, int]]] = [[] for _ in range(layout.instances)]
    partial: list[list[int]] = [[] for _ in range(layout.instances)]  # [request, tokens done]
    p = model.prompt_tokens
    while clocks:
        now, i = heapq.heappop(clocks)
        batch, room = len(running[i]), work.memory_batch - len(running[i]) - (1 if partial[i] else 0)
        if layout.chunk_tokens:
            budget, chunk, joined = layout.chunk_tokens, 0, []
            while budget and (partial[i] or (waiting and times[waiting[0]] <= now and room > 0)):
                if not partial[i]:
                    partial[i] = [waiting.popleft(), 0]
                    started[partial[i][0]] = now
                    room -= 1
                take = min(budget, p - partial[i][1])
                partial[i][1] += take
                budget, chunk = budget - take, chunk + take
                if partial[i][1] == p:
                    joined.append(partial[i][0])
                    partial[i] = []
            if not chunk and not batch:
                if waiting:
                    heapq.heappush(clocks, (max(now, times[waiting[0]]), i))
                continue
            end = now + iteration_s(model, batch, chunk)
            if batch:
                steps[i] += 1
            for r in joined:
                first[r] = end
                heapq.heappush(running[i], (steps[i] + decode_steps, r))
        else:
            prompts = _take_prompts(waiting, times, now, room, p) if room > 0 else []
            if prompts:
                end = now + iteration_s(model, 0, len(prompts) * p)  # decode waits: the stall
                for r in prompts:
                    started[r], first[r] = now, end
                    heapq.heappush(running[i], (steps[i] + decode_steps, r))
            elif batch:
                end = now + iteration_s(model, batch, 0)
                steps[i] += 1
            else:
                if waiting:
                    heapq.heappush(clocks, (max(now, times[waiting[0]]), i))
                continue
        while running[i] and running[i][0][0] <= steps[i]:
            last[heapq.heappop(running[i])[1]] = end
        heapq.heappush(clocks, (end, i))
    return [
        Outcome(times[r], first[r] - times[r], (last[r] - first[r]) / decode_steps, started[r] - times[r], 0.0)
        for r in range(n)
    ]


def simulate_disaggregated(model: StepModel, work: Workload, times: Sequence[float], layout: Layout) -> list[Outcome]:
    """A prefill pool on one FCFS queue, each instance's KV sent over its own link (FCFS), then a decode pool."""
    n, p, layers = len(times), model.prompt_tokens, model.layers
    waiting = deque(range(n))
    started, ready, exposed = [math.inf] * n, [math.inf] * n, [0.0] * n
    link_free = [0.0] * layout.prefill_instances
    clocks = [(0.0, i) for i in range(layout.prefill_instances)]
    while clocks:
        now, i = heapq.heappop(clocks)
        prompts = _take_prompts(waiting, times, now, work.memory_batch, p)
        if not prompts:
            if waiting:
                heapq.heappush(clocks, (max(now, times[waiting[0]]), i))
            continue
        end = now + iteration_s(model, 0, len(prompts) * p)
        layer_s = (end - now) / layers
        for r in prompts:
            started[r] = now
            if work.streamed:  # layer by layer from the first layer's end; the last layer's KV leaves after `end`
                begin = max(now + layer_s, link_free[i])
                finish = max(begin + work.transfer_s, end + work.transfer_s / layers)
            else:
                finish = max(end, link_free[i]) + work.transfer_s
            link_free[i], ready[r], exposed[r] = finish, finish, finish - end
        heapq.heappush(clocks, (end, i))
    last = [math.inf] * n
    for d in range(layout.decode_instances):
        mine = sorted((ready[r], r) for r in range(d, n, layout.decode_instances))
        _decode_pool(model, work, mine, last)
    steps = work.output_tokens - 1
    return [
        Outcome(times[r], ready[r] - times[r], (last[r] - ready[r]) / steps, started[r] - times[r], exposed[r])
        for r in range(n)
    ]


def _decode_pool(model: StepModel, work: Workload, arriving: list[tuple[float, int]], last: list[float]) -> None:
    """One decode instance: admits what has arrived (as memory allows) before each step, batches every running one."""
    now, steps, at, running = 0.0, 0, 0, []  # running: (step it finishes at, request)
    while at < len(arriving) or running:
        while at < len(arriving) and arriving[at][0] <= now and len(running) < work.memory_batch:
            heapq.heappush(running, (steps + work.output_tokens - 1, arriving[at][1]))
            at += 1
        if not running:
            now = arriving[at][0]
            continue
        now += iteration_s(model, len(running), 0)
        steps += 1
        while running and running[0][0] <= steps:
            last[heapq.heappop(running)[1]] = now


def simulate(model: StepModel, work: Workload, layout: Layout, rate_per_s: float) -> list[Outcome]:
    times = arrivals(rate_per_s, work.requests, work.seed)
    run = simulate_disaggregated if layout.kind == "disaggregated" else simulate_colocated
    return run(model, work, times, layout)


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


@dataclass(frozen=True)
class Distributions:
    """Each layout's requests at one rate: TTFT and TPOT of every one."""

    rate_per_s: float
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)


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


def curve(model: StepModel, work: Workload, layout: Layout, gpus_per_instance: int, rates: Sequence[float]) -> Curve:
    """Attainment at each rate. A rate above the layout's no-SLO capacity is not simulated: its queue grows without
    bound, so in the long run every request misses (a finite run of a few hundred requests would hide that, its
    early requests served before the backlog builds), and its attainment is 0."""
    capacity = capacity_per_s(model, work, layout)
    attained, ttft_met, tpot_met, runs = [], [], [], []
    for rate in rates:
        if rate > capacity:
            attained.append(0.0), ttft_met.append(0.0), tpot_met.append(0.0)
            continue
        outcomes = simulate(model, work, layout, rate)
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


def check_layout(prefill: int, decode: int, colocated: int, chunk_tokens: int, output_tokens: int) -> None:
    if prefill < 1 or decode < 1 or colocated < 1:
        raise BadInput("Each pool needs at least one instance: x prefill, y decode, N colocated all >= 1.")
    if chunk_tokens < 0:
        raise BadInput(f"The chunk size must be 0 (no chunking) or more, not {chunk_tokens}.")
    if output_tokens < 2:
        raise BadInput(f"Output tokens must be at least 2 (TPOT needs a second token), not {output_tokens}.")
