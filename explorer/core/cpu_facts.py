"""What the operating system says about this CPU: its name, memory, feature flags and the cores this process may use.
Plain reads of /proc and /sys with a fallback where they are missing (not Linux); no torch, no timing."""

from __future__ import annotations

import math
import os
import platform


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup (container) CPU quota if one is set."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="utf-8") as limit:
            quota, period = limit.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 here, or no quota
        pass
    return cores


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo; none where it cannot be read (not Linux): the small size then."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "CPU"


def cpu_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def cpu_available_memory_bytes() -> int | None:
    """What the kernel says new allocations can take without swapping (MemAvailable); None where it does not say."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    return None
