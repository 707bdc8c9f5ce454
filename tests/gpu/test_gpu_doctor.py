"""The doctor on a GPU: torch and NVML see the device, every CUDA device is measured in each dtype it runs, the
16-token run matches generate(), and CUDA events agree with the host clock."""

from __future__ import annotations

import pytest
import torch

from explorer.checks.doctor import RUN_CHECKS, DoctorReport, run_doctor
from explorer.core.loaded_model import LoadedModel
from tests.gpu import requires_cuda

pytestmark = requires_cuda


@pytest.fixture(scope="module")
def report(cuda_lm: LoadedModel) -> DoctorReport:
    return run_doctor(lambda: cuda_lm)


def test_every_check_passes_on_the_gpu(report: DoctorReport) -> None:
    failed = [f"{c.name}: {c.line}" for c in report.checks if c.status == "FAIL"]
    assert report.ok, failed
    checks = {c.name: c for c in report.checks}
    assert checks["cuda"].status == "PASS"
    assert checks["nvml"].status == "PASS", f"NVML unusable on a GPU box: {checks['nvml'].line}"
    assert report.run_device is not None and report.run_device.startswith("cuda")
    assert all(checks[name].status == "PASS" for name in RUN_CHECKS)  # the clocks check is no longer skipped
    for index in range(torch.cuda.device_count()):
        for dtype in ("float32", "float16") + (("bfloat16",) if torch.cuda.is_bf16_supported() else ()):
            assert checks[f"cuda:{index} {dtype} matmul"].status == "PASS"
        assert checks[f"cuda:{index} spec"].status in ("PASS", "SKIP")  # SKIP: a GPU the table does not know
        assert checks[f"cuda:{index} copy bandwidth"].status == checks[f"cuda:{index} read bandwidth"].status == "PASS"


def test_the_events_agree_with_the_host_clock_within_ten_percent(report: DoctorReport) -> None:
    clocks = next(c for c in report.checks if c.name == "CUDA events = host clock")
    assert clocks.unit == "fraction" and 0 <= clocks.figure <= 0.10, clocks.line  # type: ignore[operator]


def test_the_gpu_figures_have_their_sources_and_a_read_stream(report: DoctorReport) -> None:
    gpu = report.devices[1]  # the CPU comes first
    assert gpu.device == "cuda:0" and gpu.profiles
    for profile in gpu.profiles:
        assert profile.kind == "cuda"
        assert profile.read_bandwidth_bytes_per_s is not None and profile.read_bandwidth_samples
        if profile.datasheet_bandwidth_bytes_per_s:  # a streaming kernel reaches a fair share of the bus
            assert 0.3 < profile.measured_read_bandwidth_bytes_per_s / profile.datasheet_bandwidth_bytes_per_s <= 1.1
        assert profile.peak_flops_source == "measured"  # the roofline divides by what the device measured
        if gpu.spec_row is not None and profile.dtype != "float32":
            assert profile.datasheet_flops  # tensor-core rows exist for every GPU in the table, kept beside
