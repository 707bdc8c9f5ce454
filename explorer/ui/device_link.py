"""The web tier's side of the device: every page that needs the model sends a job to the device owner
(`explorer.owner.server`) and draws what streams back: its place in line with "Leave the queue", a progress bar, a
pause note, and the job's own records, handed to the page's callbacks as they arrive. Nothing here runs the model.

A job's stream is read by a thread of its own, not the script's: a click stops a script at its next draw, and a job
past the point the page named (`Keep`: a Run's trace has arrived) must still bring its last records home (the
attention maps), which `on_done` then keeps with no Streamlit call. Before that point a stopped script drops the job:
"Leave the queue", a click elsewhere or a closed tab gives its place in line back.
"""

from __future__ import annotations

import hashlib
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.core.errors import ExplorerError
from explorer.hosting.client import DeviceLink, Event, OwnerGone
from explorer.owner.line import QueueStatus, wait_sentence, work_ahead
from explorer.ui.state import LEFT_QUEUE
from explorer.ui.widgets import escape_markdown, failed_line, failure_line, show_error

QUEUED_KEY = "device-queued"  # a one-pass job's queued line and its button: container key QUEUED_KEY-<n>
WAITS = itertools.count(1)  # every wait drawn: its widgets' keys
QUEUED_ICON = "⏳"  # never the ⚠ that marks a disturbed pass: waiting in line disturbs no pass's timing

OnEvent = Callable[[Any], None]
STARTING = "Starting the device owner (the process that runs the model)…"


@st.cache_resource(show_spinner=False)
def device_link() -> DeviceLink:
    """This web process's way to its device: the owner named by `EXPLORER_DEVICE_URL`, or one it starts for itself
    (watched, and started again if it dies). Tests clear it (`device_link.clear()`)."""
    return DeviceLink.from_env()


def session_label() -> str:
    """An anonymous label for the owner's turn log: a hash of the session id, never a prompt or a path."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return hashlib.sha256(ctx.session_id.encode()).hexdigest()[:8] if ctx is not None else "no-session"


class JobStream:
    """One job's events, read by a thread of its own into a local queue. `cancel()` drops the job (the reader closes
    the stream at the owner's next event, at most TICK_S away); once `keep_after` has arrived, a cancel no longer
    drops it and the last event goes to `on_done` instead."""

    def __init__(self, link: DeviceLink, kind: str, body: dict[str, Any], keep_after: str | None = None) -> None:
        self.events: queue.Queue[Event | BaseException] = queue.Queue()
        self.keep_after = keep_after
        self.kept = False  # `keep_after` has arrived: the job runs to its end whatever the page does
        self.cancelled = threading.Event()
        self.on_done: Callable[[Event], None] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(link, kind, body), name=f"job-{kind}", daemon=True)
        self._thread.start()

    def _read(self, link: DeviceLink, kind: str, body: dict[str, Any]) -> None:
        stream = link.client.job(kind, body)
        try:
            if link.local is not None and not link.local.listening:  # just started (or restarted): wait for it
                self.events.put(Event("progress", {"fraction": 0.0, "text": STARTING}))
                link.local.ready()
            for event in stream:
                with self._lock:  # each event is either queued for the page or, once it stopped, handled here
                    if event.name == self.keep_after:
                        self.kept = True
                    if not self.cancelled.is_set():
                        self.events.put(event)
                        continue
                if not self.kept:
                    return  # closing the stream drops the job at the owner
                if event.name in ("done", "error") and self.on_done is not None:
                    self.on_done(event)
        except BaseException as exc:  # noqa: BLE001 - handed to the page, which says it in one line
            self.events.put(exc)
            if self.cancelled.is_set() and self.kept and self.on_done is not None:  # nobody reads it: end the wait
                self.on_done(Event("error", {"message": str(exc)}))
        finally:
            stream.close()

    def __iter__(self) -> Iterator[Event]:
        while True:
            item = self.events.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.name in ("done", "error"):
                return

    def cancel(self, on_done: Callable[[Event], None] | None = None) -> None:
        """The page stopped: drop the job, or, past `keep_after`, hand its last event to `on_done` (also one already
        queued for the page, which will never read it)."""
        with self._lock:
            self.on_done = on_done
            self.cancelled.set()
            left: list[Event | BaseException] = []
            while not self.events.empty():
                left.append(self.events.get_nowait())
        last = [e for e in left if isinstance(e, Event) and e.name in ("done", "error")]
        if self.kept and on_done is not None and last:
            on_done(last[-1])


def _left_queue() -> None:
    LEFT_QUEUE.set(True)


def queued_line(status: QueueStatus) -> str:
    """A one-pass job's place in line (a Next token, a step-mode Prefill), short enough for a phone."""
    if status.expected_wait_s is None:
        expected = "how long is not known until a first turn has finished"
    elif status.expected_wait_s < 0.1:
        expected = "any moment now"
    else:
        expected = f"about {status.expected_wait_s:.1f} s"
    place = "You are next in line" if status.ahead <= 1 else f"You are number {status.ahead} in line"
    return f"Queued: {work_ahead(status.passes_ahead, status.other_work_ahead)} ahead, {expected}. {place}."


class JobView:
    """What a page shows of its job while it runs: the place in line (with "Leave the queue"), a progress bar, a
    pause note. Each is drawn where the caller is, the first time it is needed, and removed at the end."""

    def __init__(self, one_pass: bool, max_wait_s: float | None) -> None:
        self.one_pass, self.max_wait_s = one_pass, max_wait_s
        self.line_box: Any = None
        self.line: Any = None
        self.first: QueueStatus | None = None
        self.last: QueueStatus | None = None
        self.bar: Any = None
        self.note_box: Any = None

    def waiting(self, status: QueueStatus) -> None:
        self.first = self.first or status
        self.last = status
        if status.holding:
            self._end_line()
            return
        if self.line_box is None:  # a new wait: a job may wait twice (a step's pass, then its attention replay)
            number = next(WAITS)  # keys unique in the process, so in every script run
            self.line_box = st.empty()
            with (
                self.line_box.container(horizontal=True, vertical_alignment="center", key=f"{QUEUED_KEY}-{number}")
                if self.one_pass
                else self.line_box.container()
            ):
                self.line = st.empty()
                st.button("Leave the queue", key=f"leave-queue-{number}", on_click=_left_queue)
        if self.one_pass:
            self.line.info(queued_line(status), icon=QUEUED_ICON)
        else:
            self.line.info(wait_sentence(status, self.max_wait_s))

    def _end_line(self) -> None:
        if self.line_box is None:
            return
        self.line_box.empty()
        self.line_box = None
        first, last = self.first, self.last
        if first is not None and last is not None and first.ahead:
            ahead = work_ahead(first.passes_ahead, first.other_work_ahead)
            st.caption(
                f"Waited {last.waited_s:.1f} s for the device while other sessions used it (you were number "
                f"{first.ahead} in line when you asked, with {ahead} ahead)."
            )

    def progress(self, fraction: float, text: str) -> None:
        if self.bar is None:
            self.bar = st.progress(0.0, text=escape_markdown(text))
        self.bar.progress(min(1.0, fraction), text=escape_markdown(text))

    def note(self, text: str) -> None:
        if self.note_box is None:
            self.note_box = st.empty()
        if text:
            self.note_box.caption(text)
        else:
            self.note_box.empty()

    def end(self) -> None:
        self._end_line()
        for box in (self.bar, self.note_box):
            if box is not None:
                box.empty()


def owner_failure_line(failure: str, data: dict[str, Any]) -> str:
    """A job's error in one line: a refusal as the owner wrote it; an unexpected failure named as `failure_line` names
    one here ("The run failed: RuntimeError: …"), and on a hosted server by its type alone (its text can quote a path
    of the device's machine)."""
    failed = data.get("failed")
    if not failed:
        return str(data["message"])
    return failed_line(failure, str(failed), f"{failed}: {data['message']}")


@dataclass(frozen=True)
class Keep:
    """From event `after` on, a page that stops no longer drops its job: the job's last event goes to `home` instead,
    on the reader's thread (no Streamlit call may be made there). A Run keeps its capture after its trace."""

    after: str
    home: Callable[[Event], None] | None = None


def on_owner(
    kind: str,
    body: dict[str, Any],
    failure: str,
    on: dict[str, OnEvent] | None = None,
    *,
    view: JobView,
    keep: Keep | None = None,
) -> dict[str, Any] | None:
    """Send job `kind` and draw it in `view` until it ends: its "done" data, or None when it was refused or failed (one
    line on screen says why; `failure` names the work in it). `on` gets the job's own events as they arrive."""
    body = {**body, "session": session_label()}
    try:
        stream = JobStream(device_link(), kind, body, keep.after if keep is not None else None)
    except ExplorerError as exc:
        show_error(str(exc))
        return None
    ended = False  # stays False only when Streamlit stops the script (a BaseException) inside the loop
    try:
        done = _follow(stream, view, on or {}, failure, keep)
        ended = True
        return done
    except (OwnerGone, ExplorerError) as exc:  # the owner lost (restarted), or a refusal on this side: one line
        ended = True
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app keeps running; the line says what failed
        ended = True
        show_error(failure_line(failure, exc))
    finally:
        if not ended:  # the script stopped (a click, a closed tab): drop the job, or let it bring its records home
            stream.cancel(keep.home if keep is not None else None)
        view.end()
    return None


def _follow(
    stream: JobStream, view: JobView, on: dict[str, OnEvent], failure: str, keep: Keep | None
) -> dict[str, Any] | None:
    """The job's events drawn until its last: its "done" data, or None after its error is shown. A kept job's last
    event goes home first, with no Streamlit call: a click may stop this script at its next draw (`view.end()`)."""
    for event in stream:
        if event.name in ("done", "error") and keep is not None and keep.home is not None:
            keep.home(event)
        if event.name == "line":
            view.waiting(QueueStatus(**{**event.data, "other_work_ahead": tuple(event.data["other_work_ahead"])}))
        elif event.name == "progress":
            view.progress(event.data["fraction"], event.data["text"])
        elif event.name == "note":
            view.note(event.data["text"])
        elif event.name == "done":
            return event.data
        elif event.name == "error":
            show_error(owner_failure_line(failure, event.data))
            return None
        elif event.name in on:
            on[event.name](event.data)
    return None


# --- for an operator ---------------------------------------------------------------------------------------------
DEVICE_PATH = "/_device"  # one segment, which explorer/ui/links.py serves as is; no page's name starts with "_"


def device_route() -> Any:
    """`GET /_device` on a web process (app.py's `st.App(routes=...)`): which device owner it reaches and whether that
    answers, and which web process answered. Behind a load balancer (deploy/nginx.conf) an operator, a health check or
    a test sees that every web process shares the one owner. `torch_loaded` is the operator's health view of the web
    tier itself: it must stay False (the model runs in the owner; a web process that imported torch would hold its
    hundreds of MB in every web process). No URL and no token in it: a visitor may read it."""
    import os
    import sys

    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def answer(_request: Request) -> JSONResponse:  # a plain function: Starlette runs it in its thread pool
        link = device_link()
        said: dict[str, Any] = {
            "web_pid": os.getpid(),
            "restarts": link.restarts,
            "torch_loaded": "torch" in sys.modules,
        }
        try:
            health = link.client.health()
        except ExplorerError as exc:
            return JSONResponse({**said, "ok": False, "message": str(exc)}, status_code=503)
        owner = {"owner_pid": health["pid"], "owner_started_unix_s": health["started_unix_s"]}
        owner |= {"warm": health["warm"]["state"], "waiting": health["waiting"]}
        return JSONResponse({**said, **owner, "ok": True})

    return Route(DEVICE_PATH, answer, methods=["GET"])
