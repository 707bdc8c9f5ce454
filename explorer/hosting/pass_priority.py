"""The holder of the device ahead of other work for the CPU: a turn's thread, from its wait in line to the turn's end,
runs at a higher scheduling priority (a lower nice value) where the operating system allows it, and goes back to its
own after.

Why: in a room the passes are what everyone waits for, yet the scheduler shares the cores evenly among every runnable
task: the other sessions' page drawing in this process, and on a machine that also runs browsers (a talk's laptop,
`benchmarks/workshop.py`'s 8 Chromiums on 2 cores), those too. A decode pass of the embedded model on one thread took
206 ms at nice 0 beside 6 busy processes on this 2-core machine and 58 ms at nice -10 (55 ms alone; 2026-11-28,
`python benchmarks/pass_priority.py`). From the wait on: woken for its turn at nice 0, a thread in a room of 8 took
up to 0.2 s to start, and everyone behind waited for that too (waiting, it sleeps but for redrawing its place). The
drawing still runs, on what the passes leave.

Linux only: a thread's nice is set with setpriority(PRIO_PROCESS, thread id), which elsewhere would name a process.
Raising the priority needs CAP_SYS_NICE (root outside a container has it; a default container does not) or a nice
rlimit (RLIMIT_NICE of 30 or more, which deploy/explorer.service sets for its unprivileged user): where it is refused,
nothing changes and the turn says so (None; checked here as an unprivileged user). Giving it back is always allowed. The
pass's intra-op worker threads keep theirs; on a busy machine a turn runs on one thread anyway
(`explorer.hosting.pass_threads`). No Streamlit, no torch.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PASS_NICE = -10  # weight about 9x nice 0's: the holder gets ~90% of a core beside any number of nice-0 tasks


def _get_nice(thread_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, thread_id)


def _set_nice(thread_id: int, nice: int) -> None:
    os.setpriority(os.PRIO_PROCESS, thread_id, nice)


@dataclass
class PassPriority:
    """Raises the calling thread's priority for a turn (`raised`, which yields the nice it runs at, or None)."""

    nice: int = PASS_NICE
    supported: bool = sys.platform.startswith("linux")
    get: Callable[[int], int] = _get_nice
    set: Callable[[int, int], None] = _set_nice

    @contextmanager
    def raised(self) -> Iterator[int | None]:
        thread_id = threading.get_native_id()
        before = self._read(thread_id)
        if before is None or before <= self.nice:  # unreadable, or already this high: leave it be
            yield before
            return
        try:
            self.set(thread_id, self.nice)
        except OSError:  # not permitted here: the turn runs as it would have
            yield None
            return
        try:
            yield self.nice
        finally:
            try:
                self.set(thread_id, before)
            except OSError:  # lowering a priority is always allowed; a thread gone is nothing to restore
                pass

    def _read(self, thread_id: int) -> int | None:
        if not self.supported:
            return None
        try:
            return self.get(thread_id)
        except OSError:
            return None
