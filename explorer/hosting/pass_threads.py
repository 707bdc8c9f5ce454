"""How many intra-op threads a turn's passes run on: the cores that other work leaves free, at least one, never more
than the process would use anyway.

Why: torch splits each op of a CPU forward over its threads and waits for the last of them at the op's end. On a
machine whose cores are all taken by other work, one of those threads is often not running, and every op of the
forward waits for the scheduler to give it a core again. In `benchmarks/workshop.py` (8 browser sessions on the 2-core
machine that also serves them, load average about 10), a step's untimed warm twin, a decode that takes about 55 ms
alone, took 2.2-3.0 s on two threads; with the server on one thread (OMP_NUM_THREADS=1) the twins took 0.1-1 s.
Alone, the same machine ran a decode pass as fast on one thread as on two (54 and 56 ms: it is memory-bound) and a
prefill of 40 tokens 1.4x slower; beside three busy processes, one thread was faster for both (52 against 71-79 ms a
decode). So the threads follow the load: all of them on a quiet machine, fewer while other work is runnable.

What is free is read at the turn's start from /proc/loadavg's count of runnable tasks (the turn's own thread is one
of them): an instant's reading, cheap enough for every turn, and a turn lasts a fraction of a second. Where it cannot
be read, nothing changes. `torch.set_num_threads` is set on the holder's thread for its turn and put back after it.
No Streamlit; torch only through the callables given (tests pass their own).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

LOADAVG = Path("/proc/loadavg")


def runnable_tasks(path: Path = LOADAVG) -> int | None:
    """Tasks runnable right now on the whole machine (the caller's thread among them); None where unreadable."""
    try:
        running = path.read_text(encoding="ascii").split()[3]  # "0.52 0.58 0.59 3/467 12345": 3 runnable
        return int(running.split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def fitted_threads(most: int, cores: int, runnable: int | None) -> int:
    """The threads a pass runs on: the cores not taken by the other runnable tasks, between 1 and `most`."""
    if runnable is None:
        return most
    others = max(0, runnable - 1)
    return max(1, min(most, cores - others))


def _torch_threads() -> tuple[Callable[[], int], Callable[[int], None]]:
    import torch

    return torch.get_num_threads, torch.set_num_threads


@dataclass
class PassThreads:
    """Fits the intra-op threads of the holder's turn to the free cores (`fitted`, which yields them)."""

    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    read_runnable: Callable[[], int | None] = runnable_tasks
    threads: tuple[Callable[[], int], Callable[[int], None]] | None = None  # (get, set); torch's by default

    @contextmanager
    def fitted(self) -> Iterator[int]:
        get, set_ = self.threads if self.threads is not None else _torch_threads()
        before = get()
        chosen = fitted_threads(before, self.cores, self.read_runnable())
        if chosen != before:
            set_(chosen)
        try:
            yield chosen
        finally:
            if chosen != before:
                set_(before)
