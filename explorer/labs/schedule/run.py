"""Serving lab 2's run: `run_schedule()` plans the workload (`explorer.labs.schedule.workload`: how prompts are chosen),
serves it with the instrumented engine (`explorer.labs.schedule.engine`) and, on request, the baselines
(`explorer.labs.schedule.baselines`), then checks every request's tokens against a solo greedy run.

What holds the device: one unit at a time, each unit whole: the engine's run of the workload, the prefix-off run,
static batching and one-at-a-time serving are each one wall-clock span (arrival times, a background engine thread),
so nothing passes the device on inside them; `run_schedule` calls `make_way` only between them and between the
solo reference runs (whose timings are unused). Progress reports during a unit only move the bar.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import transformers

from explorer.core.lab_progress import QUIET, LabProgress, Report
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, ModelInfo, Trace
from explorer.labs.schedule import baselines, engine
from explorer.labs.schedule.records import RequestRecord, ScheduleRun, ServedMode, StepRecord
from explorer.labs.schedule.workload import (
    EngineSettings,
    PlannedRequest,
    Workload,
    check_fits,
    plan_requests,
    validate,
)


def load_average() -> float | None:
    """The 1-minute load average, kept beside each measurement: on a shared machine it says how busy it was."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


@dataclass(frozen=True)
class EngineRun:
    """The workload served once by the engine with one set of settings."""

    settings: EngineSettings
    steps: tuple[StepRecord, ...]
    requests: tuple[RequestRecord, ...]
    num_blocks: int  # as the engine built the cache
    load_avg_1m: float | None  # the OS's 1-minute load average as the run finished


def serve_engine(
    lm: LoadedModel, planned: Sequence[PlannedRequest], settings: EngineSettings, stop_at_eos: bool, progress: Report
) -> EngineRun:
    steps, requests, num_blocks = engine.serve(lm, planned, settings, stop_at_eos, progress)
    return EngineRun(settings, steps, requests, num_blocks, load_average())


def serve_baselines(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    device: DeviceProfile,
    stop_at_eos: bool,
    progress: LabProgress,
) -> tuple[list[ServedMode], dict[str, Trace]]:
    """Static batching, then one request at a time (whose runs are also the solo references): two measured spans,
    the device passed on only between them."""
    static = baselines.serve_static_batch(lm, planned, stop_at_eos, progress.span(0.55, 0.7))
    static = replace(static, load_avg_1m=load_average())
    progress.make_way()
    sequential, solo = baselines.serve_one_at_a_time(lm, planned, device, stop_at_eos, progress.span(0.7, 1))
    return [static, replace(sequential, load_avg_1m=load_average())], solo


def sliding_fields(m: ModelInfo, settings: EngineSettings) -> dict[str, Any]:
    """A model with sliding-window layers: its windows (a contiguous reservation holds at most window - 1 positions in
    such a layer) and the bytes of one recorded block, which holds only the full layers' positions in a hybrid (the
    engine pages each kind of layer apart). Nothing for a full-attention model: its run keeps the plain fields."""
    if not m.sliding_layers:
        return {}
    recorded_layers = m.full_layers or m.layers  # the full layers' allocator, else the one sliding allocator
    per_layer = m.kv_bytes_per_token_per_layer
    return {
        "layer_windows": m.windows,
        "kv_bytes_per_token_per_layer": per_layer,
        "recorded_block_bytes": settings.block_size * per_layer * recorded_layers,
    }


def schedule_run(
    lm: LoadedModel, device: DeviceProfile, workload: Workload, served: EngineRun, solo: dict[str, Trace]
) -> ScheduleRun:
    """The record of one engine run, every request's tokens checked against its solo run."""
    return ScheduleRun(
        workload=workload,
        settings=served.settings,
        model=lm.info.display_name,
        dtype=lm.info.dtype,
        device=device.name,
        kv_bytes_per_token=lm.info.kv_bytes_per_token,
        engine_num_blocks=served.num_blocks,
        steps=served.steps,
        requests=served.requests,
        checks=baselines.check_against_solo(served.requests, solo, lm.tokenizer),
        load_avg_1m=served.load_avg_1m,
        max_context=lm.info.max_context,
        transformers_version=transformers.__version__,
        **sliding_fields(lm.info, served.settings),
    )


def run_schedule(
    lm: LoadedModel,
    device: DeviceProfile,
    workload: Workload,
    settings: EngineSettings,
    *,
    compare: bool = False,
    progress: LabProgress = QUIET,
) -> ScheduleRun:
    """Serve the workload with the engine, then check every request's tokens against a solo greedy run.

    With a prefix and prefix sharing on, the engine serves the workload again with sharing off. With `compare`, the
    solo runs are timed as a one-at-a-time server (arrival times kept) and static batching serves it too. The device
    passes to anyone waiting only between those runs (`make_way`), never inside one: each is one measured span.
    """
    validate(workload, settings)
    planned = plan_requests(lm, workload)
    check_fits(lm, planned, settings)
    stop_at_eos = workload.stop_at_eos
    engine.warm_up(lm, settings)
    served = serve_engine(lm, planned, settings, stop_at_eos, progress.span(0.0, 0.4))
    progress.make_way()
    prefix_off = None
    if workload.prefix and settings.prefix_sharing:
        off = replace(settings, prefix_sharing=False)
        prefix_off = serve_engine(lm, planned, off, stop_at_eos, progress.span(0.4, 0.55))
        progress.make_way()
    if compare:
        modes, solo = serve_baselines(lm, planned, device, stop_at_eos, progress)
    else:
        solo_progress = progress.span(0.55, 1.0)
        modes, solo = [], baselines.solo_traces(lm, planned, device, stop_at_eos, solo_progress, progress.make_way)
    check = baselines.check_against_solo
    run = replace(
        schedule_run(lm, device, workload, served, solo),
        baselines=tuple(replace(m, checks=check(m.requests, solo, lm.tokenizer)) for m in modes),
    )
    if prefix_off is not None:
        run = replace(run, prefix_off=schedule_run(lm, device, workload, prefix_off, solo))
    progress(1.0, "Done.")
    return run
