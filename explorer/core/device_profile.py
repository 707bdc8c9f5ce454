"""The device's peak compute and bandwidth the roofline formulas divide by (`DeviceProfile`), each figure with where it
came from; part of every `Trace`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
