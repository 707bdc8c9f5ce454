"""How the device owner's jobs take turns on its one device: a FIFO ticket queue whose expected waits count the
passes ahead, and a log of every turn with the passes it ran. Pure Python and thread-safe, no Streamlit and no torch
(the web tier reads a place in line and its sentences from here)."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

SERVER_OWNER = "server"  # the owner of the server's own turns (its warm-up): no visitor's session


@dataclass(frozen=True)
class Ticket:
    """A place in the device's line. `number` orders tickets; `what` and `owner` are for the wait message and log."""

    number: int
    what: str  # "run", "lab", "device figures"
    owner: str = ""  # an anonymous session label, never a prompt or a path
    entered_s: float = 0.0  # the queue's clock
    thread_id: int = 0  # the script thread that waits with it
    passes: int | None = None  # the passes its work will run, at most (a step 1, a run new tokens x repeats); None:
    # work not counted in passes (a lab, the device figures, the warm-up)
    resumed: bool = False  # a turn taken back after it made way (`DeviceQueue.make_way`), not a new click
    makes_way: bool = False  # its work lets one-pass turns through between its passes (a sidebar run)
    untimed: bool = False  # untimed work (an attention replay): a one-pass turn that arrives later goes before it

    @property
    def one_pass(self) -> bool:
        """Work of one pass (a Next token, a step-mode Prefill): a longer turn lets it through between its passes."""
        return self.passes == 1 and not self.resumed


@dataclass(frozen=True)
class QueueStatus:
    """Where a ticket stands, for the waiting message."""

    holding: bool  # the ticket's turn has come
    in_line: bool  # waiting for it (False once it holds the device, or after it left)
    ahead: int  # turns before this one: the one on the device, if any, and those waiting in front
    passes_ahead: int  # the passes those turns will still run, as their tickets said (at most)
    other_work_ahead: tuple[str, ...]  # what the turns ahead not counted in passes are ("lab", "device figures")
    expected_wait_s: float | None  # None until some turn has finished and given a duration to go by
    waited_s: float


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
    ended: str  # "released", "passed on" (a lab let others go first), "made way" (a run let one-pass turns
    # through between its passes), "cancelled" (never held), "owner gone" (its thread ended without giving it back)
    passes: int = 0  # the timed passes its work ran
    pass_s: float = 0.0  # their measured seconds
    forward_s: float = 0.0  # every forward it ran, timed or not (a step's warm twin and attention row too), seconds
    resumed: bool = False  # the rest of a turn that made way: its wait was for the turns it let through

    @property
    def entered_unix_s(self) -> float:
        return self.granted_unix_s - self.waited_s


@dataclass
class _Entry:
    ticket: Ticket
    first_ahead: int
    thread: threading.Thread  # the thread that took the ticket: once it is gone, nobody can give the turn back
    granted_s: float | None = None
    granted_unix_s: float | None = None
    passes: int = 0  # what its work reported running (`record_work`)
    pass_s: float = 0.0
    forward_s: float = 0.0
    held_before_s: float = 0.0  # a resumed turn: what it held, and ran, before it made way (for the estimates)
    passes_before: int = 0


@dataclass
class DeviceQueue:
    """First come, first served turns on one device, thread-safe (save that long work may let the one-pass turns
    waiting go first between its passes, `make_way`).

    `enter()` takes a ticket at the back of the line; the head of the line gets the device as soon as it is free.
    `wait()` blocks up to a timeout (callers poll, so a waiting page can redraw its place and be cancelled);
    `release()` gives the turn back, as soon as its work and its record are done (drawing a page never holds it), or
    leaves the line. The expected wait counts the work ahead: each ticket says how many passes it will run, and a pass
    is expected to take what the last few turns of its kind took per pass (work not counted in passes, a lab, what
    the last few turns of that kind took), less what the one on the device has already used.
    """

    history: int = 8
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    log_path: Path | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _line: deque[_Entry] = field(default_factory=deque, init=False)
    _holder: _Entry | None = field(default=None, init=False)
    _next_number: int = field(default=1, init=False)
    _per_pass_s: dict[str, deque[float]] = field(default_factory=dict, init=False)  # by kind: held seconds per pass
    _turn_s: dict[str, deque[float]] = field(default_factory=dict, init=False)  # by kind: held seconds per turn
    turns: deque[TurnRecord] = field(default_factory=lambda: deque(maxlen=64), init=False)  # the latest turns

    # --- taking and giving back turns ----------------------------------------------------------------------------
    def enter(
        self, what: str, owner: str = "", passes: int | None = None, makes_way: bool = False, untimed: bool = False
    ) -> Ticket:
        """A ticket at the back of the line, owned by the calling thread; `passes`: what its work will run, at most;
        `makes_way`: its work calls `make_way` between its passes (the waiting line counts on it); `untimed`: an
        attention replay, which a one-pass turn arriving later goes before: a replay beside a timed pass would disturb
        it, and one ahead of a Next token would make it wait for maps it does not need."""
        with self._cond:
            now, me = self.clock(), threading.get_ident()
            ticket = Ticket(self._next_number, what, owner, now, me, passes, makes_way=makes_way, untimed=untimed)
            self._next_number += 1
            entry = _Entry(ticket, 0, threading.current_thread())
            line = list(self._line)
            at = len(line)
            if ticket.one_pass:  # before the first untimed turn waiting
                at = next((i for i, e in enumerate(line) if e.ticket.untimed), len(line))
            entry.first_ahead = at + (self._holder is not None)
            line.insert(at, entry)
            self._line = deque(line)
            self._promote()
            return ticket

    def wait(self, ticket: Ticket, timeout_s: float | None) -> bool:
        """True once `ticket` holds the device; False after `timeout_s` (None: no limit) or if it left the line."""
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with self._cond:
            while True:
                self._drop_orphans()
                if self._holder is not None and self._holder.ticket.number == ticket.number:
                    return True
                if not any(e.ticket.number == ticket.number for e in self._line):
                    return False  # cancelled
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(max(min(x for x in (remaining, 1.0) if x is not None), 0.001))

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

    def make_way(self, ticket: Ticket) -> Ticket | None:
        """Between two passes of the holder's work: the one-pass turns waiting (other sessions' Next tokens and
        Prefills) go first, and the holder's work resumes right after them, ahead of everyone else in line. Returns
        the ticket to wait with (`wait`; it says the passes the work has left, from what it recorded, `record_work`),
        or None if none was waiting (the holder keeps the device). In a room, a
        Next token then waits for one pass of a run ahead of it, not for the whole run; the run's clock is paused
        meanwhile (`explorer.core.lab_progress.between_passes`), so its own times do not change."""
        with self._cond:
            holder = self._holder
            if holder is None or holder.ticket.number != ticket.number:
                return None
            short = [e for e in self._line if e.ticket.one_pass]
            if not short:
                return None
            now = self.clock()
            held_s = now - (holder.granted_s if holder.granted_s is not None else now)
            self._record(holder, "made way")
            me = threading.get_ident()
            left = self._passes_left(holder)
            resumed = replace(ticket, number=self._next_number, entered_s=now, thread_id=me, passes=left, resumed=True)
            self._next_number += 1
            entry = _Entry(resumed, len(short), threading.current_thread())
            entry.held_before_s = holder.held_before_s + held_s
            entry.passes_before = holder.passes_before + holder.passes
            rest = [e for e in self._line if not e.ticket.one_pass]
            self._line = deque([*short, entry, *rest])
            self._holder = None
            self._promote()
            return resumed

    def record_work(
        self,
        ticket: Ticket,
        passes: int,
        pass_s: float,
        forward_s: float,
    ) -> None:
        """What the holder's work ran: `passes` timed passes of `pass_s` seconds, and `forward_s` seconds of forwards
        in all (its untimed ones too). Kept in its turn's record; ignored once
        the turn is over."""
        with self._cond:
            if self._holder is not None and self._holder.ticket.number == ticket.number:
                self._holder.passes += passes
                self._holder.pass_s += pass_s
                self._holder.forward_s += forward_s

    def warm(self, within_s: float) -> bool:
        """Whether the device is warm for the next pass without a warm-up of its own: a turn that ran forwards ended
        within `within_s` seconds, or jobs wait in line (they would wait for the warm-up, and their passes follow this
        one at once)."""
        with self._cond:
            if self._line:
                return True
            since = self.wall_clock() - within_s
            return any(t.released_unix_s >= since and t.forward_s > 0 for t in self.turns)

    # --- what a waiting page shows ---------------------------------------------------------------------------------
    def holds(self, ticket: Ticket) -> bool:
        with self._cond:
            return self._holder is not None and self._holder.ticket.number == ticket.number

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._line)

    def shared_within(self, within_s: float) -> bool:
        """Whether a session other than the holder's waits in line or took a turn that ended within `within_s` seconds
        (the server's own warm-up is nobody's session)."""
        with self._cond:
            mine = self._holder.ticket.owner if self._holder is not None else None
            others = {e.ticket.owner for e in self._line}
            since = self.wall_clock() - within_s
            others |= {t.owner for t in self.turns if t.released_unix_s >= since}
            return bool(others - {mine, SERVER_OWNER})

    def status(self, ticket: Ticket) -> QueueStatus:
        with self._cond:
            now = self.clock()
            waited = now - ticket.entered_s
            if self._holder is not None and self._holder.ticket.number == ticket.number:
                return QueueStatus(True, False, 0, 0, (), 0.0, waited)
            place = next((i for i, e in enumerate(self._line) if e.ticket.number == ticket.number), None)
            in_front = list(self._line)[: len(self._line) if place is None else place]
            holder = self._holder
            # A one-pass turn behind work that steps aside goes at that work's next pass boundary, after the one-pass
            # turns in front of it and before the rest (`make_way`): what is ahead of it is one pass and those.
            cuts_in = ticket.one_pass and holder is not None and holder.ticket.makes_way
            if cuts_in:
                in_front = [e for e in in_front if e.ticket.one_pass]
            ahead = in_front if holder is None else [holder, *in_front]
            left = [min(1, self._passes_left(e)) if cuts_in and e is holder else self._passes_left(e) for e in ahead]
            others = tuple(e.ticket.what for e in ahead if e.ticket.passes is None)
            expected: float | None = 0.0
            for entry, passes_left in zip(ahead, left):
                alone = self._expected_s(entry, passes_left if cuts_in and entry is holder else None)
                if alone is None or expected is None:
                    expected = None
                    continue
                used = now - entry.granted_s if entry is holder and entry.granted_s is not None and not cuts_in else 0.0
                expected += max(0.0, alone - used)
            passes = sum(left)
            return QueueStatus(False, place is not None, len(ahead), passes, others, expected, waited)

    # --- inside the lock -------------------------------------------------------------------------------------------
    @staticmethod
    def _passes_left(entry: _Entry) -> int:
        return max(0, (entry.ticket.passes or 0) - entry.passes)

    def _expected_s(self, entry: _Entry, passes: int | None = None) -> float | None:
        """What `entry`'s whole turn (or `passes` of it) should take, from the recent turns: its passes at the recent
        seconds per pass of its kind (of any kind, if none of its own has finished); work not in passes at its kind's
        (any kind's) turn."""

        def mean(by_kind: dict[str, deque[float]]) -> float | None:
            own = by_kind.get(entry.ticket.what)
            pooled = [v for values in by_kind.values() for v in values]
            values = list(own) if own else pooled
            return statistics.fmean(values) if values else None

        if entry.ticket.passes is not None:
            per_pass = mean(self._per_pass_s)
            return None if per_pass is None else per_pass * (entry.ticket.passes if passes is None else passes)
        return mean(self._turn_s)

    def _promote(self) -> None:
        if self._holder is None and self._line:
            self._holder = self._line.popleft()
            self._holder.granted_s = self.clock()
            self._holder.granted_unix_s = self.wall_clock()
            self._cond.notify_all()

    def _drop_orphans(self) -> None:
        """A turn whose thread is gone is taken back (nothing can give it back any more), and so is a place in line
        whose thread is gone."""
        for entry in [e for e in self._line if not e.thread.is_alive()]:
            self._line.remove(entry)
            self._record(entry, "owner gone")
        if self._holder is not None and not self._holder.thread.is_alive():
            self._finish(self._holder, "owner gone")
            self._holder = None
        self._promote()

    def _finish(self, entry: _Entry, ended: str) -> None:
        """Keep the whole turn's time for the estimates (a resumed one with what it held before it made way)."""
        now = self.clock()
        held_s = now - (entry.granted_s if entry.granted_s is not None else now) + entry.held_before_s
        what = entry.ticket.what
        self._keep(self._turn_s, what, held_s)
        passes = entry.passes_before + (entry.passes or entry.ticket.passes or 0)  # what it ran; else what it said
        if passes > 0:
            self._keep(self._per_pass_s, what, held_s / passes)
        self._record(entry, ended)

    def _keep(self, by_kind: dict[str, deque[float]], what: str, value: float) -> None:
        by_kind.setdefault(what, deque(maxlen=self.history)).append(value)

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
            passes=entry.passes,
            pass_s=entry.pass_s,
            forward_s=entry.forward_s,
            resumed=entry.ticket.resumed,
        )
        self.turns.append(record)
        if self.log_path is not None:
            try:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write(json.dumps(asdict(record)) + "\n")
            except OSError:
                pass  # the log is for the operator; a full disk must not stop the demo


def read_turn_log(path: Path) -> list[TurnRecord]:
    """The turns a log holds, oldest first."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [TurnRecord(**json.loads(line)) for line in lines if line.strip()]


# What a turn not counted in passes is called in a waiting line: (one, several).
OTHER_WORK_NAMES = {
    "lab": ("a lab", "labs"),
    "device figures": ("a device measurement", "device measurements"),
    "warm-up": ("the server's warm-up", "warm-ups"),
}


def work_ahead(passes: int, others: tuple[str, ...]) -> str:
    """The work ahead in a waiting line, in words: "2 passes", "1 pass and a lab", "nothing"."""
    parts = [f"{passes} pass{'' if passes == 1 else 'es'}"] if passes else []
    for what, count in Counter(others).items():
        one, several = OTHER_WORK_NAMES.get(what, (f"a {what}", f"{what} turns"))
        parts.append(one if count == 1 else f"{count} {several}")
    if not parts:
        return "nothing"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def wait_sentence(status: QueueStatus, max_wait_s: float | None) -> str:
    """What a waiting visitor reads, redrawn as the line moves: the work ahead in passes (and any lab or device
    measurement) and the time it should take. "Number n in line" counts the turn on the device."""
    if status.ahead <= 1:
        place = "You are next in line"
    else:
        place = f"You are number {status.ahead} in line ({status.ahead - 1} waiting before you)"
    ahead = f"{work_ahead(status.passes_ahead, status.other_work_ahead)} ahead"
    if status.expected_wait_s is None:
        expected = "how long is not known until a first turn has finished"
    elif status.expected_wait_s < 0.1:
        expected = "any moment now"
    else:
        expected = (
            f"about {status.expected_wait_s:.1f} s"
            if status.expected_wait_s < 10
            else (f"about {status.expected_wait_s:.0f} s")
        )
    limit = f" (a run waits at most {max_wait_s:.0f} s)" if max_wait_s else ""
    return (
        "Another session is using the device, so this waits its turn and the timings stay clean. "
        f"{place}: {ahead}, {expected}. Waiting for {status.waited_s:.0f} s so far{limit}."
    )
