"""What a page draws while work on the device is under way or about to be: a progress bar, and the wait for the
server's warm-up (the queue's own waiting is `explorer.ui.device_turn`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from explorer.core.lab_progress import Report
from explorer.hosting.warm import Warmer
from explorer.ui.widgets import escape_markdown


def wait_for_warming(warmer: Warmer, poll_s: float = 0.5) -> None:
    """Work pressed while the server warms up waits for it, saying so: the warm-up holds the device and is loading
    the very model a run needs (once: the store's lock), so the work then starts warm. A click meanwhile reruns the
    script, which stops this wait at its next redraw."""
    if warmer.status().state != "warming":
        return
    line = st.empty()
    while not warmer.wait(0):
        line.info(warmer.status().line())
        warmer.wait(poll_s)
    line.empty()


@contextmanager
def progress_bar(text: str) -> Iterator[Report]:
    """A progress bar while the block runs, drawn by any progress report (loading, the device figures, the warm-up, a
    lab), and removed when the block ends."""
    bar = st.progress(0.0, text=escape_markdown(text))

    def report(fraction: float, what: str) -> None:
        bar.progress(min(1.0, fraction), text=escape_markdown(what))

    try:
        yield report
    finally:
        bar.empty()
