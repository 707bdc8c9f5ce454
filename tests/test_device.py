"""Device figures: the NVML bandwidth formula and its failure modes (fake pynvml), GPU name matching, source choice."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from explorer.core import device
from explorer.core.device import (
    FiguresStore,
    cuda_profile,
    device_profile,
    nvml_bandwidth,
    theoretical_bandwidth_bytes_per_s,
)
from explorer.core.device_profile import (
    FIGURES_FILE_ENV,
    DeviceProfile,
    entry_key,
    read_cpu_figures,
    write_cpu_figures,
)
from explorer.core.errors import BadInput, RunFailed
from explorer.core.gpu_specs import GPU_SPECS, match_gpu_spec

H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY_BYTES = 85_520_809_984  # what an H100 SXM reports: 81,559 MiB
H100_NVML_BANDWIDTH = 2 * 2619e6 * 5120 / 8  # 3.352e12 B/s


class FakeNvml:
    """Just enough of pynvml for nvml_bandwidth: one device, queries that can be made to fail."""

    NVML_CLOCK_MEM = 2

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def __init__(
        self,
        name: str | bytes = H100_NAME,
        memory_bytes: int = H100_MEMORY_BYTES,
        max_mem_clock_mhz: int = 2619,
        bus_width_bits: int = 5120,
        init_fails: bool = False,
        unsupported: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.memory_bytes = memory_bytes
        self.max_mem_clock_mhz = max_mem_clock_mhz
        self.bus_width_bits = bus_width_bits
        self.init_fails = init_fails
        self.unsupported = unsupported
        self.shutdowns = 0
        self.handles: list[Any] = []

    def _check(self, query: str) -> None:
        if query in self.unsupported:
            raise self.NVMLError_NotSupported(query)

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise self.NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[str, str]:
        self._check("uuid")
        self.handles.append(("uuid", uuid))
        return ("uuid", uuid)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        self.handles.append(("index", index))
        return ("index", index)

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        return self.name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:
        self._check("memory")
        return SimpleNamespace(total=self.memory_bytes, free=self.memory_bytes, used=0)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> int:
        assert clock == self.NVML_CLOCK_MEM
        self._check("clock")
        return self.max_mem_clock_mhz

    def nvmlDeviceGetMemoryBusWidth(self, handle: Any) -> int:
        self._check("bus")
        return self.bus_width_bits


# --- the NVML formula and its failure modes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_mem_clock_mhz", "bus_width_bits", "bytes_per_s"),
    [
        (2619, 5120, 3.35232e12),  # H100 SXM: the datasheet's 3.35 TB/s
        (1215, 5120, 1.5552e12),  # A100 40GB: 1,555 GB/s
        (5001, 256, 320.064e9),  # T4 (GDDR6, NVML reports half the data rate): 320 GB/s
        (10501, 384, 1008.096e9),  # RTX 4090 (GDDR6X): 1,008 GB/s
    ],
)
def test_theoretical_bandwidth_formula(max_mem_clock_mhz: int, bus_width_bits: int, bytes_per_s: float) -> None:
    assert theoretical_bandwidth_bytes_per_s(max_mem_clock_mhz, bus_width_bits) == pytest.approx(bytes_per_s, rel=1e-12)


def test_nvml_bandwidth_reads_name_memory_and_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setattr(device, "pynvml", fake)
    name, memory_bytes, bandwidth = nvml_bandwidth(0)  # type: ignore[misc]
    assert (name, memory_bytes) == (H100_NAME, H100_MEMORY_BYTES)
    assert bandwidth == pytest.approx(3.35232e12, rel=1e-12)
    assert fake.shutdowns == 1


def test_nvml_bandwidth_prefers_the_uuid_and_falls_back_to_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setattr(device, "pynvml", fake)
    nvml_bandwidth(1, "GPU-1234")
    assert fake.handles == [("uuid", "GPU-1234")]
    fake = FakeNvml(unsupported=("uuid",))
    monkeypatch.setattr(device, "pynvml", fake)
    assert nvml_bandwidth(1, "GPU-1234") is not None
    assert fake.handles == [("index", 1)]


def test_nvml_bandwidth_decodes_a_bytes_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "pynvml", FakeNvml(name=b"Tesla T4", max_mem_clock_mhz=5001, bus_width_bits=256))
    result = nvml_bandwidth(0)
    assert result is not None
    assert result[0] == "Tesla T4"


@pytest.mark.parametrize("query", ["clock", "bus"])
def test_unsupported_clock_queries_leave_bandwidth_unknown(monkeypatch: pytest.MonkeyPatch, query: str) -> None:
    fake = FakeNvml(unsupported=(query,))  # e.g. under MIG
    monkeypatch.setattr(device, "pynvml", fake)
    assert nvml_bandwidth(0) == (H100_NAME, H100_MEMORY_BYTES, None)
    assert fake.shutdowns == 1


def test_unsupported_memory_query_leaves_memory_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "pynvml", FakeNvml(unsupported=("memory",)))
    result = nvml_bandwidth(0)
    assert result is not None
    assert result[1] is None
    assert result[2] == pytest.approx(H100_NVML_BANDWIDTH)


def test_nvml_init_failure_returns_none_without_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(init_fails=True)
    monkeypatch.setattr(device, "pynvml", fake)
    assert nvml_bandwidth(0) is None
    assert fake.shutdowns == 0  # nvmlShutdown only pairs with an nvmlInit that succeeded


def test_missing_pynvml_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "pynvml", None)
    assert nvml_bandwidth(0) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine has a working NVML")
def test_real_pynvml_without_a_gpu_returns_none() -> None:
    assert nvml_bandwidth(0) is None  # pynvml raises NVMLError_LibraryNotFound here; no exception escapes


# --- the spec table -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device_name", "memory_bytes", "row"),
    [
        ("NVIDIA H100 80GB HBM3", H100_MEMORY_BYTES, "H100 SXM"),
        ("NVIDIA H100 PCIe", 85_520_809_984, "H100 PCIe"),
        ("NVIDIA H100 NVL", 100_485_038_080, "H100 NVL"),
        ("NVIDIA A100-SXM4-40GB", 42_505_273_344, "A100 40GB SXM"),
        ("NVIDIA A100-SXM4-80GB", 85_899_345_920, "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", 85_899_345_920, "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", None, "A100 40GB PCIe"),
        ("NVIDIA H200", 150_754_820_096, "H200 SXM"),
        ("NVIDIA L4", 24_152_899_584, "L4"),
        ("NVIDIA L40S", 48_305_799_168, "L40S"),
        ("Tesla T4", 15_828_320_256, "T4"),
        ("NVIDIA A10G", 24_146_608_128, "A10G"),
        ("NVIDIA A10", 24_146_608_128, "A10"),
        ("NVIDIA GeForce RTX 4090", 25_757_220_864, "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", 25_769_803_776, "RTX 3090"),
    ],
)
def test_match_gpu_spec_names_as_drivers_report_them(device_name: str, memory_bytes: int | None, row: str) -> None:
    spec = match_gpu_spec(device_name, memory_bytes)
    assert spec is not None
    assert spec.name == row


@pytest.mark.parametrize(
    ("memory_bytes", "row"),
    [(42_505_273_344, "A100 40GB SXM"), (85_899_345_920, "A100 80GB SXM")],
)
def test_memory_splits_an_a100_whose_name_has_no_size(memory_bytes: int, row: str) -> None:
    spec = match_gpu_spec("NVIDIA A100-SXM4", memory_bytes)
    assert spec is not None
    assert spec.name == row


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA A100-SXM4",  # no size in the name and no memory given: 40 or 80 GB can't be told apart
        "NVIDIA L40",  # not an L40S, nor an L4
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GH200 480GB",
        "NVIDIA H200 NVL",
        "AMD Instinct MI300X",
    ],
)
def test_match_gpu_spec_declines_what_it_does_not_know(device_name: str) -> None:
    assert match_gpu_spec(device_name, None) is None


def test_spec_figures_per_dtype() -> None:
    h100 = match_gpu_spec(H100_NAME, H100_MEMORY_BYTES)
    t4 = match_gpu_spec("Tesla T4", None)
    assert h100 is not None and t4 is not None
    assert h100.peak_flops("float32") == 67e12
    assert h100.peak_flops("bfloat16") == pytest.approx(989.4e12)  # dense: half the datasheet's sparse 1,979
    assert h100.bandwidth_bytes_per_s == 3.35e12
    assert t4.peak_flops("bfloat16") is None  # Turing has no bf16 tensor cores
    assert t4.peak_flops("float16") == 65e12


def test_every_row_is_cited_and_tensor_cores_beat_fp32() -> None:
    for spec in GPU_SPECS:
        assert spec.source
        assert spec.fp16_flops > spec.fp32_flops
        assert spec.bf16_flops is None or spec.bf16_flops > spec.fp32_flops
        assert spec.bandwidth_bytes_per_s > 1e11


# --- choosing sources on a (faked) GPU ---------------------------------------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pretend torch sees one GPU; the microbenchmarks return fixed figures instead of touching hardware."""

    def install(
        name: str = H100_NAME,
        nvml: FakeNvml | None = None,
        measured_flops: float | None = 700e12,
        measured_bandwidth: float = 3.0e12,
        measured_read: float | None = 3.2e12,
    ) -> None:
        props = SimpleNamespace(total_memory=H100_MEMORY_BYTES, uuid="0a1b2c3d")
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: name)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
        monkeypatch.setattr(device, "pynvml", nvml)

        def matmul(where: str, dtype: str, n: int) -> list[float]:
            assert where == "cuda:0" and n == device.GPU_MATMUL_N
            if measured_flops is None:
                raise RuntimeError("CUDA error: out of memory")
            return [measured_flops * 0.9, measured_flops, measured_flops * 0.95]  # best of the repeats is the figure

        monkeypatch.setattr(device, "measure_matmul_flops", matmul)
        monkeypatch.setattr(device, "measure_copy_bandwidth", lambda where, size: [measured_bandwidth])

        def read(where: str, size: int) -> list[float]:
            assert where == "cuda:0" and size == device.GPU_COPY_BYTES
            if measured_read is None:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return [measured_read * 0.98, measured_read]

        monkeypatch.setattr(device, "measure_read_bandwidth", read)

    return install


def test_a_known_gpu_divides_by_its_measured_figures_with_the_datasheet_beside(fake_gpu: Any) -> None:
    fake_gpu(nvml=FakeNvml())
    profile = cuda_profile("bfloat16")
    # The roofline divides by what the device measured (best of the repeats) ...
    assert (profile.peak_flops, profile.peak_flops_source) == (700e12, "measured")
    assert (profile.bandwidth_bytes_per_s, profile.bandwidth_source) == (3.0e12, "measured")
    assert (profile.read_bandwidth_bytes_per_s, profile.read_bandwidth_source) == (3.2e12, "measured")
    assert profile.ridge_point_flops_per_byte == pytest.approx(700e12 / 3.2e12)
    # ... and keeps the datasheet's beside: the spec row's FLOP/s, NVML's bandwidth for this board.
    assert profile.datasheet_flops == pytest.approx(989.4e12)
    assert profile.datasheet_bandwidth_bytes_per_s == pytest.approx(H100_NVML_BANDWIDTH)
    assert profile.datasheet_bandwidth_source == "nvml" and "H100 SXM" in profile.datasheet_source
    assert min(profile.flops_samples) == pytest.approx(630e12)
    assert profile.memory_bytes == H100_MEMORY_BYTES
    assert "H100 SXM" in profile.notes
    assert profile.measured_read_bandwidth_bytes_per_s == 3.2e12
    assert profile.read_bandwidth_samples == (pytest.approx(3.136e12), 3.2e12)
    assert profile.read_bytes == profile.copy_bytes == device.GPU_COPY_BYTES


def test_without_nvml_a_known_gpu_takes_its_datasheet_bandwidth_from_the_table(fake_gpu: Any) -> None:
    fake_gpu(nvml=FakeNvml(init_fails=True))
    profile = cuda_profile("float16")
    assert (profile.datasheet_bandwidth_bytes_per_s, profile.datasheet_bandwidth_source) == (3.35e12, "spec")
    assert profile.bandwidth_source == "measured"


def test_a_failed_benchmark_falls_back_to_the_datasheet(fake_gpu: Any) -> None:
    fake_gpu(nvml=FakeNvml(init_fails=True), measured_flops=None, measured_read=None)
    profile = cuda_profile("float16")
    assert (profile.peak_flops, profile.peak_flops_source) == (pytest.approx(989.4e12), "spec")
    assert (profile.read_bandwidth_bytes_per_s, profile.read_bandwidth_source) == (3.35e12, "spec")


def test_unknown_gpu_without_nvml_falls_back_to_measurements(fake_gpu: Any) -> None:
    fake_gpu(name="NVIDIA Future GPU", nvml=None)
    profile = cuda_profile("float16")
    assert (profile.peak_flops, profile.peak_flops_source) == (700e12, "measured")
    assert (profile.bandwidth_bytes_per_s, profile.bandwidth_source) == (3.0e12, "measured")
    assert (profile.read_bandwidth_bytes_per_s, profile.read_bandwidth_source) == (3.2e12, "measured")
    assert profile.ridge_point_flops_per_byte == pytest.approx(700e12 / 3.2e12)


def test_a_failed_read_benchmark_leaves_reads_at_the_copy_figure(fake_gpu: Any) -> None:
    fake_gpu(name="NVIDIA Future GPU", nvml=None, measured_read=None)
    profile = cuda_profile("float16")
    assert profile.read_bandwidth_bytes_per_s is None and profile.read_bandwidth_from_copy
    assert profile.effective_read_bandwidth_bytes_per_s == 3.0e12
    assert "read-only benchmark failed: CUDA error: an illegal memory access" in profile.notes


def test_nvml_of_another_gpu_is_ignored(fake_gpu: Any) -> None:
    fake_gpu(nvml=FakeNvml(name="NVIDIA A10G"))  # NVML's numbering picked a different board
    profile = cuda_profile("float16")
    assert profile.datasheet_bandwidth_source == "spec"
    assert "ignored" in profile.notes


def test_t4_in_bfloat16_measures_its_peak(fake_gpu: Any) -> None:
    fake_gpu(name="Tesla T4", nvml=None, measured_flops=20e12)
    profile = cuda_profile("bfloat16")
    assert (profile.peak_flops, profile.peak_flops_source) == (20e12, "measured")
    assert profile.datasheet_flops is None and "no bfloat16 tensor cores" in profile.notes


def test_tf32_matmuls_make_the_float32_peak_measured(fake_gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(nvml=FakeNvml(), measured_flops=400e12)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    profile = cuda_profile("float32")
    assert (profile.peak_flops, profile.peak_flops_source) == (400e12, "measured")
    assert profile.datasheet_flops is None  # the FP32 row is not what TF32 tensor cores run at


def test_unknown_gpu_whose_benchmark_fails_is_a_run_failure(fake_gpu: Any) -> None:
    fake_gpu(name="NVIDIA Future GPU", nvml=None, measured_flops=None)
    with pytest.raises(RunFailed, match="out of memory"):
        cuda_profile("float16")


# --- the public entry point on this machine --------------------------------------------------------------------------


@pytest.mark.device_figures
def test_cpu_profile_is_measured_and_sensible() -> None:
    profile = device_profile("cpu", "float32")
    assert profile.kind == "cpu" and profile.dtype == "float32" and profile.name
    assert profile.peak_flops > 0 and profile.bandwidth_bytes_per_s > 0
    assert profile.peak_flops_source == "measured" and profile.bandwidth_source == "measured"
    assert profile.measured_flops == profile.peak_flops
    assert profile.measured_bandwidth_bytes_per_s == profile.bandwidth_bytes_per_s
    assert profile.memory_bytes is not None and profile.memory_bytes > 0
    assert 0.1 < profile.ridge_point_flops_per_byte < 10_000  # FLOPs per byte: CPUs sit around 1 to 100
    assert "threads" in profile.notes
    # Fixed sizes, best of five, every sample kept for the spread; SI convention stated.
    assert profile.matmul_n == 2048 and profile.copy_bytes >= 256 * 2**20
    assert len(profile.flops_samples) == len(profile.bandwidth_samples) == 5
    assert profile.peak_flops == max(profile.flops_samples)
    assert profile.bandwidth_bytes_per_s == max(profile.bandwidth_samples)
    assert profile.bandwidth_counts == "read + write" and profile.measured_at
    # The read-only stream: same size, best of five, its own figure; a plausible one beside the copy's.
    assert profile.read_bandwidth_source == "measured" and profile.read_bytes == profile.copy_bytes
    assert len(profile.read_bandwidth_samples) == 5
    assert profile.read_bandwidth_bytes_per_s == profile.measured_read_bandwidth_bytes_per_s
    assert profile.read_bandwidth_bytes_per_s == max(profile.read_bandwidth_samples)
    assert profile.ridge_point_flops_per_byte == profile.peak_flops / profile.read_bandwidth_bytes_per_s
    assert 0.5 < profile.read_bandwidth_bytes_per_s / profile.bandwidth_bytes_per_s < 3.0


def test_read_bandwidth_counts_each_byte_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "repeat_timed", lambda where, fn, repeats: [0.5] * repeats)
    assert device.measure_read_bandwidth("cpu", 4_000_000, repeats=2) == [8e6, 8e6]  # 4 MB read in 0.5 s
    assert device.measure_copy_bandwidth("cpu", 4_000_000, repeats=2) == [16e6, 16e6]  # 4 MB read + 4 MB written


def test_a_store_measures_once_then_again_only_when_asked() -> None:
    asked: list[tuple[str, str]] = []

    def measure_now(kind: str, dtype: str, _progress: object) -> DeviceProfile:
        asked.append((kind, dtype))
        return DeviceProfile(f"#{len(asked)}", kind, dtype, 1e12, "measured", 1e11, "measured")

    store = FiguresStore(measure_now)
    first = store.get("cpu", "float32")
    assert store.get("cpu", "float32") is first and store.kept("cpu", "float32").how == "measured"  # reused
    again = store.get("cpu", "float32", fresh=True)
    assert again is not first and store.get("cpu", "float32") is again
    assert store.kept("cpu", "float32").how == "re-measured" and asked == [("cpu", "float32")] * 2
    store.keep(replace(again, name="raised", busy_note="a busy note"), "kept from a run")
    kept = store.kept("cpu", "float32")
    assert kept.profile.name == "raised" and kept.profile.busy_note == "" and kept.how == "kept from a run"
    assert FiguresStore(measure_now).kept("cpu", "float32") is None  # another owner's store starts empty


@pytest.mark.device_figures
def test_bfloat16_runs_get_a_bfloat16_peak() -> None:
    profile = device_profile("cpu", "bfloat16")
    assert profile.dtype == "bfloat16" and profile.peak_flops == max(profile.flops_samples)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_bad_input() -> None:
    with pytest.raises(BadInput, match="no GPU is available"):
        device_profile("cuda", "float32")


@pytest.mark.parametrize(("kind", "dtype"), [("tpu", "float32"), ("cpu", "float64")])
def test_unknown_device_or_dtype_is_bad_input(kind: str, dtype: str) -> None:
    with pytest.raises(BadInput):
        device_profile(kind, dtype)


# --- kept between processes ($EXPLORER_FIGURES_FILE) -----------------------------------------------------------------


def stub_figures(dtype: str, name: str = "stub", flops: float = 1e12) -> DeviceProfile:
    return DeviceProfile(
        name, "cpu", dtype, flops, "measured", 1e11, "measured", flops_samples=(flops, flops / 2), measured_at="then"
    )


class StubMeasure:
    """A store's measurement that records each call (no seconds spent); `under_load` marks the next sets so."""

    def __init__(self) -> None:
        self.taken: list[str] = []
        self.under_load = False

    def __call__(self, kind: str, dtype: str, progress: object = None) -> DeviceProfile:
        self.taken.append(dtype)
        profile = stub_figures(dtype, f"measured #{len(self.taken)}")
        return replace(profile, figures_taken_under_load=True, figures_note="busy") if self.under_load else profile


def test_without_a_figures_file_every_owner_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FIGURES_FILE_ENV, raising=False)
    measure = StubMeasure()
    FiguresStore(measure).get("cpu", "float32")
    FiguresStore(measure).get("cpu", "float32")
    assert measure.taken == ["float32", "float32"]


def test_a_figures_file_is_measured_into_once_then_read_by_a_later_owner_on_the_same_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "kept" / "figures.json"
    monkeypatch.setenv(FIGURES_FILE_ENV, str(path))
    measure = StubMeasure()
    first = FiguresStore(measure).get("cpu", "float32")
    later = FiguresStore(measure)  # another process, as a restarted server
    read = later.get("cpu", "float32")
    assert (
        measure.taken == ["float32"]
        and first.figures_note == ""
        and later.kept("cpu", "float32").how == "read from a file"
    )
    assert replace(read, figures_note="") == first  # the same figures, every sample, read back
    assert read.figures_note.startswith("measured by an earlier process on this machine at then")
    FiguresStore(measure).get("cpu", "bfloat16")  # another dtype is measured, and kept beside the first
    assert measure.taken == ["float32", "bfloat16"] and len(json.loads(path.read_text())) == 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)  # another thread count: not this process's figures
    FiguresStore(measure).get("cpu", "float32")
    assert measure.taken == ["float32", "bfloat16", "float32"]


def test_a_re_measure_measures_and_replaces_the_kept_figures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(FIGURES_FILE_ENV, str(tmp_path / "figures.json"))
    measure = StubMeasure()
    measure.under_load = True
    busy = FiguresStore(measure).get("cpu", "float32")
    read = FiguresStore(measure).get("cpu", "float32")
    assert read.figures_taken_under_load and read.figures_note.endswith("; busy")  # read back with its judgement
    measure.under_load = False
    store = FiguresStore(measure)
    store.get("cpu", "float32")
    again = store.get("cpu", "float32", fresh=True)  # a user's re-measure, or a run that beat them: never the file
    assert measure.taken == ["float32", "float32"] and again.name == "measured #2" != busy.name
    assert FiguresStore(measure).get("cpu", "float32").name == "measured #2"  # the file now holds the new set


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        json.dumps({"KEY": {"name": "x", "unknown_field": 1}}),
        json.dumps({"KEY": {**asdict(stub_figures("float32")), "peak_flops": -1.0}}),
        json.dumps({"KEY": {**asdict(stub_figures("float32")), "peak_flops": "many"}}),
        json.dumps({"KEY": {**asdict(stub_figures("float32")), "kind": "cuda"}}),
        json.dumps({"KEY": {**asdict(stub_figures("float32")), "dtype": "bfloat16"}}),
        json.dumps({"KEY": {**asdict(stub_figures("float32")), "flops_samples": {"a": 1}, "measured_at": [1]}}),
    ],
    ids=["not-json", "a-list", "a-foreign-field", "negative", "a-string-figure", "a-gpu", "another-dtype", "types"],
)
def test_a_damaged_or_foreign_figures_file_is_ignored_and_the_figures_measured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str
) -> None:
    path = tmp_path / "figures.json"
    path.write_text(content.replace("KEY", entry_key("float32")))
    monkeypatch.setenv(FIGURES_FILE_ENV, str(path))
    measure = StubMeasure()
    assert FiguresStore(measure).get("cpu", "float32").name == "measured #1" and measure.taken == ["float32"]
    assert read_cpu_figures("float32") is not None  # and the measured set replaced what was there


def test_only_a_cpus_figures_are_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(FIGURES_FILE_ENV, str(tmp_path / "figures.json"))
    write_cpu_figures(replace(stub_figures("float32"), kind="cuda"))
    assert not (tmp_path / "figures.json").exists()
