"""The one timing primitive (`explorer.core.timing`) on a CPU: what it times and what it leaves out."""

from __future__ import annotations

import time

import torch

from explorer.core.timing import RequestClock, Stopwatch, repeat_timed, timed

SPIN_S = 0.02  # long enough to stand out from the clocks' own cost, short enough for a fast suite


def spin(seconds: float) -> str:
    """Busy for `seconds` on this thread (a sleep could be cut short by nothing, but spinning is what a pass does)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass
    return "done"


def test_timed_returns_the_result_and_at_least_the_time_the_call_took() -> None:
    out, seconds = timed("cpu", spin, SPIN_S)
    assert out == "done" and seconds >= SPIN_S


def test_a_stopwatch_reads_the_same_clock_as_timed() -> None:
    watch = Stopwatch(torch.device("cpu"))
    assert not watch.on_gpu
    watch.start()
    spin(SPIN_S)
    assert watch.stop() >= SPIN_S


def test_repeat_timed_leaves_its_warm_up_call_out() -> None:
    calls: list[int] = []
    times = repeat_timed("cpu", lambda: calls.append(1), repeats=3)
    assert len(calls) == 4 and len(times) == 3 and all(t > 0 for t in times)


def test_a_request_clock_does_not_count_its_pauses() -> None:
    clock = RequestClock()
    spin(SPIN_S)
    clock.pause()
    paused_at = clock.now_s()
    spin(SPIN_S)
    assert clock.now_s() == paused_at >= SPIN_S  # stopped while paused
    clock.resume()
    spin(SPIN_S)
    assert clock.now_s() >= paused_at + SPIN_S
    assert clock.paused_s >= SPIN_S and clock.now_s() < time.perf_counter() - clock.started  # the pause is left out
