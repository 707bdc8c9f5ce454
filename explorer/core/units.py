"""Byte, time and rate units and their formatting: SI bytes (kB, MB, GB, GB/s) as datasheets print them, binary MiB
and GiB only where a figure is binary at its source.

One place, so the CLI, the charts and the pages print the same figure the same way.
"""

from __future__ import annotations

KB, MB, GB = 1e3, 1e6, 1e9
GIB = 1024**3  # GPU memory sizes are binary (matching a GPU to its spec sheet by memory)
MIB = 1024**2  # binary too, only where an operator sets a figure in MiB (the attention cap, EXPLORER_ATTENTION_CAP_MIB)


def human_bytes(n: float) -> str:
    """'538.1 MB', '46.1 kB', '12 B' (SI: 1 MB = 10^6 bytes)."""
    for unit, size in (("GB", GB), ("MB", MB), ("kB", KB)):
        if abs(n) >= size:
            return f"{n / size:.{1 if abs(n) >= 100 * size else 2}f} {unit}"
    return f"{n:.0f} B"


def megabytes(n: float, signed: bool = False) -> str:
    """'537.2 MB' with one decimal whatever the size, so a column of them lines up (RSS over a soak); signed for a
    change: '+3.1 MB'."""
    return f"{n / MB:{'+' if signed else ''}.1f} MB"


def mebibytes(n: float, decimals: int = 0) -> str:
    """'141 MiB': attention maps beside their cap, which the operator sets in MiB."""
    return f"{n / MIB:.{decimals}f} MiB"


def human_bandwidth(bytes_per_s: float) -> str:
    """'31.4 GB/s': memory bandwidth as datasheets write it."""
    return f"{bytes_per_s / GB:.1f} GB/s"


def human_flops(n: float) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} FLOP"


def human_flops_per_s(flops_per_s: float) -> str:
    return human_flops(flops_per_s) + "/s"


def to_ms(seconds: float) -> float:
    """For charts: a float in milliseconds."""
    return seconds * 1e3


def ms_value(seconds: float | None, decimals: int = 1) -> str:
    """For a column whose header says ms: '12.3', or 'n/a'."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.{decimals}f}"


def ms(seconds: float | None) -> str:
    """For text: '12.34 ms', or 'n/a'."""
    return "n/a" if seconds is None else f"{ms_value(seconds, 2)} ms"


def short_time(seconds: float | None) -> str:
    """Fits a metric column: '87 ms', '1.44 s'."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def percent(fraction: float) -> str:
    """Three significant figures: decode's compute utilisation can be a small fraction of a percent."""
    return f"{fraction * 100:.3g} %"
