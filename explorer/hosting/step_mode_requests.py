"""Every stepped request of this server, so that any session can free the ones their owners left idle."""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

IDLE_TIMEOUT_S = 600.0  # a stepped request untouched this long frees its cache


class Freeable(Protocol):
    """What the sweep needs of a stepped request (`explorer.labs.step_mode.SteppedRequest`)."""

    @property
    def freed(self) -> bool: ...

    def free_if_idle(self, idle_timeout_s: float) -> bool: ...


class LiveSteps:
    """The stepped requests of this process, held weakly (a session that ends takes its request with it), so that
    any session can free those left idle past `idle_timeout_s` instead of waiting for their owner to come back."""

    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.requests: weakref.WeakSet[Freeable] = weakref.WeakSet()
        self.lock = threading.Lock()  # sessions add and sweep from their own threads

    def add(self, request: Freeable) -> None:
        with self.lock:
            self.requests.add(request)

    def sweep(self) -> int:
        """Free every live request idle past the timeout; how many were freed."""
        with self.lock:
            live = [r for r in self.requests if not r.freed]
        return sum(r.free_if_idle(self.idle_timeout_s) for r in live)
