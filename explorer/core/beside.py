"""What other work ran beside a timed pass: the CPU seconds this process's other threads and other processes used
meanwhile, read from Linux's /proc (nothing is claimed where it cannot be read).

Why both: the device owner's other threads (its HTTP loop, the jobs waiting in line) compete with a pass for the
cores and for the interpreter's lock (a pass's Python dispatch needs it between kernels); the web tier, a browser or
another program on the same machine competes for the cores. The pass's own threads (the one that runs it and torch's
worker threads, which are not Python threads) are not counted.

Precision: a thread's CPU time comes from `/proc/self/task/TID/schedstat` in nanoseconds; the machine's busy time
from `/proc/stat` in clock ticks (10 ms), so other processes are counted only beyond `TICK_ALLOWANCE_S`, and only on
the CPUs the pass may run on (`pass_cpus`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TICK_ALLOWANCE_S = 2 / TICKS_PER_S  # /proc/stat's busy time can be a tick off at each end of a short interval


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU time counters at one moment (seconds); None where /proc could not be read."""

    other_threads_s: dict[int, float]  # CPU time of each of this process's Python threads but the caller's, by id
    process_s: float  # every thread of this process (`time.process_time`)
    machine_busy_s: float | None  # every CPU's non-idle time, every process (/proc/stat)


@dataclass(frozen=True)
class Beside:
    """Other work's CPU seconds during an interval (measured)."""

    other_threads_s: float  # this server's other threads: other sessions' scripts drawing, the web server
    other_processes_s: float  # beyond TICK_ALLOWANCE_S: browsers or programs sharing the machine

    @property
    def cpu_s(self) -> float:
        return self.other_threads_s + self.other_processes_s


def thread_cpu_s(native_id: int) -> float | None:
    """A thread's CPU time so far, in seconds; None once it has ended or where /proc has no schedstat."""
    try:
        return int((PROC / "self" / "task" / str(native_id) / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def machine_busy_s(cpus: set[int] | None = None) -> float | None:
    """The busy time so far (user, nice, system, irq, softirq, steal) of the CPUs `cpus` (every CPU where None), in
    seconds; None without /proc."""
    try:
        lines = (PROC / "stat").read_text().splitlines()
        rows = [line.split() for line in lines if line.startswith("cpu")]
        if cpus is None:
            rows = rows[:1]  # the first line sums every CPU
        else:
            rows = [r for r in rows if r[0] != "cpu" and int(r[0][3:]) in cpus]
        busy = 0
        for row in rows:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in row[1:9])
            busy += user + nice + system + irq + softirq + steal
    except (OSError, ValueError):
        return None
    return busy / TICKS_PER_S if rows else None


def pass_cpus() -> set[int] | None:
    """The CPUs the calling thread (a pass's) may run on, where it is not every CPU: other processes count beside a
    pass only on these (an owner given cores of its own, `explorer.hosting.cores`, shares them with no one)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = set(os.sched_getaffinity(0))
    return None if len(cpus) >= (os.cpu_count() or 1) else cpus


def snapshot(me: int | None = None) -> CpuSnapshot:
    """The counters now, leaving out the thread `me` (a native id; the caller's by default)."""
    me = threading.get_native_id() if me is None else me
    ids = {t.native_id for t in threading.enumerate() if t.native_id is not None and t.native_id != me}
    others = {i: s for i in ids if (s := thread_cpu_s(i)) is not None}
    return CpuSnapshot(others, time.process_time(), machine_busy_s(pass_cpus()))


def beside(before: CpuSnapshot, after: CpuSnapshot) -> Beside:
    """What other work used between two snapshots taken by the same thread: each thread's growth (a thread started
    meanwhile counts whole; one that ended meanwhile cannot be read, and counts nothing)."""
    threads = sum((s - before.other_threads_s.get(i, 0.0) for i, s in after.other_threads_s.items()), 0.0)
    processes = 0.0
    if before.machine_busy_s is not None and after.machine_busy_s is not None:
        machine = after.machine_busy_s - before.machine_busy_s
        processes = max(0.0, machine - (after.process_s - before.process_s) - TICK_ALLOWANCE_S)
    return Beside(threads, processes)


class BesideWatch:
    """Other work's CPU during each pass of one job, measured from the job's own thread: `lap()` after each pass gives
    what ran beside it since the last lap (or `restart()`: after the job made way for others, whose passes are not
    "beside" this one's)."""

    def __init__(self) -> None:
        self.laps: list[float] = []
        self._started = snapshot()

    def restart(self) -> None:
        self._started = snapshot()

    def lap(self) -> float:
        now = snapshot()
        self.laps.append(beside(self._started, now).cpu_s)
        self._started = now
        return self.laps[-1]
