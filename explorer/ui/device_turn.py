"""The device queue of this server process as a session meets it: a turn on the device (first come first served, see
`explorer.hosting.queue.DeviceQueue`) with the session's place in line and the passes ahead while it waits, the
per-session rate limit, and drawing kept apart from other sessions' timed passes (`explorer.hosting.quiet`). The
queue and the gate are the shared `ServerSession`'s (`explorer.ui.shared`)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.core.errors import BadInput
from explorer.core.trace import PassRecord
from explorer.hosting.passes_first import PASSES_FIRST
from explorer.hosting.queue import DeviceQueue, QueueStatus, Ticket, wait_sentence, work_ahead
from explorer.hosting.settings import HostedPolicy
from explorer.ui.shared import hosting_policy, server_session
from explorer.ui.state import LEFT_QUEUE, RUN_STARTS

POLL_S = 0.5  # how often a waiting page redraws its place in line (each redraw is also where a click can cancel)


def count_run(policy: HostedPolicy | None = None) -> None:
    """Count one turn on the device against this session's rate limit; raises the limit's ExplorerError when over."""
    policy = hosting_policy() if policy is None else policy
    RUN_STARTS.set(policy.check_rate(RUN_STARTS.get() or (), time.monotonic()))


@contextmanager
def drawing() -> Iterator[None]:
    """Build and send a chart or a table apart from other sessions' timed passes: it waits while one runs (briefly),
    and a pass that starts meanwhile waits for it (briefly). Outside a script run it just draws."""
    if get_script_run_ctx(suppress_warning=True) is None:
        yield
        return
    with server_session().gate.drawing():
        yield


# --- a turn ----------------------------------------------------------------------------------------------------------
def _session_label() -> str:
    """An anonymous label for the turn log: a hash of the session id, never a prompt or a path."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return hashlib.sha256(ctx.session_id.encode()).hexdigest()[:8] if ctx is not None else "no-session"


def _left_queue() -> None:
    LEFT_QUEUE.set(True)


QUEUED_KEY = "device-queued"  # a one-pass turn's queued line and its button: container key QUEUED_KEY-<ticket>
QUEUED_ICON = "⏳"  # never the ⚠ that marks a disturbed pass: waiting in line disturbs no pass's timing


def queued_line(status: QueueStatus) -> str:
    """A one-pass turn's place in line (a Next token, a step-mode Prefill), short enough for a phone: the work ahead
    and the time it should take, from the queue's estimate (`DeviceQueue.status`). "Number n in line" counts the turn
    on the device, as in `wait_sentence`."""
    if status.expected_wait_s is None:
        expected = "how long is not known until a first turn has finished"
    elif status.expected_wait_s < 0.1:
        expected = "any moment now"
    else:
        expected = f"about {status.expected_wait_s:.1f} s"
    place = "You are next in line" if status.ahead <= 1 else f"You are number {status.ahead} in line"
    return f"Queued: {work_ahead(status.passes_ahead, status.other_work_ahead)} ahead, {expected}. {place}."


def _wait_for_turn(queue: DeviceQueue, ticket: Ticket, max_wait_s: float | None) -> None:
    """Until `ticket` holds the device: its place, the expected wait and a "Leave the queue" button, redrawn every
    POLL_S. A click anywhere (that button too) reruns the script, which stops this loop at its next redraw and gives
    the place up; past `max_wait_s` the wait is refused with one line.

    The place is drawn as soon as the ticket is in line, before the first wait: in a fresh element, where the caller
    is (Step by step: right under its buttons), so it is not greyed with the rest of the page while the click's script
    runs. A one-pass turn says it in one short line beside its button (`queued_line`): its wait is a few passes, and a
    longer sentence pushed everything on a phone's screen down for a moment."""
    if queue.wait(ticket, 0):
        return
    first = queue.status(ticket)
    box = st.empty()
    short = ticket.one_pass
    with (
        box.container(horizontal=True, vertical_alignment="center", key=f"{QUEUED_KEY}-{ticket.number}")
        if short
        else box.container()
    ):
        line = st.empty()
        st.button("Leave the queue", key=f"leave-queue-{ticket.number}", on_click=_left_queue)
    while True:
        status = queue.status(ticket)
        if status.holding:
            break
        if not status.in_line:
            raise BadInput("You left the queue: nothing ran.")
        if max_wait_s is not None and status.waited_s > max_wait_s:
            raise BadInput(
                f"Waited {max_wait_s:.0f} s for the device and {status.ahead} turn(s) are still ahead: nothing ran. "
                "Try again in a minute."
            )
        if short:
            line.info(queued_line(status), icon=QUEUED_ICON)
        else:
            line.info(wait_sentence(status, max_wait_s))
        if queue.wait(ticket, POLL_S):
            break
    box.empty()
    waited_s = queue.status(ticket).waited_s
    ahead = work_ahead(first.passes_ahead, first.other_work_ahead)
    st.caption(
        f"Waited {waited_s:.1f} s for the device while other sessions used it (you were number {first.ahead} in line "
        f"when you asked, with {ahead} ahead)."
    )


class DeviceTurn:
    """A session's turn on the device, as `device_turn()` yields it. Long work calls `pass_on()` between its units;
    work that runs passes says so (`ran`), for the turn log and the next waiting line's estimate."""

    def __init__(self, queue: DeviceQueue, ticket: Ticket) -> None:
        self.queue, self.ticket = queue, ticket
        self.threads: int | None = None  # the intra-op threads this turn's passes run on (`PassThreads`)
        self.nice: int | None = None  # the priority its thread runs at (`PassPriority`), None where not raised

    def ran(self, passes: int, pass_s: float, forward_s: float) -> None:
        """`passes` timed passes of `pass_s` seconds, in `forward_s` seconds of forwards in all (untimed ones too)."""
        self.queue.record_work(self.ticket, passes, pass_s, forward_s, self.threads, self.nice)

    def pass_on(self) -> None:
        """If anyone is waiting, let them go first and take the device back after them: long work then never blocks
        another session for more than one of its units. The line is FIFO, so later arrivals queue behind this."""
        if self.queue.waiting == 0:
            return
        self.queue.release(self.ticket, "passed on")
        self.ticket = self.queue.enter(self.ticket.what, self.ticket.owner, self.ticket.passes)
        _wait_for_turn(self.queue, self.ticket, max_wait_s=None)  # admitted once already: no refusal mid-way

    def let_one_pass_turns_through(self, say: Callable[[str], None] | None = None) -> bool:
        """Between two passes of long work (a Run): other sessions' waiting Next tokens and Prefills (one pass each)
        go first, then this turn resumes ahead of the rest of the line (`DeviceQueue.step_aside`). `say` shows the
        pause while it lasts (cleared with ""). Returns whether any went first. The caller has paused its request's
        clock and let the pass gate go: the passes let through time themselves on it."""
        ticket = self.queue.step_aside(self.ticket)
        if ticket is None:
            return False
        self.ticket = ticket
        if say is not None:
            say(
                "Paused between two passes: another session's one-pass turn goes first. This run's clock is paused, "
                "so the pause is in none of its times."
            )
        while not self.queue.wait(ticket, POLL_S):
            status = self.queue.status(ticket)
            if not status.in_line and not status.holding:
                raise BadInput("This run lost its place on the device while it let another session through.")
            if say is not None:  # a draw: where a click or a closed tab stops this wait (Streamlit raises here)
                say(
                    f"Paused between two passes for {status.ahead} one-pass turn(s) of other "
                    "sessions; this run's clock is paused."
                )
        if say is not None:
            say("")
        return True


class RunOnTurn:
    """A Run's passes counted on its turn as each finishes (so each stretch of a turn that let others through carries
    its own passes in the turn log), and the points between passes where it lets one-pass turns through."""

    def __init__(self, turn: DeviceTurn, say: Callable[[str], None] | None = None) -> None:
        self.turn, self.say = turn, say
        self._since_s = time.perf_counter()

    def tally(self, record: PassRecord) -> None:
        """One timed pass done: counted with the forwards since the last count (a warm-up's too)."""
        self._count(1, record.wall_s)

    def let_through(self) -> None:
        """Between two passes (or two warm-up forwards): waiting one-pass turns go first."""
        self._count(0, 0.0)
        self.turn.let_one_pass_turns_through(self.say)
        self._since_s = time.perf_counter()  # the turns let through ran their own forwards

    def done(self) -> None:
        self._count(0, 0.0)

    def _count(self, passes: int, pass_s: float) -> None:
        now = time.perf_counter()
        self.turn.ran(passes, pass_s, now - self._since_s)
        self._since_s = now


@contextmanager
def device_turn(what: str = "run", passes: int | None = None, steps_aside: bool = False) -> Iterator[DeviceTurn]:
    """Hold the device for one piece of work (`passes`: the passes it will run, at most, for the waiting line;
    `steps_aside`: it lets one-pass turns through between them, `RunOnTurn`), waiting in line (and saying so) while
    other sessions hold it.

    The turn ends as soon as the work is done and recorded: the page it draws next holds nothing, so the next session's
    passes start at once (drawing and passes are kept apart by the gate instead: `drawing()`). Streamlit raises its
    rerun or stop exception at the next draw or session-state access after a click or a closed tab, wherever that
    falls: so the turn is given back in `finally`, with no Streamlit call between the block and that. Taking a turn
    also frees any session's stepped request left idle: a session that walked away must not keep its cache on the
    device others are queuing for.
    """
    session = server_session()
    queue = session.queue
    turn = DeviceTurn(queue, queue.enter(what, _session_label(), passes, steps_aside))
    # The cores to this thread first, where allowed (`pass_priority`: beside busy processes a decode took 3.5x longer),
    # from its wait on: woken for its turn at nice 0, a thread in a room took up to 0.2 s to start, and everyone
    # behind it waited for that too. Waiting, it sleeps but for redrawing its place every POLL_S.
    with session.priority.raised() as nice:
        try:
            _wait_for_turn(queue, turn.ticket, hosting_policy().max_wait_s)
            session.steps.sweep()
            # The interpreter lock back to the passes at once, not after 5 ms (`passes_first`); torch's threads fitted
            # to the cores other work leaves free (`pass_threads`: on a busy machine a second thread made forwards
            # wait).
            with PASSES_FIRST.held(), session.threads.fitted() as threads:
                turn.threads, turn.nice = threads, nice
                yield turn
        finally:
            queue.release(turn.ticket)
