"""How the sessions of one server take turns on its one device: a FIFO ticket queue with expected waits, a log of
every turn, and which script threads are drawing meanwhile. Pure Python and thread-safe, no Streamlit and no torch."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Ticket:
    """A place in the device's line. `number` orders tickets; `what` and `owner` are for the wait message and log."""

    number: int
    what: str  # "run", "lab", "device figures"
    owner: str = ""  # an anonymous session label, never a prompt or a path
    entered_s: float = 0.0  # the queue's clock
    thread_id: int = 0  # the script thread that waits with it: a waiting session draws nothing worth counting


@dataclass(frozen=True)
class QueueStatus:
    """Where a ticket stands, for the waiting message."""

    holding: bool  # the ticket's turn has come
    in_line: bool  # waiting for it (False once it holds the device, or after it left)
    ahead: int  # turns before this one: the one on the device, if any, and those waiting in front
    expected_wait_s: float | None  # None until a turn has finished and given a duration to go by
    waited_s: float
    recent_turns: int  # how many finished turns the estimate averages
    mean_turn_s: float | None


@dataclass(frozen=True)
class TurnRecord:
    """One finished turn on the device, as the log keeps it (seconds; `*_unix_s` are wall-clock times)."""

    number: int
    what: str
    owner: str
    first_ahead: int  # turns ahead when the ticket was taken
    waited_s: float
    held_s: float
    granted_unix_s: float
    released_unix_s: float
    ended: str  # "released", "cancelled" (never held), "after drawing", "hold limit", "owner gone" (its thread ended)


@dataclass
class _Entry:
    ticket: Ticket
    first_ahead: int
    thread: threading.Thread  # the thread that took the ticket: once it is gone, nobody can give the turn back
    granted_s: float | None = None
    granted_unix_s: float | None = None
    hold_until_s: float | None = None  # a finished turn kept while its session draws, at most until then


@dataclass
class DeviceQueue:
    """First come, first served turns on one device, thread-safe.

    `enter()` takes a ticket at the back of the line; the head of the line gets the device as soon as it is free.
    `wait()` blocks up to a timeout (callers poll, so a waiting page can redraw its place and be cancelled);
    `release()` gives the turn back or leaves the line; `release_when_done()` keeps a finished turn until the thread
    that ran it ends (its page is drawn) or a limit passes, so the next run's passes never compete with that drawing.
    The expected wait is the mean of the last few turns' durations times the turns ahead, less what the one on the
    device has already used.
    """

    history: int = 8
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    log_path: Path | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _line: deque[_Entry] = field(default_factory=deque, init=False)
    _holder: _Entry | None = field(default=None, init=False)
    _next_number: int = field(default=1, init=False)
    _durations_s: deque[float] = field(default_factory=deque, init=False)
    turns: deque[TurnRecord] = field(default_factory=lambda: deque(maxlen=64), init=False)  # the latest turns

    # --- taking and giving back turns ----------------------------------------------------------------------------
    def enter(self, what: str, owner: str = "") -> Ticket:
        """A ticket at the back of the line, owned by the calling thread. A turn that `owner` still keeps while its
        page draws (`release_when_done`) is given back first: that session has moved on (a rerun, a second click)."""
        with self._cond:
            holder = self._holder
            if owner and holder is not None and holder.hold_until_s is not None and holder.ticket.owner == owner:
                self._finish(holder, "after drawing")
                self._holder = None
            ticket = Ticket(self._next_number, what, owner, self.clock(), threading.get_ident())
            self._next_number += 1
            ahead = len(self._line) + (self._holder is not None)
            self._line.append(_Entry(ticket, ahead, threading.current_thread()))
            self._promote()
            return ticket

    def wait(self, ticket: Ticket, timeout_s: float | None) -> bool:
        """True once `ticket` holds the device; False after `timeout_s` (None: no limit) or if it left the line."""
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with self._cond:
            while True:
                self._expire_holds()
                if self._holder is not None and self._holder.ticket.number == ticket.number:
                    return True
                if not any(e.ticket.number == ticket.number for e in self._line):
                    return False  # cancelled
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    return False
                hold_left = self._hold_left_s()
                step = min(x for x in (remaining, hold_left, 1.0) if x is not None)
                self._cond.wait(max(step, 0.001))

    def release(self, ticket: Ticket, ended: str = "released") -> None:
        """Give the turn back, or leave the line if it had not come yet. Calling it again does nothing."""
        with self._cond:
            if self._holder is not None and self._holder.ticket.number == ticket.number:
                self._finish(self._holder, ended)
                self._holder = None
                self._promote()
            else:
                for entry in list(self._line):
                    if entry.ticket.number == ticket.number:
                        self._line.remove(entry)
                        self._record(entry, "cancelled")
                        self._promote()  # the ones behind move up
            self._cond.notify_all()

    def release_when_done(self, ticket: Ticket, thread: threading.Thread, limit_s: float) -> None:
        """Keep a finished turn until `thread` ends or `limit_s` passes, whichever is first; then give it back."""
        with self._cond:
            if self._holder is None or self._holder.ticket.number != ticket.number:
                return
            self._holder.hold_until_s = self.clock() + limit_s

        def watch() -> None:
            thread.join(limit_s)
            self.release(ticket, "after drawing" if not thread.is_alive() else "hold limit")

        threading.Thread(target=watch, name=f"device-turn-{ticket.number}", daemon=True).start()

    # --- what a waiting page shows ---------------------------------------------------------------------------------
    def holds(self, ticket: Ticket) -> bool:
        with self._cond:
            return self._holder is not None and self._holder.ticket.number == ticket.number

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._line)

    def waiting_thread_ids(self) -> frozenset[int]:
        with self._cond:
            return frozenset(e.ticket.thread_id for e in self._line)

    def status(self, ticket: Ticket) -> QueueStatus:
        with self._cond:
            now = self.clock()
            durations = list(self._durations_s)
            mean = statistics.fmean(durations) if durations else None
            waited = now - ticket.entered_s
            if self._holder is not None and self._holder.ticket.number == ticket.number:
                return QueueStatus(True, False, 0, 0.0, waited, len(durations), mean)
            place = next((i for i, e in enumerate(self._line) if e.ticket.number == ticket.number), None)
            in_front = len(self._line) if place is None else place
            ahead = in_front + (self._holder is not None)
            expected = None
            if mean is not None:
                used = 0.0 if self._holder is None or self._holder.granted_s is None else now - self._holder.granted_s
                current = max(0.0, mean - used) if self._holder is not None else 0.0
                expected = current + mean * in_front
            return QueueStatus(False, place is not None, ahead, expected, waited, len(durations), mean)

    # --- inside the lock -------------------------------------------------------------------------------------------
    def _promote(self) -> None:
        if self._holder is None and self._line:
            self._holder = self._line.popleft()
            self._holder.granted_s = self.clock()
            self._holder.granted_unix_s = self.wall_clock()
            self._cond.notify_all()

    def _hold_left_s(self) -> float | None:
        if self._holder is None or self._holder.hold_until_s is None:
            return None
        return self._holder.hold_until_s - self.clock()

    def _expire_holds(self) -> None:
        """A kept turn past its limit is given back here too, in case its watcher never ran; so is a turn whose thread
        is gone (nothing can give it back any more), and a place in line whose thread is gone."""
        for entry in [e for e in self._line if not e.thread.is_alive()]:
            self._line.remove(entry)
            self._record(entry, "owner gone")
        left = self._hold_left_s()
        if self._holder is not None and left is not None and left <= 0:
            self._finish(self._holder, "hold limit")
            self._holder = None
        elif self._holder is not None and self._holder.hold_until_s is None and not self._holder.thread.is_alive():
            self._finish(self._holder, "owner gone")
            self._holder = None
        self._promote()

    def _finish(self, entry: _Entry, ended: str) -> None:
        now = self.clock()
        held_s = now - (entry.granted_s if entry.granted_s is not None else now)
        self._durations_s.append(held_s)
        while len(self._durations_s) > self.history:
            self._durations_s.popleft()
        self._record(entry, ended)

    def _record(self, entry: _Entry, ended: str) -> None:
        now, now_unix = self.clock(), self.wall_clock()
        granted = entry.granted_s if entry.granted_s is not None else now
        record = TurnRecord(
            number=entry.ticket.number,
            what=entry.ticket.what,
            owner=entry.ticket.owner,
            first_ahead=entry.first_ahead,
            waited_s=granted - entry.ticket.entered_s,
            held_s=now - granted,
            granted_unix_s=entry.granted_unix_s if entry.granted_unix_s is not None else now_unix,
            released_unix_s=now_unix,
            ended=ended,
        )
        self.turns.append(record)
        if self.log_path is not None:
            try:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write(json.dumps(asdict(record)) + "\n")
            except OSError:
                pass  # the log is for the operator; a full disk must not stop the demo


class ScriptActivity:
    """Which script threads of this process are alive: each browser session's script run is one thread, from its
    first line to its last drawing. A run is flagged when another session's script was drawing while its passes ran
    (sampled at the start and after every pass), since that drawing competes with the passes for the same cores."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[int, threading.Thread] = {}

    def note(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = {i: t for i, t in self._threads.items() if t.is_alive()}
            if thread.ident is not None:
                self._threads[thread.ident] = thread

    def others_drawing(self, me: int, waiting: frozenset[int]) -> int:
        """Alive script threads other than `me` that are not waiting in the device's line."""
        with self._lock:
            return sum(1 for i, t in self._threads.items() if i != me and i not in waiting and t.is_alive())


def read_turn_log(path: Path) -> list[TurnRecord]:
    """The turns a log holds, oldest first."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [TurnRecord(**json.loads(line)) for line in lines if line.strip()]


def wait_sentence(status: QueueStatus, max_wait_s: float | None) -> str:
    """What a waiting visitor reads, redrawn as the line moves. "Number n in line" counts the turn on the device."""
    if status.ahead <= 1:
        place = "You are next in line"
    else:
        waiting = status.ahead - 1
        place = f"You are number {status.ahead} in line: {waiting} waiting before you, behind the run on the device"
    if status.expected_wait_s is None:
        expected = "Expected wait: not known until a first turn has finished"
    elif status.expected_wait_s < 1:
        expected = "Expected wait: any moment now"
    else:
        turns = "the last turn took" if status.recent_turns == 1 else f"the last {status.recent_turns} turns took"
        expected = (
            f"Expected wait: about {status.expected_wait_s:.0f} s ({turns} {status.mean_turn_s:.1f} s on average)"
        )
    limit = f" (a run waits at most {max_wait_s:.0f} s)" if max_wait_s else ""
    return (
        "Another session is using the device, so this run waits its turn and the timings stay clean. "
        f"{place}. {expected}. Waiting for {status.waited_s:.0f} s so far{limit}."
    )
