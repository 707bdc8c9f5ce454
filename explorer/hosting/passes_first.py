"""The device's passes first for Python's interpreter lock: while a session holds the device, the interpreter's switch
interval is short, so the thread running the passes gets the lock back within microseconds after each torch op.

Why: every session of a server is a thread of one Python process, and only one thread runs Python at a time. A
forward of the embedded model lets go of the lock around each of its torch ops (about 1,200 in a decode pass) and
takes it back after; meanwhile another thread running Python (a page building its charts, Streamlit sending them)
keeps it until the switch interval asks it to let go: 5 ms by default, paid again after every op. Measured with
`python benchmarks/gil_beside.py` on one 2-core machine (2026-11-28): a decode pass of the embedded model took 55 ms
alone and 6.7 s beside one thread running Python at 5 ms, 232 ms at 20 µs; a Step click beside three threads of a
page's Python work held the device 3.4-4.1 s at 5 ms and 0.9-1.1 s at 20 µs. The interval only matters while threads
contend for the lock, so the short one costs a page nothing while no pass runs. Process-wide, like the lock itself;
pure Python. (Charts are kept out of a pass's way by the gate as well: `explorer.hosting.quiet`.)
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PASS_SWITCH_INTERVAL_S = 20e-6  # a pass beside one Python thread: 1.2 s at 1 ms, 0.23 s here; 5 µs gained nothing


class SwitchInterval:
    """A short switch interval while any holder is inside `held()` (nested and from many threads); the interval that
    was there before comes back when the last one leaves."""

    def __init__(self, interval_s: float = PASS_SWITCH_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._holders = 0
        self._before_s = sys.getswitchinterval()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._before_s = sys.getswitchinterval()
                sys.setswitchinterval(self.interval_s)
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    sys.setswitchinterval(self._before_s)


PASSES_FIRST = SwitchInterval()  # one per process, as the interpreter lock is
