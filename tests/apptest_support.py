"""Shared AppTest set-up for page tests: the app run as a server runs it, a new visitor's app, and a page opened on a
given run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import pytest
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from explorer.owner.line import DeviceQueue, Ticket
from explorer.ui import state as ui_state

ROOT = Path(__file__).resolve().parents[1]
W = TypeVar("W", bound=Any)  # an AppTest widget: each kind has its own class, all with `key` and `label`
APP_TIMEOUT_S = 180  # a first run loads the model and measures the device, on a busy 2-core machine


class ServerPagesManager(PagesManager):
    """A PagesManager that keeps the flag `st.navigation` clears, as a real server's does across runs."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        PagesManager.uses_pages_directory = False


@pytest.fixture(scope="module", autouse=True)
def navigation_like_a_server() -> Iterator[None]:
    """AppTest builds a new PagesManager every run and, seeing a `pages/` folder, falls back to the legacy multipage
    path that skips app.py; give it one that behaves as on a server. Import the fixture into a test module to use it."""
    with mock.patch("streamlit.testing.v1.app_test.PagesManager", ServerPagesManager):
        yield


def new_app(timeout_s: float = APP_TIMEOUT_S) -> AppTest:
    """The app as a new visitor opens it: the first page, no run yet."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout_s)
    at.run()
    assert not at.exception, at.exception
    return at


def open_page(page: str, result: ui_state.RunResult | None = None, timeout_s: float = 60) -> AppTest:
    """The app with `result` as the session's finished run (as the sidebar would leave it), switched to `page`."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout_s)
    if result is not None:
        at.session_state[ui_state.RUN] = result
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def keyed(widgets: Iterable[W], prefix: str) -> W:
    """The one widget whose key starts with `prefix`: for a box whose key ends in what its default follows (so that
    it resets when that changes, e.g. `scale-context-{max context}`)."""
    found = [w for w in widgets if w.key is not None and w.key.startswith(prefix)]
    assert len(found) == 1, f"{len(found)} widgets with a key starting {prefix!r}: {[w.key for w in widgets]}"
    return found[0]


def labelled(widgets: Iterable[W], label: str) -> W:
    """The one widget labelled `label`: for a box with no key because its default follows the result shown under it
    (a key would keep what was typed when another result comes to be shown)."""
    found = [w for w in widgets if w.label == label]
    assert len(found) == 1, f"{len(found)} widgets labelled {label!r}: {[w.label for w in widgets]}"
    return found[0]


HELD_AFTER_SOMEONE_WAITS_S = 0.5  # how long the other session keeps the device once this one is in line


def release_once_someone_waits(queue: DeviceQueue, held: Ticket, deadline_s: float = 60.0) -> threading.Thread:
    """Another session's turn, given back `HELD_AFTER_SOMEONE_WAITS_S` after a ticket joined the line behind it (not
    after a fixed time from now: a script run slower than that time, on a busy machine, would never have waited).
    Started; join it after the action under test."""

    def release() -> None:
        until = time.monotonic() + deadline_s
        while queue.waiting == 0 and time.monotonic() < until:
            time.sleep(0.02)
        time.sleep(HELD_AFTER_SOMEONE_WAITS_S)
        queue.release(held)

    thread = threading.Thread(target=release, name="other-session", daemon=True)
    thread.start()
    return thread
