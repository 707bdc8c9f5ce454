"""The clocks a sweep keeps: one deadline per request (`--timeout-s`) and one for the sweep (`--time-limit-s`).

httpx's own timeouts count per read, so a server that drips a byte a second (in its headers or its body) would reset
them forever. A `Watchdog` thread therefore ends every open request at its deadline by shutting its socket down, which
wakes a blocked read at once; the reading thread also checks the deadline on every piece of the body it gets. Ctrl-C
(or a page that stops) ends every open request the same way, at once.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

EndReason = Literal["timeout", "time limit", "interrupted"]
SOCKET_EVENTS = ("connection.connect_tcp.complete", "connection.start_tls.complete")  # httpcore's trace names


class CallEnded(Exception):
    """Raised in the reading thread once its request was ended (`Call.reason` says why)."""


@dataclass(frozen=True)
class Deadline:
    """The sweep's time limit, shared by every thread: no request starts after it, and running ones stop at it."""

    limit_s: float
    at: float  # time.monotonic() seconds

    @classmethod
    def after(cls, limit_s: float) -> Deadline:
        return cls(limit_s, time.monotonic() + limit_s)

    def passed(self) -> bool:
        return time.monotonic() >= self.at


@dataclass(eq=False)
class Call:
    """One request's connection as the watchdog sees it: when it must end, and how to end it at once."""

    ends_at: float  # time.monotonic() seconds: the earlier of the request's own deadline and the sweep's
    reason_at_end: EndReason  # which of the two that is
    limit_s: float  # that deadline's length, for the message: the request's timeout or the sweep's time limit
    reason: EndReason | None = None  # set once the call was ended early
    _socket: socket.socket | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's `trace` extension: keep the connection's socket once it is open (again after TLS wraps it)."""
        if name in SOCKET_EVENTS:
            with self._lock:
                self._socket = info["return_value"].get_extra_info("socket")
                if self.reason is not None:
                    self._shut()

    def end(self, reason: EndReason) -> None:
        """Stop the request from any thread: its blocked read returns now, and the reader sees `reason`."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
                self._shut()
        self._ended.set()

    def _shut(self) -> None:
        if self._socket is None:
            return
        try:
            # socket.socket's own shutdown, also on a TLS socket: SSLSocket.shutdown would drop its SSL object under
            # the reading thread; a plain shutdown of the descriptor makes that thread's read return.
            socket.socket.shutdown(self._socket, socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by httpx: nothing left to wake

    def check(self) -> None:
        """Raise CallEnded once the call was ended or its deadline passed (the reader's own check, per read)."""
        if self.reason is None and time.monotonic() >= self.ends_at:
            self.end(self.reason_at_end)
        if self.reason is not None:
            raise CallEnded(self.reason)

    def left_s(self) -> float:
        return self.ends_at - time.monotonic()

    def sleep(self, seconds: float) -> bool:
        """Wait (a server's Retry-After) unless the call is ended first; True when the wait ran its course."""
        return not self._ended.wait(seconds) and self.reason is None


class Watchdog:
    """Ends every open call at its deadline, and every one at once on `stop_all` (Ctrl-C, a stopped page).

    One thread for the whole sweep, woken when a call opens or the earliest deadline comes: bounded however many
    requests a sweep sends. Use it as a context manager so its thread ends with the sweep.
    """

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.stopped: EndReason | None = None  # set by stop_all: no new request is sent after it
        self._calls: set[Call] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="remote-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def open(self, timeout_s: float) -> Call:
        own_end = time.monotonic() + timeout_s
        if own_end < self.deadline.at:
            call = Call(own_end, "timeout", timeout_s)
        else:
            call = Call(self.deadline.at, "time limit", self.deadline.limit_s)
        with self._cond:
            if self.stopped is not None:
                call.end(self.stopped)
            self._calls.add(call)
            self._cond.notify_all()
        return call

    def close(self, call: Call) -> None:
        with self._cond:
            self._calls.discard(call)

    def stop_all(self, reason: EndReason) -> None:
        with self._cond:
            self.stopped = self.stopped or reason
            calls = list(self._calls)
        for call in calls:
            call.end(reason)

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for call in [c for c in self._calls if c.ends_at <= now]:
                    call.end(call.reason_at_end)
                    self._calls.discard(call)
                wake_at = min((c.ends_at for c in self._calls), default=None)
                self._cond.wait(None if wake_at is None else max(wake_at - now, 0.001))
