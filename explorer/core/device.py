"""The hardware figures the roofline model divides by: measured (on a GPU, the spec table's and NVML's beside them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import torch

from explorer.core.cpu_facts import cpu_flags, cpu_memory_bytes, cpu_name, usable_cores
from explorer.core.device_profile import (
    FIGURES_FILE_ENV,
    DeviceProfile,
    Source,
    read_cpu_figures,
    write_cpu_figures,
)
from explorer.core.errors import BadInput, RunFailed
from explorer.core.figure_trust import unreliable_reason
from explorer.core.gpu_specs import GpuSpec, datasheet_figures, match_gpu_spec, normalise_gpu_name
from explorer.core.lab_progress import Report, silent
from explorer.core.loaded_model import DTYPES
from explorer.core.timing import repeat_timed

pynvml: ModuleType | None
try:
    import pynvml  # nvidia-ml-py; it loads libnvidia-ml only in nvmlInit(), so importing is safe without a GPU
except ImportError:  # optional: without it, bandwidth comes from the spec table or a measurement
    pynvml = None

DEVICE_KINDS = ("cpu", "cuda")

# Microbenchmarks: fixed sizes large enough to be steady, warmed up, each timed REPEATS times and reduced to the best
# (the least disturbed by other processes), with every sample kept for the spread. No size is ever chosen from a timed
# trial: on a busy machine a trial runs slow and would shrink the benchmark, and the peak with it.
CPU_COPY_BYTES = 512 * 1000**2  # far larger than any CPU cache, so the copy streams from DRAM
CPU_MATMUL_N = 2048  # ~17 GFLOP a call: tens of ms on a few cores, so thread start-up is a small part of it
# A 16-bit dtype with no hardware path on this CPU runs at ~1 GFLOP/s (bfloat16 without AVX-512 BF16: a 2048 matmul
# took 17 s to 2 min a call here); 512 costs ~0.2 s a call and reads the same slow rate. Chosen from the CPU's flags.
CPU_MATMUL_N_WITHOUT_HARDWARE = 512
HARDWARE_FLAGS = {  # /proc/cpuinfo flags (x86) that give torch a fast matmul in that dtype; float32 always has one
    "bfloat16": frozenset({"avx512_bf16", "amx_bf16"}),
    "float16": frozenset({"avx512_fp16", "amx_fp16"}),
}
GPU_COPY_BYTES = 1024**3  # leaves every L2 cache (H100 50 MB, L40S 96 MB)
GPU_MATMUL_N = 8192  # fills every SM
REPEATS = 5
RETAKE_PAUSE_S = 2.0  # before taking figures again that looked taken under load: a burst of other work may pass


def device_profile(kind: str, dtype: str, progress: Report | None = None) -> DeviceProfile:
    """The device figures for a run on `kind` ("cpu" | "cuda") in `dtype`, measured now (seconds); `progress` hears of
    each microbenchmark. Nothing is kept here: a `FiguresStore` keeps them for whoever owns it."""
    if kind not in DEVICE_KINDS:
        raise BadInput(f"Unknown device '{kind}': use cpu, cuda or auto.")
    if dtype not in DTYPES:
        raise BadInput(f"Unknown dtype '{dtype}': use one of {', '.join(DTYPES)}.")
    if kind == "cuda" and not torch.cuda.is_available():
        raise BadInput("CUDA requested but no GPU is available: use --device cpu or auto")
    report = progress or silent
    return cpu_profile(dtype, report) if kind == "cpu" else cuda_profile(dtype, report)


MeasureFigures = Callable[[str, str, Report | None], DeviceProfile]  # (kind, dtype, progress) -> figures


@dataclass(frozen=True)
class KeptFigures:
    """Figures a store holds, with how they came to be there."""

    profile: DeviceProfile
    how: str  # "measured", "re-measured", "read from a file", "kept from a run" (raised or re-taken: a pass beat them)
    kept_at: str  # ISO time, UTC


class FiguresStore:
    """The device figures of one owner (a CLI command, the device owner, a test), per (kind, dtype):
    measured on first ask and reused (hardware does not change, only how busy it is), measured again on request, or
    replaced by better ones a run found. Thread-safe: two sessions asking at once measure once, never at once."""

    def __init__(self, measure: MeasureFigures = device_profile) -> None:
        self._measure = measure
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, str], KeptFigures] = {}

    def get(self, kind: str, dtype: str, *, fresh: bool = False, progress: Report | None = None) -> DeviceProfile:
        """The figures for `kind` in `dtype`: the kept ones, or measured now when none are kept or `fresh`
        (a user's "re-measure", or a run that beat them); figures already kept are returned at once, unreported.
        A CPU's first ask reads `$EXPLORER_FIGURES_FILE` where it holds this machine's figures, and every measurement
        is kept there (a re-measure replaces them: figures taken under load are not stuck there)."""
        with self._lock:
            kept = self._kept.get((kind, dtype))
            if fresh or kept is None:
                saved = read_cpu_figures(dtype) if kind == "cpu" and kept is None and not fresh else None
                if saved is not None:
                    (progress or silent)(1.0, f"Device figures read from ${FIGURES_FILE_ENV}")
                    return self._set(saved, "read from a file").profile
                profile = self._measure(kind, dtype, progress)
                if kind == "cpu":
                    write_cpu_figures(profile)
                kept = self._set(profile, "re-measured" if kept is not None else "measured")
            return kept.profile

    def keep(self, profile: DeviceProfile, how: str = "kept from a run") -> None:
        """Keep better figures (a re-measurement, or raised to what a run achieved) for later runs of this owner."""
        with self._lock:
            self._set(replace(profile, busy_note=""), how)

    def kept(self, kind: str, dtype: str) -> KeptFigures | None:
        with self._lock:
            return self._kept.get((kind, dtype))

    def _set(self, profile: DeviceProfile, how: str) -> KeptFigures:
        kept = KeptFigures(profile, how, datetime.now(UTC).isoformat(timespec="seconds"))
        self._kept[(profile.kind, profile.dtype)] = kept
        return kept


def benchmark_record(
    flops_samples: list[float], bandwidth_samples: list[float], read_samples: list[float], matmul_n: int, size: int
) -> dict[str, Any]:
    """The DeviceProfile fields that say what the microbenchmarks were and what every repeat gave (the copy and the
    read-only stream cover the same `size` bytes)."""
    return {
        "flops_samples": tuple(flops_samples),
        "bandwidth_samples": tuple(bandwidth_samples),
        "read_bandwidth_samples": tuple(read_samples),
        "measured_read_bandwidth_bytes_per_s": max(read_samples) if read_samples else None,
        "matmul_n": matmul_n,
        "copy_bytes": size,
        "read_bytes": size,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# --- CPU -------------------------------------------------------------------------------------------------------------


MATMUL_TEXT = "Measuring the device: matmul peak…"
COPY_TEXT = "Measuring the device: copy bandwidth…"
READ_TEXT = "Measuring the device: read-only bandwidth…"


def cpu_profile(dtype: str, progress: Report = silent) -> DeviceProfile:
    """A CPU has no spec table: the peaks and both bandwidths are the best that fixed-size microbenchmarks achieve
    here. Figures that look taken under load (`unreliable_reason`) are taken once more after a short pause, and the
    better set is kept; the profile says which happened and, if they still look unreliable, why."""
    first = take_cpu_figures(dtype, progress)
    reason = unreliable_reason(first)
    if not reason:
        return first
    time.sleep(RETAKE_PAUSE_S)
    again = take_cpu_figures(
        dtype, lambda fraction, text: progress(fraction, f"{text} (again: the first set looked taken under load)")
    )
    second_reason = unreliable_reason(again)
    kept, kept_reason = max([(first, reason), (again, second_reason)], key=lambda pair: figures_quality(*pair))
    note = f"taken twice, {RETAKE_PAUSE_S:g} s apart, as the first set looked taken under load ({reason})"
    note += f"; the better set still does: {kept_reason}" if kept_reason else "; the better set looks sound"
    return replace(kept, figures_taken_under_load=bool(kept_reason), figures_note=note, figures_retaken=True)


def figures_quality(profile: DeviceProfile, reason: str) -> tuple[bool, float, float]:
    """Which of two sets to keep: a sound one, else the one whose threads had more of their cores, else the faster."""
    return (not reason, profile.benchmark_core_share or 0.0, profile.peak_flops)


def take_cpu_figures(dtype: str, progress: Report = silent) -> DeviceProfile:
    """One set of CPU microbenchmarks: the matmul in `dtype`, then the copy and the read-only stream, whose share of
    the cores says how busy the machine was (the matmul's does not: a dtype without a hardware path may use fewer
    threads)."""
    progress(0.0, MATMUL_TEXT)
    matmul_n = cpu_matmul_n(dtype)
    flops_samples = measure_matmul_flops("cpu", dtype, matmul_n)
    started_cpu_s, started_s = time.process_time(), time.perf_counter()
    progress(0.4, COPY_TEXT)
    bandwidth_samples = measure_copy_bandwidth("cpu", CPU_COPY_BYTES)
    progress(0.7, READ_TEXT)
    read_samples = measure_read_bandwidth("cpu", CPU_COPY_BYTES)
    share = core_share(time.process_time() - started_cpu_s, time.perf_counter() - started_s)
    flops, bandwidth_bytes_per_s = max(flops_samples), max(bandwidth_samples)
    threads = torch.get_num_threads()
    return DeviceProfile(
        name=cpu_name(),
        kind="cpu",
        dtype=dtype,
        peak_flops=flops,
        peak_flops_source="measured",
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        bandwidth_source="measured",
        measured_flops=flops,
        measured_bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        memory_bytes=cpu_memory_bytes(),
        notes=f"CPU: peak figures are the best of {REPEATS} microbenchmark runs ({threads} threads)",
        read_bandwidth_bytes_per_s=max(read_samples),
        read_bandwidth_source="measured",
        benchmark_core_share=share,
        **benchmark_record(flops_samples, bandwidth_samples, read_samples, matmul_n, CPU_COPY_BYTES),
    )


def core_share(cpu_s: float, wall_s: float) -> float:
    """The share of its cores a parallel benchmark got: this process's CPU time over wall time x the threads torch
    runs on (at most the cores this process may use). About 1 on a quiet machine; what other work took is missing."""
    threads = min(torch.get_num_threads(), usable_cores())
    return min(cpu_s / (wall_s * threads), 1.0) if wall_s > 0 else 1.0


def cpu_matmul_n(dtype: str, flags: frozenset[str] | None = None) -> int:
    """CPU_MATMUL_N, or CPU_MATMUL_N_WITHOUT_HARDWARE for a 16-bit dtype this CPU has no hardware path for (none of
    its HARDWARE_FLAGS in `flags`, by default /proc/cpuinfo's). Fixed per dtype and CPU: never from a timed trial."""
    needed = HARDWARE_FLAGS.get(dtype)
    if needed is None:
        return CPU_MATMUL_N
    return CPU_MATMUL_N if needed & (cpu_flags() if flags is None else flags) else CPU_MATMUL_N_WITHOUT_HARDWARE


def measure_copy_bandwidth(device: str, size_bytes: int, repeats: int = REPEATS) -> list[float]:
    """Bandwidth of each of `repeats` copies of `size_bytes`, counting the read and the write (2 x size per copy)."""
    src = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    # repeat_timed's untimed first call also pays dst's page faults, which are not bandwidth.
    return [2 * src.nbytes / s for s in repeat_timed(device, lambda: dst.copy_(src), repeats)]


def measure_read_bandwidth(device: str, size_bytes: int, repeats: int = REPEATS) -> list[float]:
    """Bandwidth of each of `repeats` read-only streams over `size_bytes`, counting each byte read once: a sum, whose
    one-float result writes nothing worth counting. Weights and cached K/V are read like this by every pass."""
    src = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    total = torch.empty((), dtype=torch.float32, device=device)
    return [src.nbytes / s for s in repeat_timed(device, lambda: torch.sum(src, dim=0, out=total), repeats)]


def measure_matmul_flops(device: str, dtype: str, n: int, repeats: int = REPEATS) -> list[float]:
    """FLOP/s of each of `repeats` n x n matmuls in the run's dtype (2 n^3 FLOPs each)."""
    torch_dtype = DTYPES[dtype]
    a = torch.randn(n, n, device=device).to(torch_dtype)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    out = torch.empty(n, n, dtype=torch_dtype, device=device)
    torch.mm(a, b, out=out)  # a warm-up beyond repeat_timed's own: thread pool start-up, kernel choice, clocks
    return [2 * n**3 / s for s in repeat_timed(device, lambda: torch.mm(a, b, out=out), repeats)]


# --- CUDA ------------------------------------------------------------------------------------------------------------


def theoretical_bandwidth_bytes_per_s(max_mem_clock_mhz: float, bus_width_bits: int) -> float:
    """NVML's convention: 2 transfers per reported memory clock (DDR), bus width in bits / 8 bytes per transfer."""
    return 2 * max_mem_clock_mhz * 1e6 * bus_width_bits / 8


def _nvml_query(query: Callable[..., Any], *args: Any) -> Any | None:
    """One NVML query, or None where the device does not support it (e.g. clocks under MIG)."""
    assert pynvml is not None
    try:
        return query(*args)
    except pynvml.NVMLError:
        return None


def nvml_bandwidth(index: int, uuid: str | None = None) -> tuple[str, int | None, float | None] | None:
    """(name, memory bytes, theoretical bandwidth B/s) from NVML, or None when NVML is unusable here.

    The device is found by its UUID where torch gave one (NVML numbers devices by PCI order and ignores
    CUDA_VISIBLE_DEVICES, so index `i` in torch can be another GPU in NVML), else by index.
    """
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver / no GPU: NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        handle = None
        if uuid is not None:
            handle = _nvml_query(pynvml.nvmlDeviceGetHandleByUUID, uuid)
        if handle is None:
            handle = _nvml_query(pynvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return None
        name = _nvml_query(pynvml.nvmlDeviceGetName, handle)
        if name is None:
            return None
        name = name.decode() if isinstance(name, bytes) else str(name)  # older bindings return bytes
        memory = _nvml_query(pynvml.nvmlDeviceGetMemoryInfo, handle)
        memory_bytes = int(memory.total) if memory is not None else None
        max_mem_clock_mhz = _nvml_query(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM)
        bus_width_bits = _nvml_query(pynvml.nvmlDeviceGetMemoryBusWidth, handle)
        bandwidth_bytes_per_s = None
        if max_mem_clock_mhz and bus_width_bits:  # 0 means "unknown" as much as None does
            bandwidth_bytes_per_s = theoretical_bandwidth_bytes_per_s(max_mem_clock_mhz, bus_width_bits)
        return name, memory_bytes, bandwidth_bytes_per_s
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def torch_gpu_uuid(index: int) -> str | None:
    """NVML's spelling ("GPU-xxxxxxxx-...") of the UUID torch reports bare, or None on builds without it."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _measure_or_reason(measure: Callable[[], list[float]]) -> tuple[list[float], str]:
    """Run a GPU microbenchmark; a failure (out of memory, a dtype the GPU lacks) is a note, not a crash."""
    try:
        return measure(), ""
    except RuntimeError as error:  # torch.cuda.OutOfMemoryError is a RuntimeError too
        return [], str(error).splitlines()[0] if str(error) else type(error).__name__
    finally:
        torch.cuda.empty_cache()  # give the benchmark's buffers back before the model loads


def cuda_profile(dtype: str, progress: Report = silent, index: int | None = None) -> DeviceProfile:
    """Peak FLOP/s and both bandwidths measured (a short microbenchmark of each), the datasheet's beside them: the
    spec table's FLOP/s, NVML's bandwidth (else the table's). A failed benchmark falls back to the datasheet's."""
    index = torch.cuda.current_device() if index is None else index
    name = torch.cuda.get_device_name(index)
    memory_bytes = torch.cuda.get_device_properties(index).total_memory
    notes: list[str] = []

    nvml = nvml_bandwidth(index, torch_gpu_uuid(index))
    if nvml is not None and normalise_gpu_name(nvml[0]) != normalise_gpu_name(name):
        notes.append(f"NVML found '{nvml[0]}', not '{name}': its figures are ignored")
        nvml = None
    nvml_bandwidth_bytes_per_s = nvml[2] if nvml is not None else None
    if nvml is None:
        notes.append("NVML unavailable")

    spec = match_gpu_spec(name, memory_bytes)
    flops_samples, bandwidth_samples, read_samples = gpu_benchmarks(f"cuda:{index}", dtype, progress, notes)
    measured_flops = max(flops_samples) if flops_samples else None
    measured_bandwidth = max(bandwidth_samples) if bandwidth_samples else None
    measured_read = max(read_samples, default=None)
    # The roofline divides by what this device measured; the datasheet's figures stand beside them (a datasheet's or
    # NVML's peak is the bus's, the same for reads as for copies, and no kernel reaches it: on an H200 the matmul
    # measured 752-786 TFLOP/s against 989, the read stream about 4.0 TB/s against 4.8).
    sheet = datasheet_figures(spec, _datasheet_flops(spec, dtype, notes), nvml_bandwidth_bytes_per_s)
    sheet_bandwidth, sheet_source = sheet.datasheet_bandwidth_bytes_per_s, sheet.datasheet_bandwidth_source or "spec"
    peak_flops, peak_flops_source = _measured_first(measured_flops, sheet.datasheet_flops, "spec")
    bandwidth_bytes_per_s, bandwidth_source = _measured_first(measured_bandwidth, sheet_bandwidth, sheet_source)
    read_bandwidth, read_source = _measured_first(measured_read, sheet_bandwidth, sheet_source)
    if peak_flops is None or bandwidth_bytes_per_s is None:
        raise RunFailed(f"Could not size the GPU '{name}' for {dtype} ({'; '.join(notes)}): try --device cpu.")
    if spec is not None:
        notes.insert(0, f"spec row: {spec.name} ({spec.source})")
    return judged(
        DeviceProfile(
            name=name,
            kind="cuda",
            dtype=dtype,
            peak_flops=peak_flops,
            peak_flops_source=peak_flops_source,
            bandwidth_bytes_per_s=bandwidth_bytes_per_s,
            bandwidth_source=bandwidth_source,
            measured_flops=measured_flops,
            measured_bandwidth_bytes_per_s=measured_bandwidth,
            memory_bytes=memory_bytes,
            notes="; ".join(notes),
            read_bandwidth_bytes_per_s=read_bandwidth,  # None (reads at the copy figure) only if nothing sized them
            read_bandwidth_source=read_source if read_bandwidth is not None else None,
            **benchmark_record(flops_samples, bandwidth_samples, read_samples, GPU_MATMUL_N, GPU_COPY_BYTES),
            **asdict(sheet),
        )
    )


def judged(profile: DeviceProfile) -> DeviceProfile:
    """A GPU's figures with the judgement on them: only figures it measured can be taken under load (a spec or NVML
    figure cannot), and its spec figures do not move, so it is not taken again."""
    reason = unreliable_reason(profile)
    return replace(profile, figures_taken_under_load=bool(reason), figures_note=reason)


def gpu_benchmarks(
    device: str, dtype: str, progress: Report, notes: list[str]
) -> tuple[list[float], list[float], list[float]]:
    """Samples of the matmul, the copy and the read-only stream on `device`; a failed one is empty, its reason in
    `notes`."""
    progress(0.0, MATMUL_TEXT)
    flops_samples, flops_failure = _measure_or_reason(lambda: measure_matmul_flops(device, dtype, GPU_MATMUL_N))
    progress(0.4, COPY_TEXT)
    bandwidth_samples, bandwidth_failure = _measure_or_reason(lambda: measure_copy_bandwidth(device, GPU_COPY_BYTES))
    progress(0.7, READ_TEXT)
    read_samples, read_failure = _measure_or_reason(lambda: measure_read_bandwidth(device, GPU_COPY_BYTES))
    for what, failure in (("matmul", flops_failure), ("copy", bandwidth_failure), ("read-only", read_failure)):
        notes += [f"{what} benchmark failed: {failure}"] if failure else []
    return flops_samples, bandwidth_samples, read_samples


def tf32_matmuls_enabled() -> bool:
    """Whether float32 matmuls may run on TF32 tensor cores. torch 2.13 raises on the old getter once the new
    `fp32_precision` API has been used, so ask the new API first."""
    try:
        precision = torch.backends.cuda.matmul.fp32_precision  # "tf32", "ieee", or "none": not set, see the old API
    except (AttributeError, RuntimeError):
        precision = "none"
    if precision != "none":
        return precision == "tf32"
    try:
        return torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:
        return False


def _datasheet_flops(spec: GpuSpec | None, dtype: str, notes: list[str]) -> float | None:
    """The table's FLOP/s for `dtype` where one applies: not for float32 under TF32 (tensor cores then run it, well
    above the table's non-tensor FP32 figure), not for a dtype the GPU has no tensor cores for."""
    spec_flops = spec.peak_flops(dtype) if spec is not None else None
    if dtype == "float32" and tf32_matmuls_enabled():
        notes.append("TF32 matmuls are enabled: float32 has no datasheet figure here, only the measured one")
        return None
    if spec is not None and spec_flops is None:
        notes.append(f"{spec.name} has no {dtype} tensor cores: no datasheet figure, only the measured one")
    return spec_flops


def _measured_first(
    measured: float | None, datasheet: float | None, datasheet_source: Source
) -> tuple[float | None, Source]:
    """What the device achieved where it was measured; the datasheet's figure only where the benchmark failed."""
    if measured:
        return measured, "measured"
    return datasheet, datasheet_source
