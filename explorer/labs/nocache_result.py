"""The no-cache lab's result and its model-free arithmetic, torch-free: both loops' steps (`Step`), the cached loop's
trace, the growth claim and the projections (`NoCacheResult`), the modelled floors and the checks before a run. Read
back from JSON (`NoCacheResult.from_json`) for a bundled result, with no model and no torch; the run itself is in
`explorer.labs.nocache`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from explorer.core.errors import BadInput
from explorer.core.limits import check_budget
from explorer.core.request import check_fits_context
from explorer.core.roofline import pass_cost, pass_flops, roofline_time, weight_bytes_read
from explorer.core.trace import DeviceProfile, JsonRecord, ModelInfo, Trace

DEFAULT_NEW_TOKENS = 64
MIN_NEW_TOKENS = 3  # the prefill and two decode steps at least: each loop's decode steps are measured
DEFAULT_BUDGET_S = 600.0
PROJECTED_TOKENS = (500, 2000)
EDGE_STEPS = 8  # the growth compares the mean of the first and of the last this many decode steps
CLEARLY_MORE_FACTOR = 2.0  # "clearly more": the naive loop's growth over twice the cached loop's ...
CLEARLY_MORE_MIN_S = 1e-3  # ... and over 1 ms, well above the jitter of one step on a shared CPU


@dataclass(frozen=True)
class Step:
    """One step of a loop: the position it predicts from, what it computed, how long it took."""

    position: int  # sequence length the step ends at (prompt + tokens so far)
    tokens_processed: int  # tokens whose layers ran: the whole sequence without a cache, 1 with it
    wall_s: float  # measured
    flops: int  # modelled
    bytes_moved: int  # modelled: weights read (+ the cache's traffic when there is one)
    token_id: int


@dataclass(frozen=True)
class Projection:
    """Both loops' totals for `new_tokens`, modelled step by step and scaled by the rates a run achieved."""

    new_tokens: int
    cached_s: float
    uncached_s: float
    clamped_steps: int  # cached steps whose scaled model exceeded the naive step's, held at the naive step's time


@dataclass(frozen=True)
class NoCacheResult(JsonRecord):
    prompt_len: int
    cached: tuple[Step, ...]
    uncached: tuple[Step, ...]
    cached_trace: Trace  # the cached loop as the engine recorded it: its passes hold the measured cache bytes
    estimate_s: float  # modelled before the run: the naive loop's floor at the device's figures, against the budget

    @property
    def same_tokens(self) -> bool:
        return [s.token_id for s in self.cached] == [s.token_id for s in self.uncached]

    @property
    def compares_edges(self) -> bool:
        """Enough decode steps for the first 8 and the last 8 not to overlap (step 0 is the prefill)."""
        return len(self.cached) - 1 >= 2 * EDGE_STEPS

    @staticmethod
    def edge_mean_s(steps: tuple[Step, ...], first: bool, n: int = EDGE_STEPS) -> float:
        chosen = steps[1:][:n] if first else steps[-n:]  # step 0 is the prefill in both loops: it is the same work
        return float(np.mean([s.wall_s for s in chosen]))

    def growth_s(self, steps: tuple[Step, ...]) -> float:
        """How much slower the last 8 steps are than the first 8 decode steps (mean, measured)."""
        return self.edge_mean_s(steps, first=False) - self.edge_mean_s(steps, first=True)

    @property
    def grows_clearly_more(self) -> bool:
        """The naive loop's growth is over twice the cached loop's and over 1 ms: a margin, not any difference."""
        cached, uncached = self.growth_s(self.cached), self.growth_s(self.uncached)
        return self.compares_edges and uncached > max(CLEARLY_MORE_MIN_S, CLEARLY_MORE_FACTOR * max(cached, 0.0))

    def _scale(self, steps: tuple[Step, ...], cached: bool) -> float:
        floors = loop_floors_s(self.cached_trace.model, self.cached_trace.device, self.prompt_len, len(steps), cached)
        return sum(s.wall_s for s in steps) / sum(floors)

    @cached_property
    def cached_scale(self) -> float:
        """The rate the cached loop achieved: its measured time over its modelled floor, summed over its steps (at
        the device figures every projection uses, so one number carries this run's speed to any length)."""
        return self._scale(self.cached, cached=True)

    @cached_property
    def uncached_scale(self) -> float:
        """The same for the naive loop."""
        return self._scale(self.uncached, cached=False)

    def project(self, new_tokens: int) -> Projection:
        """Modelled: each step's floor from its FLOPs and bytes up to `new_tokens`, times the loop's achieved scale.

        A cached step computes one token of what the naive step at the same length computes for all of them, so a
        cached step is never projected slower than the naive one: where this run's scales would make it so (a short
        run whose decode steps are all overhead), it is held at the naive step's time and counted."""
        model, device = self.cached_trace.model, self.cached_trace.device
        cached = [self.cached_scale * f for f in loop_floors_s(model, device, self.prompt_len, new_tokens, True)]
        uncached = [self.uncached_scale * f for f in loop_floors_s(model, device, self.prompt_len, new_tokens, False)]
        clamped = sum(c > u for c, u in zip(cached, uncached))
        return Projection(new_tokens, sum(min(c, u) for c, u in zip(cached, uncached)), sum(uncached), clamped)

    def projection_s(self, new_tokens: int) -> dict[str, float]:
        """Each loop's projected total for `new_tokens` (modelled, see `project`)."""
        projected = self.project(new_tokens)
        return {"cached": projected.cached_s, "uncached": projected.uncached_s}

    @property
    def projection_method(self) -> str:
        """How the projections were made, with this run's scales: for the caption and the JSON."""
        steps = len(self.cached)
        text = (
            "modelled: each step's FLOPs and bytes up to N new tokens, its floor at this device's figures, scaled by "
            f"this run's achieved rate (its {steps} measured steps took {self.cached_scale:.2f}x their floor with the "
            f"cache and {self.uncached_scale:.2f}x without)"
        )
        clamped = [p for p in map(self.project, PROJECTED_TOKENS) if p.clamped_steps]
        if clamped:
            text += (
                f"; at {clamped[0].clamped_steps} of {clamped[0].new_tokens} steps the cached step would have been "
                "projected slower than the naive one and is held at the naive step's time"
            )
        past = [n for n in PROJECTED_TOKENS if self.prompt_len + n > self.cached_trace.model.max_context]
        if past:
            text += f"; {past[0]} new tokens and more run past this model's context of "
            text += f"{self.cached_trace.model.max_context} tokens: arithmetic only"
        return text

    @property
    def naive_measured_s(self) -> float:
        return sum(s.wall_s for s in self.uncached)

    @property
    def estimate_note(self) -> str:
        """The naive loop against its estimate before the run (a floor at the device's figures), in words."""
        took, estimate = self.naive_measured_s, self.estimate_s
        said = f"the naive loop took {took:.1f} s against an estimate of {estimate:.1f} s"
        if took < estimate:
            return (
                f"{said}: faster than the device figures predict: the figures may have been taken while the device "
                "was busy"
            )
        return (
            f"{said} ({took / estimate:.1f}x): its passes ran below the device's measured rates, which the estimate "
            "assumes: overheads the roofline leaves out, or a machine busier than when its figures were taken"
        )

    def to_dict(self) -> dict[str, Any]:
        def side(steps: tuple[Step, ...]) -> dict[str, object]:
            return {
                "token_ids": [s.token_id for s in steps],
                "step_s": [s.wall_s for s in steps],
                "position": [s.position for s in steps],
                "tokens_processed": [s.tokens_processed for s in steps],
                "flops": [s.flops for s in steps],
                "bytes_moved": [s.bytes_moved for s in steps],
            }

        growth = {"cached": self.growth_s(self.cached), "uncached": self.growth_s(self.uncached)}
        return {
            "prompt_len": self.prompt_len,
            "same_tokens": self.same_tokens,
            "estimate_s_modelled": self.estimate_s,
            "cached": side(self.cached),
            "uncached": side(self.uncached),
            "kv_cache_bytes": [p.kv_cache_bytes for p in self.cached_trace.passes],  # measured
            "growth_last8_minus_first8_s": growth if self.compares_edges else None,
            "uncached_grows_clearly_more": self.grows_clearly_more,
            "estimate_note": self.estimate_note,
            "projection_s_modelled": {str(n): self.projection_s(n) for n in PROJECTED_TOKENS},
            "projection_scale": {"cached": self.cached_scale, "uncached": self.uncached_scale},  # measured / floor
            "projection_clamped_steps": {str(n): self.project(n).clamped_steps for n in PROJECTED_TOKENS},
            "projection_method": self.projection_method,
            "cached_trace": self.cached_trace.to_dict(),  # what the memory chart reads: the measured cache bytes
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoCacheResult:
        """Back from `to_dict`: the measured steps and the trace; every modelled figure (each step's FLOPs and bytes,
        the estimate) is modelled again from them, by today's conventions, and every derived one recomputed."""
        trace = Trace.from_dict(data["cached_trace"])
        prompt_len = int(data["prompt_len"])
        cached = tuple(
            replace(step, flops=p.cost.flops, bytes_moved=p.cost.bytes_moved)
            for step, p in zip(steps_from_dict(data["cached"]), trace.passes, strict=True)
        )
        uncached = tuple(
            replace(step, flops=naive_flops, bytes_moved=naive_bytes)
            for step in steps_from_dict(data["uncached"])
            for naive_flops, naive_bytes in [naive_step_cost(trace.model, step.tokens_processed)]
        )
        estimate = estimate_s(trace.model, trace.device, prompt_len, len(uncached))
        return cls(prompt_len, cached, uncached, trace, estimate)

    @classmethod
    def from_json(cls, text: str) -> NoCacheResult:
        return cls.from_dict(json.loads(text))


STEP_COLUMNS = {"wall_s": "step_s", "token_id": "token_ids"}  # Step fields stored under other names in the JSON


def steps_from_dict(side: dict[str, list[Any]]) -> tuple[Step, ...]:
    """One loop's steps from its columns in the JSON (one list per field, as `to_dict` writes them)."""
    names = [f.name for f in fields(Step)]
    columns = [side[STEP_COLUMNS.get(name, name)] for name in names]
    if len({len(c) for c in columns}) != 1:
        raise ValueError("the loop's columns in this no-cache result have different lengths")
    return tuple(Step(**dict(zip(names, row))) for row in zip(*columns))


def growth_verdict(result: NoCacheResult) -> str:
    """The measured claim in words, with its numbers and the margin it is held to."""
    if not result.compares_edges:
        return (
            f"only {len(result.cached) - 1} decode steps: comparing the first {EDGE_STEPS} with the last {EDGE_STEPS} "
            f"needs {2 * EDGE_STEPS} (ask for at least {2 * EDGE_STEPS + 1} new tokens)"
        )
    cached, uncached = result.growth_s(result.cached), result.growth_s(result.uncached)
    margin = f"over {CLEARLY_MORE_FACTOR:g}x the cached growth and over {CLEARLY_MORE_MIN_S * 1e3:g} ms"
    if result.grows_clearly_more:
        return (
            f"the naive loop's steps grew by clearly more ({uncached * 1e3:+.2f} ms against {cached * 1e3:+.2f} ms: "
            f"{margin})"
        )
    return (
        f"on this run the naive loop's growth ({uncached * 1e3:+.2f} ms against {cached * 1e3:+.2f} ms) is not "
        f'{margin}, the margin for "clearly more": a short sequence or a noisy machine'
    )


def cached_floor_s(info: ModelInfo, device: DeviceProfile, prompt_len: int, step: int) -> float:
    """The cached loop's step `step` at the roofline: the prompt's prefill, then one token onto the cache."""
    if step == 0:
        return pass_cost(info, device, prompt_len, cache_len_before=0).roofline_time_s
    return pass_cost(info, device, 1, cache_len_before=prompt_len + step - 1).roofline_time_s


def naive_step_cost(info: ModelInfo, length: int) -> tuple[int, int]:
    """(FLOPs, bytes) of a naive step over `length` tokens with no cache: a prefill of them all, weights read once."""
    return pass_flops(info, length, length), weight_bytes_read(info, length)


def naive_floor_s(info: ModelInfo, device: DeviceProfile, prompt_len: int, step: int) -> float:
    """The naive loop's step `step` at the roofline: the whole sequence so far, weights read once, nothing kept."""
    flops, bytes_read = naive_step_cost(info, prompt_len + step)
    return roofline_time(flops, bytes_read, device)


@lru_cache(maxsize=64)
def loop_floors_s(
    info: ModelInfo, device: DeviceProfile, prompt_len: int, steps: int, cached: bool
) -> tuple[float, ...]:
    """One loop's modelled floor for its first `steps` steps (the FLOPs and bytes the lab records per step).

    Kept per argument set: a page asks for the same 2,000-step projection a few times per draw (the chart's frame, its
    caption, the plain line, the JSON), each about 0.2 s of roofline arithmetic, and every rerun draws it again."""
    floor = cached_floor_s if cached else naive_floor_s
    return tuple(floor(info, device, prompt_len, k) for k in range(steps))


def estimate_s(info: ModelInfo, device: DeviceProfile, prompt_len: int, new_tokens: int) -> float:
    """The naive loop (the slow one) modelled at the device's measured figures, to show before a long run and refuse
    one past budget: a floor, with no slack guessed on top; the result says by how much a run exceeded it."""
    return sum(loop_floors_s(info, device, prompt_len, new_tokens, cached=False))


def check_settings(new_tokens: int, budget_s: float, max_context: int | None = None) -> None:
    """The checks that need no model (`python -m explorer nocache` runs them before loading; `validate` first): with
    a NaN budget every `estimate > budget` is False, which would switch the guard off."""
    if new_tokens < MIN_NEW_TOKENS:
        raise BadInput(
            f"The no-cache lab needs at least {MIN_NEW_TOKENS} new tokens (the prefill and two decode steps each way)."
        )
    check_fits_context(new_tokens, max_context)
    check_budget(budget_s)


def validate(info: ModelInfo, device: DeviceProfile, prompt_len: int, new_tokens: int, budget_s: float) -> float:
    """Refuse what cannot or should not run, before anything runs; returns the naive loop's estimate (modelled)."""
    check_settings(new_tokens, budget_s)
    if prompt_len + new_tokens > info.max_context:
        raise BadInput(
            f"The prompt is {prompt_len} tokens; with {new_tokens} new tokens it exceeds the context of "
            f"{info.max_context} tokens."
        )
    estimate = estimate_s(info, device, prompt_len, new_tokens)
    if estimate > budget_s:
        raise BadInput(
            f"The naive loop would take at least {estimate:.0f} s (modelled at this device's figures), over the "
            f"{budget_s:.0f} s budget: "
            "ask for fewer new tokens."
        )
    return estimate
