"""Which CPU cores the device owner's passes run on, set once at start, without privilege.

Why: on a CPU box that also serves the web pages (the app's own owner, a workshop on one machine), every pass shared
its cores with chart drawing and browsers, and a decode pass of ~50 ms came out 1.5-3x slower in a room than alone.
A process may move itself and lower itself on any core it is allowed (`sched_setaffinity`, `setpriority` upwards need
no capability), so the app splits the machine once: the owner keeps the cores named by `EXPLORER_OWNER_CPUS` (the
app's own owner: all but a quarter of them, `cores_for_owner`), and the web tier that started it moves to the rest
and lowers its priority (`leave_to_owner`). Nothing is fitted per turn. On Linux both calls are per thread, so each is
applied to every thread the process has; threads and processes started later inherit from the thread that starts
them (so the owner is started by a thread whose priority was never lowered).
"""

from __future__ import annotations

import os
from pathlib import Path

CPUS_ENV = "EXPLORER_OWNER_CPUS"  # e.g. "1" or "2-15,18": the owner's cores; unset: every core it is allowed
WEB_TIER_NICE = 5  # the web tier's drawing yields to the owner's passes where they share a core


def parse_cpus(text: str) -> set[int]:
    """'1,3-5' -> {1, 3, 4, 5} (Linux's cpu-list format); ValueError on anything else."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if low < 0 or high < low:
            raise ValueError(f"not a CPU range: {part!r}")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise ValueError(f"no CPU named in {text!r}")
    return cpus


def cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def allowed_cpus() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def cores_for_owner(allowed: set[int] | None = None) -> tuple[set[int], set[int]] | None:
    """The app's own owner on this machine: (the owner's cores, the web tier's). The web tier keeps the lowest quarter
    of the cores, at least one (one of 2 cores; 4 of 16, for the many sessions of a room on a big box); None on one
    core (nothing to split)."""
    allowed = allowed_cpus() if allowed is None else allowed
    if len(allowed) < 2:
        return None
    web = set(sorted(allowed)[: max(1, len(allowed) // 4)])
    return allowed - web, web


def _threads(pid: int | None = None) -> list[int]:
    try:
        return [int(t.name) for t in (Path("/proc") / str(pid or "self") / "task").iterdir()]
    except OSError:
        return [pid or 0]


def move_to(cpus: set[int]) -> bool:
    """Every thread of this process onto `cpus`; False where the platform or the cgroup refuses."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        for tid in _threads():
            os.sched_setaffinity(tid, cpus)
    except OSError:
        return False
    return True


def lower_priority(by: int, pid: int | None = None, keep: int | None = None) -> None:
    """Every thread of process `pid` (this one by default) but `keep` (a native thread id) `by` nice steps lower
    (allowed without privilege, never undone)."""
    if not hasattr(os, "setpriority"):
        return
    for tid in _threads(pid):
        if tid == keep:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
        except OSError:
            continue


def take_owner_cores() -> str | None:
    """At the owner's start, before any thread: move onto `EXPLORER_OWNER_CPUS` if set; the sentence said in its log,
    or None. A bad value is refused in one line (ValueError), before torch loads."""
    wanted = os.environ.get(CPUS_ENV, "").strip()
    if not wanted:
        return None
    try:
        cpus = parse_cpus(wanted)
    except ValueError as err:
        raise ValueError(f"{CPUS_ENV}={wanted!r}: {err}") from None
    if not move_to(cpus):
        return f"could not move onto CPUs {cpu_list(cpus)}: running on {cpu_list(allowed_cpus())}"
    return f"passes run on CPUs {cpu_list(cpus)}"


def leave_to_owner(web_cpus: set[int], keep: int | None = None) -> None:
    """The web tier that started its own owner on this machine, once: onto `web_cpus`, and every thread but `keep` (the
    one that starts the owner again, whose priority a new owner inherits) lowered."""
    move_to(web_cpus)
    lower_priority(WEB_TIER_NICE, keep=keep)
