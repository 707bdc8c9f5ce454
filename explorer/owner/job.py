"""A job as it runs on the device owner, on a thread of its own: what it was asked, the events it sends back, whether
its client is still there, and its turn on the device (`Turn`, with `make_way`, the one hand-off between two passes).
What a job needs of its owner is a `Device`: the owner's line, its limits, its figures, its stepped requests and its
models (`explorer.owner.state.Owner` is one)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED
from explorer.hosting.settings import HostedPolicy
from explorer.owner.line import DeviceQueue, Ticket

if TYPE_CHECKING:  # torch comes with these
    from explorer.core.device import FiguresStore
    from explorer.core.loaded_model import LoadedModel

TICK_S = 0.5  # a waiting job's place in line is sent this often: the page redraws it, and a click can cancel there


class Device(Protocol):
    """What a job uses of the owner that runs it."""

    policy: HostedPolicy
    queue: DeviceQueue
    steps: dict[str, Any]

    @property
    def figures(self) -> FiguresStore: ...

    def load(
        self, name: str, device: str, dtype: str, progress: Callable[[float, str], None] | None = None
    ) -> LoadedModel: ...


class Gone(Exception):
    """The job's client went away (a closed tab, "Leave the queue", a click elsewhere): the job stops here."""


class Job:
    """One job as it runs on its own thread: what it was asked (`body`), the events it has sent, and whether its client
    is still there. `send` is called from the job's thread; the HTTP side drains the events."""

    def __init__(self, owner: Device, kind: str, body: dict[str, Any]) -> None:
        self.owner, self.kind, self.body = owner, kind, body
        self.label = str(body.get("session", ""))[:16] or "anonymous"  # a hash from the web tier, never a prompt
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.gone = threading.Event()
        self.wake: Callable[[], None] = lambda: None  # the HTTP loop's nudge, set by the stream

    def send(self, event: str, data: Any) -> None:
        self.events.put((event, data))
        self.wake()

    def check(self) -> None:
        if self.gone.is_set():
            raise Gone

    def progress(self, fraction: float, text: str) -> None:
        self.check()
        self.send("progress", {"fraction": max(0.0, min(1.0, fraction)), "text": text})

    def note(self, text: str) -> None:
        self.send("note", {"text": text})

    @contextmanager
    def turn(
        self, what: str, passes: int | None = None, makes_way: bool = False, untimed: bool = False
    ) -> Iterator[Turn]:
        """Hold the device for this job's work, waiting in line (its place sent every TICK_S) while others hold it.
        `passes`: the passes it will run at most (for the line's estimate); `makes_way`: it calls `Turn.make_way`
        between its passes; `untimed`: an attention replay, which later one-pass jobs go before (`DeviceQueue.enter`).
        """
        line = self.owner.queue
        turn = Turn(self, line.enter(what, self.label, passes, makes_way, untimed))
        try:
            self._wait(turn.ticket, self.owner.policy.max_wait_s)
            turn.granted()
            yield turn
        finally:
            line.release(turn.ticket)  # also when the client left: its place goes to the next in line

    def _wait(self, ticket: Ticket, max_wait_s: float | None) -> None:
        line = self.owner.queue
        while not line.wait(ticket, 0):
            status = line.status(ticket)
            if not status.in_line:
                raise BadInput("This job lost its place in line: nothing ran.")
            if max_wait_s is not None and status.waited_s > max_wait_s:
                raise BadInput(
                    f"Waited {max_wait_s:.0f} s for the device and {status.ahead} turn(s) are still ahead: nothing "
                    "ran. Try again in a minute."
                )
            self.check()
            self.send("line", asdict(status))
            if line.wait(ticket, TICK_S):
                break
        self.check()
        self.send("line", asdict(line.status(ticket)))

    def load(self, model: str, device: str = "auto", dtype: str = "float32") -> LoadedModel:
        name = self.owner.policy.check_model(model.strip() or EMBEDDED)
        return self.owner.load(name, device, dtype, lambda f, text: self.progress(f, f"Loading {name}: {text}"))


class Turn:
    """A job's turn on the device. Long work calls `make_way()` between two passes; work that runs passes says so
    (`ran`), for the turn log and the next waiting line's estimate."""

    def __init__(self, job: Job, ticket: Ticket) -> None:
        self.job, self.ticket = job, ticket
        self._since_s = time.perf_counter()

    def granted(self) -> None:
        """The turn has come: its forwards are timed from here (the wait in line before it is not work it ran)."""
        self._since_s = time.perf_counter()

    def ran(self, passes: int, pass_s: float) -> None:
        now = time.perf_counter()
        self.job.owner.queue.record_work(self.ticket, passes, pass_s, now - self._since_s)
        self._since_s = now

    def make_way(self, everyone: bool = False) -> None:
        """Between two passes (or a lab's two units): the one-pass jobs waiting (other sessions' Next tokens and
        Prefills) go first, then this turn resumes ahead of the rest of the line; with `everyone`, every job waiting
        goes first and this one waits at the back (a lab: another session waits for one of its units, not all). The
        caller has paused its request's clock. A client that left stops its work here."""
        self.job.check()
        line = self.job.owner.queue
        self.ran(0, 0.0)
        if everyone:
            if line.waiting == 0:
                return
            line.release(self.ticket, "made way")
            resumed: Ticket | None = line.enter(self.ticket.what, self.ticket.owner, self.ticket.passes)
        else:
            resumed = line.make_way(self.ticket)
        if resumed is None:
            return
        self.ticket = resumed
        self.job.note("Paused: another session's job goes first (this one's clock is paused).")
        while not line.wait(resumed, TICK_S):
            if not line.status(resumed).in_line:
                raise BadInput("This job lost its place on the device while it let another session through.")
            self.job.check()
        self.job.note("")
        self._since_s = time.perf_counter()
