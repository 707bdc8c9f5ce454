"""Timed passes kept apart from the drawing of pages on one server: a pass waits, briefly, for charts being drawn, and
a chart that starts meanwhile waits for the pass; each timed pass comes back with what other work ran beside it.

Why: a session's turn on the device ends with its passes (`explorer.hosting.queue`), so the next session's passes
run while the last one's page is drawn, and every session is a thread of one Python process. The gate narrows that
overlap to what it cannot reach (a page's other work, a browser on the same machine), and `explorer.core.beside`
measures what is left, so that a page can mark a pass that was disturbed instead of showing its time as clean.
Both waits are bounded: a pass never waits more than `wait_for_drawing_s` for charts, nor more than DRAWING_WAIT_SHARE
of the last timed section's length, and not at all on a crowded device (`crowded`: turns in line, or a room sharing
it); a chart never more than `drawing_waits_at_most_s` for passes. Pure Python and thread-safe, no Streamlit and no
torch.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from explorer.core.beside import Beside, CpuSnapshot, beside, snapshot

WAIT_FOR_DRAWING_S = 0.25  # a chart is built and sent in 10-200 ms here: a pass waits for those in flight, no longer
DRAWING_WAITS_AT_MOST_S = 2.0  # a pass takes 0.05-1 s here, a run lets charts in between its passes
# The device worked this recently: its threads are awake and the weights in its caches, so a pass needs no warm twin
# or warm-up before it (a stepped pass timed after a pause of seconds ran 2-6x a Run's; within this, as a Run's).
WARM_WITHIN_S = 0.5
# Another session's turn this recently makes the device shared (`PassGate.crowded`): a room's people click every few
# seconds to a minute; a presenter alone, or after the room has gone, gets the twins back.
SHARED_WITHIN_S = 30.0
# Why a share: in a room of 8 (benchmarks/workshop.py) nearly every pass found a chart in flight and waited its whole
# 0.25 s for it, a step's 60-150 ms pass held the device 0.2-0.4 s and a Run's 4 passes waited 1 s between them, so
# everyone behind waited more for the waits than for the passes; at half the last section a Run still waited 0.24-0.7 s
# over its 4 passes. A pass waits at most a quarter of its last time (a decode's 15-40 ms): what is still drawn after
# that is measured beside it and marks it.
DRAWING_WAIT_SHARE = 0.25


@dataclass
class Timed:
    """What one timed section met: filled as it goes (`beside` once it ends)."""

    waited_for_drawing_s: float = 0.0  # before it started, for charts in flight
    drawing_in_flight: int = 0  # charts still being drawn when it started anyway (its wait ran out)
    beside: Beside | None = None  # other work's CPU during it; None until it ends


@dataclass
class PassGate:
    """Drawing (many threads at once) and timed passes (one at a time) kept apart, both waits bounded."""

    wait_for_drawing_s: float = WAIT_FOR_DRAWING_S
    drawing_waits_at_most_s: float = DRAWING_WAITS_AT_MOST_S
    clock: Callable[[], float] = time.monotonic
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _drawing: Counter[int] = field(default_factory=Counter, init=False)  # thread -> nesting depth of its sections
    _waiting: set[int] = field(default_factory=set, init=False)  # threads whose chart waits for a pass
    _let_in: set[int] = field(default_factory=set, init=False)  # let in when a pass ended: they go before the next
    _timing: int | None = field(default=None, init=False)  # the thread timing passes
    _last_work_s: float = field(default=float("-inf"), init=False)
    _held_since_s: float = field(default=0.0, init=False)  # when the timing thread's section began (after its wait)
    _last_section_s: float | None = field(default=None, init=False)  # how long the last section lasted
    # Turns waiting for the device (the server's queue wires it, `ServerSession`): each of them would pay for any wait
    # of the pass on the device, so with a line a pass waits for no chart and no warm twin runs (`crowded`).
    in_line: Callable[[], int] = lambda: 0
    # Other sessions took turns on the device lately (the server's queue, `DeviceQueue.shared_within(SHARED_WITHIN_S)`):
    # a room shares it, and each warming of one session's pass is paid by the others (`crowded`).
    shared: Callable[[], bool] = lambda: False

    def drawing_wait_s(self) -> float:
        """How long the next pass waits, at most, for charts in flight: `wait_for_drawing_s`, and no more than
        DRAWING_WAIT_SHARE of the last section (a pass, or a twin and its pass); nothing on a crowded device.

        Why nothing: in a room of 8 on 2 cores (benchmarks/workshop.py) the passes still found charts in flight and
        waited for them, 0.07-0.35 s a turn, a fifth of the device's time, so each Next token waited for the charts
        of everyone ahead; and every one of those passes was marked disturbed all the same (browsers and pages kept
        the cores busy). With turns in line, or a room sharing the device (whoever clicks next pays for the wait), a
        pass goes at once and says what ran beside it."""
        if self.crowded():
            return 0.0
        with self._cond:
            if self._last_section_s is None:
                return self.wait_for_drawing_s
            return min(self.wait_for_drawing_s, DRAWING_WAIT_SHARE * self._last_section_s)

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """A chart (or any drawing) built and sent: it waits while another thread times a pass, at most
        `drawing_waits_at_most_s`; passes that start meanwhile wait for it (at most their own bound)."""
        me = threading.get_ident()
        with self._cond:
            if self._drawing[me] == 0 and self._timing not in (None, me):
                self._waiting.add(me)
                self._cond.wait_for(
                    lambda: me in self._let_in or self._timing in (None, me), self.drawing_waits_at_most_s
                )
                self._waiting.discard(me)
                self._let_in.discard(me)
            self._drawing[me] += 1
        try:
            yield
        finally:
            with self._cond:
                self._drawing[me] -= 1
                if self._drawing[me] <= 0:
                    del self._drawing[me]
                self._cond.notify_all()

    @contextmanager
    def timing(self, before: Callable[[], None] | None = None) -> Iterator[Timed]:
        """One timed pass: after the charts in flight (bounded), with new ones held back, and what ran beside it.
        `before`: untimed work that must come right before the pass (a step's warm twin), inside the same section:
        charts wait for it as for the pass, so it takes what the pass takes, not the seconds it took beside them."""
        timed = Timed()
        self.hold(timed)
        try:
            if before is not None:
                before()
            started = snapshot()
            try:
                yield timed
            finally:
                timed.beside = beside(started, snapshot())
        finally:
            self.let_go()

    def quiet_for_s(self) -> float:
        """Seconds since the device last did work this gate heard of (a timed pass ended, or `worked()`)."""
        with self._cond:
            return self.clock() - self._last_work_s

    def warm(self) -> bool:
        """Whether the device did work within WARM_WITHIN_S: another session's passes left it warm for the next."""
        return self.quiet_for_s() <= WARM_WITHIN_S

    def crowded(self) -> bool:
        """Turns wait in line, or other sessions used the device lately: a pass is then warmed by nothing of its own
        (no twin, no warm-up), whatever the pause before it.

        Why: a twin costs the device a pass, and in a room everyone who clicks meanwhile waits for it. In a room of 8
        on 2 cores (benchmarks/workshop.py) a cold twin took 0.1-1 s, the waits behind it ran past the passes ahead,
        and every pass of the room was marked disturbed, twin or not. One person alone keeps the twin: without it,
        stepped passes timed after a pause came out 106-177 ms where the twinned ones took 58-68 ms
        (benchmarks/step_latency.py)."""
        return self.in_line() > 0 or self.shared()

    def worked(self) -> None:
        """The device just did untimed work (a warm twin, an attention row): it is warm now."""
        with self._cond:
            self._last_work_s = self.clock()

    # --- the two sides of a timed section: `timing()` and `TimedRun` pair them ---------------------------------------
    def hold(self, timed: Timed) -> None:
        me = threading.get_ident()
        with self._cond:
            self._cond.wait_for(lambda: self._timing in (None, me))  # the device's queue already serialises passes
            self._timing = me
            started = self.clock()
            bound_s = self.drawing_wait_s()  # the condition's lock is re-entrant
            self._cond.wait_for(lambda: self._others_drawing(me) == 0, bound_s)
            self._held_since_s = self.clock()
            timed.waited_for_drawing_s += self._held_since_s - started
            timed.drawing_in_flight = max(timed.drawing_in_flight, self._others_drawing(me))

    def let_go(self) -> None:
        """End this thread's section. Another thread's is left alone: a run stopped (a click, a closed tab) while it
        had let a Next token through ends its `TimedRun` during that session's timed pass."""
        with self._cond:
            if self._timing not in (None, threading.get_ident()):
                return
            if self._timing is not None:
                self._last_section_s = self.clock() - self._held_since_s
            self._timing = None
            self._let_in |= self._waiting  # the charts held back go before the next pass, whoever times it
            self._last_work_s = self.clock()
            self._cond.notify_all()

    def _others_drawing(self, me: int) -> int:
        return sum(1 for t in self._drawing if t != me) + len(self._let_in - {me})


class TimedRun:
    """Many timed passes in a row, each apart from drawing: the gate is held around them, and between any two (where
    a run's request clock is paused: `explorer.core.engine.OnPass.make_way`) the charts held back are let in and
    waited for. `between()` closes one pass's interval; `passes_beside` is each interval's other work, in order."""

    def __init__(self, gate: PassGate) -> None:
        self.gate = gate
        self.timed = Timed()
        self.passes_beside: list[Beside] = []
        self._started: CpuSnapshot | None = None

    def __enter__(self) -> TimedRun:
        self.gate.hold(self.timed)
        self._started = snapshot()
        return self

    def between(self, also: Callable[[], None] | None = None) -> None:
        """Close one pass's interval and let the charts in; `also` runs with the gate let go (a run letting other
        sessions' one-pass turns through: their passes time themselves on the gate)."""
        assert self._started is not None, "between() outside the run"
        self.passes_beside.append(beside(self._started, snapshot()))
        self.gate.let_go()
        if also is not None:
            also()
        self.gate.hold(self.timed)
        self._started = snapshot()

    def __exit__(self, *_: object) -> None:
        self.gate.let_go()
