"""The split what-if's simulation: Poisson arrivals from a fixed random seed, and each layout served iteration by
iteration, as `explorer.scale.split`'s opening lines say why (colocated: prefill-first or chunked; disaggregated: a
prefill pool on one FCFS queue, each instance's link, a decode pool)."""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.errors import BadInput
from explorer.scale.split import PREFILL_TOKEN_BUDGET, Layout, Outcome, StepModel, Workload, iteration_s

# Engine iterations one what-if may simulate, every layout and rate together (~3 s of one core): the page runs on the
# web tier, where any visitor can start it, so its CPU has a cap. The defaults take ~0.3-0.9 M.
ITERATION_BUDGET = 4_000_000


class Budget:
    """What is left of one what-if's iteration budget (one per what-if, never shared): past it, one line refuses."""

    def __init__(self, iterations: int | None = None) -> None:
        self.iterations = ITERATION_BUDGET if iterations is None else iterations
        self.left = self.iterations

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise BadInput(
                f"Too much to simulate here: over {self.iterations:,} engine iterations (requests x output tokens / "
                "the batch the memory allows): ask for fewer output tokens, a shorter prompt or more GPUs per instance."
            )


def arrivals(rate_per_s: float, requests: int, seed: int) -> list[float]:
    """Poisson arrivals: exponential gaps of unit mean from a fixed random seed, divided by the rate."""
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


def simulate_colocated(
    model: StepModel, work: Workload, times: Sequence[float], layout: Layout, allowance: Budget | None = None
) -> list[Outcome]:
    """Colocated instances sharing one FCFS queue; each iteration is prefill-first or chunked (`Layout`)."""
    allowance = allowance or Budget()
    n, decode_steps = len(times), work.output_tokens - 1
    waiting = deque(range(n))
    first = [math.inf] * n
    started = [math.inf] * n
    last = [math.inf] * n
    # Per instance: clock, decode steps taken, running (step it finishes at, request), the prompt being chunked.
    clocks = [(0.0, i) for i in range(layout.instances)]
    steps = [0] * layout.instances
    running: list[list[tuple[int, int]]] = [[] for _ in range(layout.instances)]
    partial: list[list[int]] = [[] for _ in range(layout.instances)]  # [request, tokens done]
    p, line = model.prompt_tokens, Line(waiting, times, started)
    while clocks:
        allowance.spend()
        now, i = heapq.heappop(clocks)
        batch, room = len(running[i]), work.memory_batch - len(running[i]) - (1 if partial[i] else 0)
        if layout.chunk_tokens:
            partial[i], chunk, joined = _take_chunk(partial[i], line, now, room, p, layout.chunk_tokens)
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


@dataclass(frozen=True)
class Line:
    """The colocated instances' one FCFS queue: requests waiting (by index), their arrival times, when each started."""

    waiting: deque[int]
    times: Sequence[float]
    started: list[float]


def _take_chunk(
    partial: list[int], line: Line, now: float, room: int, prompt_tokens: int, budget: int
) -> tuple[list[int], int, list[int]]:
    """One chunked iteration's prefill: the prompt being chunked (`partial`: [request, tokens done], or empty), then
    arrived prompts while the token `budget` and the batch's `room` last. (what is left partial, tokens taken, the
    requests whose prompt finished in it)."""
    chunk, joined = 0, []
    while budget and (partial or (line.waiting and line.times[line.waiting[0]] <= now and room > 0)):
        if not partial:
            partial = [line.waiting.popleft(), 0]
            line.started[partial[0]] = now
            room -= 1
        take = min(budget, prompt_tokens - partial[1])
        partial[1] += take
        budget, chunk = budget - take, chunk + take
        if partial[1] == prompt_tokens:
            joined.append(partial[0])
            partial = []
    return partial, chunk, joined


def simulate_disaggregated(
    model: StepModel, work: Workload, times: Sequence[float], layout: Layout, budget: Budget | None = None
) -> list[Outcome]:
    """A prefill pool on one FCFS queue, each instance's KV sent over its own link (FCFS), then a decode pool."""
    budget = budget or Budget()
    n, p, layers = len(times), model.prompt_tokens, model.layers
    waiting = deque(range(n))
    started, ready, exposed = [math.inf] * n, [math.inf] * n, [0.0] * n
    link_free = [0.0] * layout.prefill_instances
    clocks = [(0.0, i) for i in range(layout.prefill_instances)]
    while clocks:
        budget.spend()
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
        _decode_pool(model, work, mine, last, budget)
    steps = work.output_tokens - 1
    return [
        Outcome(times[r], ready[r] - times[r], (last[r] - ready[r]) / steps, started[r] - times[r], exposed[r])
        for r in range(n)
    ]


def _decode_pool(
    model: StepModel, work: Workload, arriving: list[tuple[float, int]], last: list[float], budget: Budget
) -> None:
    """One decode instance: admits what has arrived (as memory allows) before each step, batches every running one."""
    now, steps, at, running = 0.0, 0, 0, []  # running: (step it finishes at, request)
    while at < len(arriving) or running:
        budget.spend()
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


def simulate(
    model: StepModel, work: Workload, layout: Layout, rate_per_s: float, budget: Budget | None = None
) -> list[Outcome]:
    """One layout at one rate; `budget`: the what-if's iterations left (None: a budget of its own)."""
    times = arrivals(rate_per_s, work.requests, work.seed)
    run = simulate_disaggregated if layout.kind == "disaggregated" else simulate_colocated
    return run(model, work, times, layout, budget)
