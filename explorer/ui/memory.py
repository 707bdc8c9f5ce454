"""The web tier's memory: glibc's malloc arenas capped at two at the server's start.

Why: glibc gives each thread that meets a busy arena one of its own, up to 8 per core, and Streamlit runs every
session's script in a thread of its own, so a room's web process kept growing arenas it never gave back. Two are
plenty for a process that only draws (its model runs in the device owner).

Measured (benchmarks/workshop.py --sessions 8 --split-cores, 2 cores, 2026-11-29): the web tier grew by 121 MB over
a workshop of 8 with glibc's default and by 68 MB with two arenas (MALLOC_ARENA_MAX=2), the same sessions served.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
WEB_TIER_ARENAS = 2


def cap_malloc_arenas(arenas: int = WEB_TIER_ARENAS) -> bool:
    """At the server's start, before its session threads: at most `arenas` malloc arenas (glibc only; a
    MALLOC_ARENA_MAX already set in the environment wins). False where it was not applied."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        return bool(ctypes.CDLL(name).mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to cap
        return False
