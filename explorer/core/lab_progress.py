"""What a lab's work is handed while it runs: a progress report for the bar, and the points where it may give the
shared device to another session.

Reporting progress and giving the device away are separate on purpose: a lab reports whenever it likes (the
scheduling lab every 0.1 s while transformers' engine thread computes), but it calls `make_way()` only where no
measured figure spans the call:
- figures that are sums of individually timed passes (the no-cache lab's steps, the batching lab's steps) allow it
  between any two passes, with the request's clock paused so the wait never shows as latency;
- a figure that is one wall-clock span (the scheduling lab's engine run, its static batch, its one-at-a-time arrival
  clock) never has a call inside it: the lab calls it only between such spans.
So another session waits for at most one pass (or one span) of a long lab, and no lab's figures include its wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

Report = Callable[[float, str], None]  # (fraction done 0..1, what is happening)
MakeWay = Callable[[], None]


def part_of(report: Report, start: float, end: float) -> Report:
    """A report for one part of some work: its own 0..1 drawn as `start`..`end` of the whole bar."""
    return lambda fraction, text: report(start + (end - start) * fraction, text)


def nobody_waits() -> None:
    """Outside a shared server (the CLI, tests) nobody waits: the work keeps the device."""


class PausableClock(Protocol):
    def pause(self) -> None: ...

    def resume(self) -> None: ...


def between_passes(clock: PausableClock, make_way: MakeWay) -> None:
    """Let anyone waiting go first with this request's clock stopped, so its token times exclude the wait."""
    clock.pause()
    try:
        make_way()
    finally:
        clock.resume()


@dataclass(frozen=True)
class LabProgress:
    """Callable like any progress report (it only moves the bar); `make_way()` passes the device on."""

    report: Report
    make_way: MakeWay = nobody_waits

    def __call__(self, fraction: float, text: str) -> None:
        self.report(fraction, text)

    def span(self, start: float, end: float) -> Report:
        """A report for one part of the work: its own 0..1 drawn as `start`..`end` of the whole bar."""
        return part_of(self.report, start, end)


def silent(_fraction: float, _text: str) -> None:
    """A report that draws nothing."""


QUIET = LabProgress(silent)  # the default: nothing drawn, the device kept
