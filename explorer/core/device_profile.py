"""The device's peak compute and bandwidth the roofline formulas divide by (`DeviceProfile`), each figure with where it
came from; part of every `Trace`; a CPU's kept between processes where `$EXPLORER_FIGURES_FILE` names a file.

Why the file: a CPU's figures are its hardware's, which a restart does not change, and the microbenchmarks take 8-18 s
of a busy machine (more when the first set looks taken under load and is taken again). An operator can take them once
at a quiet moment and have every restart use them; the test suite takes them once per run for the servers and commands
it starts. Figures are read back only for the same CPU, thread count, torch version and dtype, with their judgement
(a set taken under load stays marked so); a re-measure replaces them. The file is read as data: a damaged or foreign
one is ignored and the figures measured.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Literal

from explorer.core.cpu_facts import cpu_name

Source = Literal["measured", "spec", "nvml", "modelled", "achieved"]  # achieved: by a pass of the run itself
# The copy figure counts bytes read plus bytes written, as STREAM's copy does; the read figure counts each byte a
# read-only stream (a reduction) reads, once. The roofline divides the bytes a pass only reads (weights, KV reads) by
# the read figure and the bytes it writes (the KV cache's update) by the copy figure, so each division counts alike.
BANDWIDTH_COUNTS = "read + write"
READ_BANDWIDTH_COUNTS = "read only"


@dataclass(frozen=True)
class DeviceProfile:
    """The hardware figures the roofline model divides by, each with where it came from."""

    name: str
    kind: str  # "cpu" | "cuda"
    dtype: str  # the dtype the FLOP/s figures are for
    peak_flops: float  # FLOP/s used by the roofline model
    peak_flops_source: Source
    bandwidth_bytes_per_s: float  # memory bandwidth used by the roofline model
    bandwidth_source: Source
    measured_flops: float | None = None  # achievable: the best of the matmul microbenchmark's repeats
    measured_bandwidth_bytes_per_s: float | None = None  # achievable: the best of the copy's repeats
    memory_bytes: int | None = None
    notes: str = ""
    flops_samples: tuple[float, ...] = ()  # FLOP/s of every timed matmul repeat
    bandwidth_samples: tuple[float, ...] = ()  # B/s of every timed copy repeat
    matmul_n: int | None = None  # the microbenchmark: an n x n by n x n matmul in `dtype`
    copy_bytes: int | None = None  # the microbenchmark: a copy of this many bytes
    bandwidth_counts: str = BANDWIDTH_COUNTS
    measured_at: str = ""  # ISO time the microbenchmarks ran
    busy_note: str = ""  # why the figures were re-taken or raised after a run beat them; empty when they held
    # Read-only bandwidth: what weight and KV reads are divided by. None in traces taken before it was measured:
    # reads then use the copy figure (`read_bandwidth_from_copy`), and the device table and the CLI say so.
    read_bandwidth_bytes_per_s: float | None = None
    read_bandwidth_source: Source | None = None
    measured_read_bandwidth_bytes_per_s: float | None = None  # achievable: the best of the read-only stream's repeats
    read_bandwidth_samples: tuple[float, ...] = ()  # B/s of every timed read-only repeat (bytes read once)
    read_bytes: int | None = None  # the microbenchmark: a reduction reading this many bytes
    # Whether the figures look taken under load (see `figure_trust`): then every bound and ridge from them is marked.
    # Traces from before the judgement open as not flagged, their figures as they were.
    figures_taken_under_load: bool = False
    figures_note: str = ""  # why they look unreliable, and whether they were taken twice; "" when they look sound
    figures_retaken: bool = False  # the first set looked unreliable, so the microbenchmarks ran again after a pause
    benchmark_core_share: float | None = None  # CPU: process CPU time / (wall x threads) over the memory streams
    # A GPU's datasheet figures, kept beside the measured ones the roofline divides by (None: no datasheet, a CPU or a
    # GPU the spec table does not know). The bandwidth is NVML's for this very board where the driver gives it.
    datasheet_flops: float | None = None
    datasheet_bandwidth_bytes_per_s: float | None = None
    datasheet_bandwidth_source: Source | None = None  # "nvml" or "spec"
    datasheet_source: str = ""  # where they come from: the spec row and its document, or "nvml"

    @property
    def measured_read_peak(self) -> tuple[float, Source]:
        """The read bandwidth this device achieved (a read-only stream's best), with its source; an older trace or a
        failed benchmark falls back to the copy stream, then to the figure the roofline divides by."""
        for figure in (self.measured_read_bandwidth_bytes_per_s, self.measured_bandwidth_bytes_per_s):
            if figure:
                return figure, "measured"
        return self.effective_read_bandwidth_bytes_per_s, self.read_bandwidth_source or self.bandwidth_source

    @property
    def measured_compute_peak(self) -> tuple[float, Source]:
        """The FLOP/s this device's matmul achieved, with its source; else the figure the roofline divides by."""
        if self.measured_flops:
            return self.measured_flops, "measured"
        return self.peak_flops, self.peak_flops_source

    @property
    def read_bandwidth_from_copy(self) -> bool:
        """A trace from before the read-only figure existed: its reads are divided by the copy figure."""
        return self.read_bandwidth_bytes_per_s is None

    @property
    def effective_read_bandwidth_bytes_per_s(self) -> float:
        """What the roofline divides bytes read by: the read-only figure, else (an older trace) the copy figure."""
        if self.read_bandwidth_bytes_per_s is None:
            return self.bandwidth_bytes_per_s
        return self.read_bandwidth_bytes_per_s

    @property
    def ridge_point_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a pass is compute-bound on this device. Against the read figure: every
        pass reads more bytes than it writes (the weights alone outweigh the KV cache's update)."""
        return self.peak_flops / self.effective_read_bandwidth_bytes_per_s


# --- kept between processes ------------------------------------------------------------------------------------------
FIGURES_FILE_ENV = "EXPLORER_FIGURES_FILE"
MAX_FILE_BYTES = 1_000_000  # a few kB per entry: anything larger is not a file this module wrote
READ_NOTE = "measured by an earlier process on this machine at {at}, read from ${env}"


def figures_path() -> Path | None:
    wanted = os.environ.get(FIGURES_FILE_ENV, "").strip()
    return Path(wanted) if wanted else None


def entry_key(dtype: str) -> str:
    """What must match for figures to be this machine's: the CPU, the threads torch runs on, torch, the dtype."""
    import torch  # here: the dataclass above is read where torch need not be imported

    return f"{cpu_name()} | {torch.get_num_threads()} threads | torch {torch.__version__} | {dtype}"


def _entries(path: Path) -> dict[str, dict]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_cpu_figures(dtype: str) -> DeviceProfile | None:
    """This machine's figures for `dtype` from the file, marked as read; None when unset, absent, or not usable."""
    path = figures_path()
    if path is None:
        return None
    from pydantic import TypeAdapter, ValidationError  # here: only a process that reads a file pays for it

    entry = _entries(path).get(entry_key(dtype))
    names = {f.name for f in fields(DeviceProfile)}
    if not isinstance(entry, dict) or not set(entry) <= names:
        return None
    try:  # every field of its declared type, as an uploaded recording's figures are checked
        profile = TypeAdapter(DeviceProfile).validate_python(entry)
    except ValidationError:
        return None
    if (profile.kind, profile.dtype) != ("cpu", dtype) or min(profile.peak_flops, profile.bandwidth_bytes_per_s) <= 0:
        return None
    note = READ_NOTE.format(at=profile.measured_at or "an unknown time", env=FIGURES_FILE_ENV)
    return replace(profile, figures_note=f"{note}; {profile.figures_note}" if profile.figures_note else note)


def write_cpu_figures(profile: DeviceProfile) -> None:
    """Keep a CPU set in the file for later processes (written whole, then renamed: a reader never sees half)."""
    path = figures_path()
    if path is None or profile.kind != "cpu":
        return
    entries = _entries(path) if path.exists() else {}
    entries[entry_key(profile.dtype)] = asdict(profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(entries, f, indent=1)
        os.replace(f.name, path)
    except OSError:
        return  # a file that cannot be written costs the next process its seconds, nothing more
