"""The one timing primitive: synchronize, read the clock, call, synchronize, read the clock.

Shared by the engine's passes, the device microbenchmarks, the profiler and the benchmark, so every figure on screen
was timed the same way. On CUDA the GPU's own events time the work (a host clock without a synchronize would time
only the kernel launches); on a CPU `perf_counter` around the call is the whole story.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def synchronize(device: torch.device | str) -> None:
    """Wait until every queued kernel on `device` has finished; a no-op on a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device | str, fn: Callable[..., T], *args: object) -> tuple[T, float]:
    """`fn(*args)` and the seconds it took on `device`, nothing else inside the clocks."""
    device = torch.device(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        synchronize(device)
        start.record()
        out = fn(*args)
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1e3  # elapsed_time is in ms
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


def repeat_timed(device: torch.device | str, fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `fn`, after one untimed warm-up call (kernel choice, page faults)."""
    fn()
    synchronize(device)
    return [max(timed(device, fn)[1], 1e-9) for _ in range(repeats)]
