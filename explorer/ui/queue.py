"""The device queue of this server process as a session meets it: a turn on the device (first come first served, see
`explorer.hosting.queue.DeviceQueue`) with the session's place in line while it waits, the per-session rate limit,
and what other sessions draw meanwhile. The queue itself is the shared `DeviceSession`'s (`explorer.ui.shared`)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.core.errors import BadInput
from explorer.hosting.queue import DeviceQueue, Ticket, wait_sentence
from explorer.hosting.settings import HostedPolicy
from explorer.ui.shared import device_session, hosting_policy
from explorer.ui.state import LEFT_QUEUE, RUN_STARTS

DRAW_HOLD_S = 30.0  # a finished run keeps the device while its page is drawn, at most this long
POLL_S = 0.5  # how often a waiting page redraws its place in line (each redraw is also where a click can cancel)
CONTENTION_NOTE = (
    "While this run's passes were timed, {n} other session(s) were drawing a page on this server: the timings may be "
    "slower than on a quiet machine. Run again for a clean measurement."
)


def count_run(policy: HostedPolicy | None = None) -> None:
    """Count one turn on the device against this session's rate limit; raises the limit's ExplorerError when over."""
    policy = hosting_policy() if policy is None else policy
    RUN_STARTS.set(policy.check_rate(RUN_STARTS.get() or (), time.monotonic()))


def note_script() -> None:
    """Count this script run as drawing until its thread ends (the sidebar calls it on every script run)."""
    if get_script_run_ctx(suppress_warning=True) is not None:
        device_session().activity.note(threading.current_thread())


# --- a turn ----------------------------------------------------------------------------------------------------------
def _session_label() -> str:
    """An anonymous label for the turn log: a hash of the session id, never a prompt or a path."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return hashlib.sha256(ctx.session_id.encode()).hexdigest()[:8] if ctx is not None else "no-session"


def _left_queue() -> None:
    LEFT_QUEUE.set(True)


def _wait_for_turn(queue: DeviceQueue, ticket: Ticket, max_wait_s: float | None) -> None:
    """Until `ticket` holds the device: its place, the expected wait and a "Leave the queue" button, redrawn every
    POLL_S. A click anywhere (that button too) reruns the script, which stops this loop at its next redraw and gives
    the place up; past `max_wait_s` the wait is refused with one line."""
    if queue.wait(ticket, 0):
        return
    first = queue.status(ticket)
    box = st.empty()
    with box.container():
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
        line.info(wait_sentence(status, max_wait_s))
        if queue.wait(ticket, POLL_S):
            break
    box.empty()
    waited_s = queue.status(ticket).waited_s
    st.caption(
        f"Waited {waited_s:.1f} s for another session's run to finish (you were number {first.ahead} in line when "
        "you asked)."
    )


class DeviceTurn:
    """A session's turn on the device, as `device_turn()` yields it. Long work calls `pass_on()` between its units."""

    def __init__(self, queue: DeviceQueue, ticket: Ticket) -> None:
        self.queue, self.ticket = queue, ticket

    def pass_on(self) -> None:
        """If anyone is waiting, let them go first and take the device back after them: long work then never blocks
        another session for more than one of its units. The line is FIFO, so later arrivals queue behind this."""
        if self.queue.waiting == 0:
            return
        self.queue.release(self.ticket, "passed on")
        self.ticket = self.queue.enter(self.ticket.what, self.ticket.owner)
        _wait_for_turn(self.queue, self.ticket, max_wait_s=None)  # admitted once already: no refusal mid-way


@contextmanager
def device_turn(what: str = "run") -> Iterator[DeviceTurn]:
    """Hold the device for a whole run, waiting in line (and saying so) while other sessions hold it.

    The turn outlives the `with` block: it ends when this session's script run ends, so the page this run is about
    to draw never competes with the next session's passes (at most DRAW_HOLD_S), or when this session takes its next
    turn (a rerun, a second click). Outside a script run, or when the block raises, it ends at once. Streamlit raises
    its rerun or stop exception at the next draw or session-state access after a click or a closed tab, wherever
    that falls: so the turn is handed to the queue in `finally`, with no Streamlit call between the block and that.
    Taking a turn also frees any session's stepped request left idle: a session that walked away must not keep its
    cache on the device others are queuing for.
    """
    session = device_session()
    queue = session.queue
    turn = DeviceTurn(queue, queue.enter(what, _session_label()))  # gives back this session's turn kept for drawing
    finished = False
    try:
        _wait_for_turn(queue, turn.ticket, hosting_policy().max_wait_s)
        session.steps.sweep()
        yield turn
        finished = True
    finally:
        if finished and get_script_run_ctx(suppress_warning=True) is not None:
            queue.release_when_done(turn.ticket, threading.current_thread(), DRAW_HOLD_S)
        else:  # an error, a refusal, a click or a closed tab: nothing left to draw for this run
            queue.release(turn.ticket)


class ContentionProbe:
    """Samples, at the start and after every pass, how many other sessions' scripts are drawing (not waiting)."""

    def __init__(self) -> None:
        self.me = threading.get_ident()
        self.most = 0
        self.sample()

    def sample(self) -> None:
        session = device_session()
        others = session.activity.others_drawing(self.me, session.queue.waiting_thread_ids())
        self.most = max(self.most, others)

    @property
    def note(self) -> str:
        return CONTENTION_NOTE.format(n=self.most) if self.most else ""
