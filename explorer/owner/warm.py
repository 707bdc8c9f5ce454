"""Warming the device up: one piece of work, done once per owner process in a background thread as it starts (the
owner loads its default model and takes the device figures: `Owner.warm_up`), with what it is doing, for how long,
and how it ended, for the sidebar's one line. Pure Python and thread-safe, no Streamlit and no torch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LOG = logging.getLogger("explorer.warm")

Say = Callable[[str], None]  # the work says what it is doing now ("loading the model…")
Work = Callable[[Say], None]


@dataclass(frozen=True)
class WarmStatus:
    """Where warming stands. `state`: "not started", "warming", "warm" or "failed"."""

    state: str
    doing: str = ""  # while warming: what it is doing now
    elapsed_s: float = 0.0  # since warming started (while warming), or how long it took (once ended)
    finished_at: str = ""  # the server's local clock, HH:MM:SS, once ended
    error: str = ""  # one line, when it failed

    @property
    def ended(self) -> bool:
        return self.state in ("warm", "failed")

    def line(self) -> str:
        """The sidebar's sentence."""
        if self.state == "warming":
            return f"Warming up, {self.elapsed_s:.0f} s so far: {self.doing}. A run pressed now starts when it ends."
        if self.state == "warm":
            return (
                f"Server warm: model loaded and device figures taken at {self.finished_at} "
                f"(in {self.elapsed_s:.0f} s, when the server started)."
            )
        if self.state == "failed":
            return f"Warming up at server start failed: {self.error} The first run loads the model itself."
        return ""


class Warmer:
    """Runs one piece of work once, in a daemon thread, and keeps what it says. `start` again does nothing."""

    def __init__(self) -> None:
        self.clock = time.monotonic
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = "not started"
        self._doing = ""
        self._started_s = 0.0
        self._ended_s = 0.0
        self._finished_at = ""
        self._error = ""

    def start(self, work: Work, thread_name: str = "explorer-warm") -> bool:
        """Start `work` in a background thread unless it was started before; True if this call started it."""
        with self._lock:
            if self._thread is not None:
                return False
            self._state, self._doing, self._started_s = "warming", "starting", self.clock()
            self._thread = threading.Thread(target=self._run, args=(work,), name=thread_name, daemon=True)
        self._thread.start()
        return True

    def say(self, doing: str) -> None:
        with self._lock:
            self._doing = doing

    def _run(self, work: Work) -> None:
        try:
            work(self.say)
        except Exception as exc:  # noqa: BLE001 - a failed warm-up is logged and said; the app keeps working
            LOG.warning("Warming up at server start failed: %s", exc, exc_info=True)
            self._end("failed", failure_sentence(exc))
        else:
            self._end("warm", "")
            LOG.info(self.status().line())

    def _end(self, state: str, error: str) -> None:
        with self._lock:
            self._state, self._error, self._ended_s = state, error, self.clock()
            self._finished_at = time.strftime("%H:%M:%S")
        self._done.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once warming has ended (warm or failed); False after `timeout_s`, or at once if it never started."""
        with self._lock:
            if self._thread is None:
                return False
        return self._done.wait(timeout_s)

    def status(self) -> WarmStatus:
        with self._lock:
            if self._state == "not started":
                return WarmStatus("not started")
            ended = self._state in ("warm", "failed")
            elapsed_s = (self._ended_s if ended else self.clock()) - self._started_s
            return WarmStatus(self._state, self._doing, elapsed_s, self._finished_at, self._error)


def failure_sentence(exc: BaseException) -> str:
    """One line for the sidebar: the error's own first line (an ExplorerError is written for people), ending in a
    full stop."""
    text = (str(exc).strip().splitlines() or [""])[0] or type(exc).__name__
    return text if text.endswith((".", "!", "?")) else text + "."
