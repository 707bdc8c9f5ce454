"""What every session of this web process shares: this server's limits (read from the environment) and the values
read once for all sessions (an embedded tokenizer, a bundled file). The device and everything on it is the device
owner's (`explorer.ui.device_link`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import streamlit as st

from explorer.hosting.settings import HostedPolicy

T = TypeVar("T")


def hosting_policy() -> HostedPolicy:
    """This server's limits, read from the environment on every call (cheap; tests change it between runs)."""
    return HostedPolicy.from_env()


class ReadOnce(Generic[T]):
    """A value made on first ask and kept (an embedded tokenizer, a bundled file): read-only, so sharing it is safe."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._values: dict[object, T] = {}
        self._lock = threading.Lock()

    def get(self, key: object, make: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._values:
                while len(self._values) >= self.capacity:
                    self._values.pop(next(iter(self._values)))
                self._values[key] = make()
            return self._values[key]


@st.cache_resource(show_spinner=False)
def read_once() -> ReadOnce[object]:
    """The web process's one store of values read once, for every session. Tests clear it (`read_once.clear()`)."""
    return ReadOnce()
