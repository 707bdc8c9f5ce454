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


class Stopwatch:
    """`timed` split into a start and a stop, for code that cannot wrap the call itself (a forward pre-hook starts
    it, a forward hook stops it, as the bench does around HF `generate()`'s first forward). The same clocks as
    `timed`, so the two sides of an A/B read one clock."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.on_gpu = self.device.type == "cuda"
        self.started_s = 0.0  # perf_counter at start(), on a CPU
        self.start_event: torch.cuda.Event | None = None

    def start(self) -> None:
        synchronize(self.device)  # work queued before the call is not the call's
        if self.on_gpu:
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.start_event.record()
        else:
            self.started_s = time.perf_counter()

    def stop(self) -> float:
        """Seconds since `start()`, once the device has finished everything queued in between."""
        if not self.on_gpu:
            return time.perf_counter() - self.started_s
        assert self.start_event is not None, "stop() before start()"
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return self.start_event.elapsed_time(end) / 1e3  # elapsed_time is in ms


def timed(device: torch.device | str, fn: Callable[..., T], *args: object) -> tuple[T, float]:
    """`fn(*args)` and the seconds it took on `device`, nothing else inside the clocks."""
    watch = Stopwatch(device)
    watch.start()
    out = fn(*args)
    return out, watch.stop()


def repeat_timed(device: torch.device | str, fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `fn`, after one untimed warm-up call (kernel choice, page faults)."""
    fn()
    synchronize(device)
    return [max(timed(device, fn)[1], 1e-9) for _ in range(repeats)]


class RequestClock:
    """Seconds since the request started, not counting time it was paused (the step mode waits for clicks)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.paused_s = 0.0
        self.paused_at: float | None = None

    def now_s(self) -> float:
        now = self.paused_at if self.paused_at is not None else time.perf_counter()
        return now - self.started - self.paused_s

    def pause(self) -> None:
        if self.paused_at is None:
            self.paused_at = time.perf_counter()

    def resume(self) -> None:
        if self.paused_at is not None:
            self.paused_s += time.perf_counter() - self.paused_at
            self.paused_at = None
