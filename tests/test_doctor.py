"""`explorer doctor`: every check passes here (or is skipped as GPU-only), the JSON lists each check with its figure,
a broken check makes the command exit 1 naming it; each verdict's rule checked on hand-made figures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from explorer.checks import doctor, machine
from explorer.checks.doctor import RUN_CHECKS, DoctorReport, run_doctor
from explorer.checks.machine import (
    DeviceFigures,
    Environment,
    NvmlStatus,
    RunFloor,
    bandwidth_checks,
    cuda_check,
    matmul_check,
    nvml_check,
    nvml_status,
    spec_check,
    versions_check,
)
from explorer.cli import doctor as doctor_cli
from explorer.cli import main as cli
from explorer.core import device as device_module
from explorer.core.engine import Request, check_request, generate
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import kv_cache_bytes
from explorer.core.trace import DeviceProfile, Trace

GPU_ONLY = {"cuda", "nvml", "CUDA events = host clock"}  # what a machine without a GPU skips


@pytest.fixture(scope="module")
def doctor_run(real_lm: LoadedModel) -> tuple[DoctorReport, Trace]:
    """The whole doctor, once for the module on the session's model, and the run its run checks judged (a test judges
    it again with a broken formula, rather than running the doctor a second time)."""
    traces: list[Trace] = []
    measured = doctor.measure
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(doctor, "measure", lambda *args, **kwargs: traces.append(measured(*args, **kwargs)) or traces[-1])
        report = run_doctor(lambda: real_lm)
    return report, traces[-1]


@pytest.fixture(scope="module")
def report(doctor_run: tuple[DoctorReport, Trace]) -> DoctorReport:
    return doctor_run[0]


def test_every_check_passes_here_or_is_a_gpu_check_skipped(report: DoctorReport) -> None:
    assert report.ok and report.failed == ()
    statuses = {c.name: c.status for c in report.checks}
    assert set(statuses.values()) <= {"PASS", "SKIP"}
    if not torch.cuda.is_available():
        assert {name for name, status in statuses.items() if status == "SKIP"} == GPU_ONLY
        assert "not applicable on a CPU" in next(c.line for c in report.checks if c.name == RUN_CHECKS[3])
    names = list(statuses)
    assert names[:3] == ["versions", "cuda", "nvml"] and "model loads" in names and set(RUN_CHECKS) <= set(names)
    assert machine.dtypes_for("cpu") == ("float32", "bfloat16")  # float16 is measured on CUDA only
    for dtype in ("float32", "bfloat16"):  # the CPU's FLOP/s per dtype it runs, then its two bandwidths
        assert f"cpu {dtype} matmul" in names
    assert {"cpu copy bandwidth", "cpu read bandwidth"} <= set(names)


def test_the_run_checks_carry_their_figures(report: DoctorReport, real_lm: LoadedModel) -> None:
    checks = {c.name: c for c in report.checks}
    tokens = checks["tokens = generate()"]
    assert len(tokens.figure) == doctor.DOCTOR_TOKENS and "equal" in tokens.line  # type: ignore[arg-type]
    kv = checks["KV bytes = formula"]
    positions = int(kv.line.split(" x ")[4].split()[0])  # "... x 64 x 40 positions x 4 B"
    assert kv.figure == kv_cache_bytes(real_lm.info, positions) == 46_080 * positions and kv.unit == "B"
    assert "2 x 30 layers x 3 KV heads x 64" in kv.line
    read = checks["cpu read bandwidth"]
    assert (
        read.figure == report.devices[0].profiles[0].measured_read_bandwidth_bytes_per_s and "x the copy" in read.line
    )


def test_the_cli_exits_0_and_writes_every_check_with_its_figure(
    report: DoctorReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The module's real report (every check run once, on the session's model): this test is about what the command
    # prints, writes and exits with.
    monkeypatch.setattr(doctor, "run_doctor", lambda load, progress: report)
    out = tmp_path / "d.json"
    assert cli.main(["doctor", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["ok"] is True and data["failed"] == []
    assert data["environment"]["packages"]["torch"] == torch.__version__
    assert data["devices"][0]["profiles"][0]["read_bandwidth_bytes_per_s"] > 0
    for check in data["checks"]:
        assert set(check) == {"name", "status", "line", "figure", "unit"} and check["status"] in ("PASS", "SKIP")
        assert f"{check['status']:<4}  {check['name']}" in printed
        assert check["figure"] is not None or check["status"] == "SKIP" or check["name"] == "nvml"
    assert "0 FAIL" in printed and f"wrote {out}" in printed


def test_a_wrong_kv_formula_fails_its_check_and_the_exit_names_it(
    doctor_run: tuple[DoctorReport, Trace],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report, trace = doctor_run
    monkeypatch.setattr(doctor, "kv_cache_bytes", lambda model, cache_len, batch=1: 46_080 * cache_len + 1)
    # The module's real run judged again under the broken formula: the KV check alone changes.
    checks = tuple(doctor.kv_check(trace) if c.name == "KV bytes = formula" else c for c in report.checks)
    monkeypatch.setattr(doctor, "run_doctor", lambda load, progress: replace(report, checks=checks))
    out = tmp_path / "broken.json"
    assert cli.main(["doctor", "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == "error: 1 doctor check failed: KV bytes = formula."
    assert "FAIL  KV bytes = formula" in captured.out and "the formula says" in captured.out
    data = json.loads(out.read_text(encoding="utf-8"))  # written before the exit: the failing figure is kept
    assert data["ok"] is False and data["failed"] == ["KV bytes = formula"]


def test_an_unpinned_torch_that_passes_every_other_check_warns_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    image = env(packages={"torch": "2.11.0+cu130", "transformers": "5.23.0", "streamlit": "1.67.0"})
    checks = (versions_check(image), cuda_check(image), machine.verdict(True, "KV bytes = formula", "equal", 1, "B"))
    warned = DoctorReport(image, (), checks, "cpu", "2026-11-27T08:00:00+00:00")
    assert warned.ok and warned.warned == ("versions",) and warned.failed == ()
    monkeypatch.setattr(doctor, "run_doctor", lambda load, progress: warned)
    out = tmp_path / "d.json"
    assert cli.main(["doctor", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "WARN  versions" in printed and "torch 2.11.0+cu130 (requirements.txt pins 2.13.0)" in printed
    summary = printed.splitlines()[-2]  # the last line says where the JSON went
    assert summary == (
        "3 checks: 1 PASS, 1 WARN, 0 FAIL, 1 SKIP (not applicable here): this machine runs the explorer end to end, "
        "with warnings: versions"
    )
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["ok"] is True and data["warned"] == ["versions"] and data["checks"][0]["status"] == "WARN"


def test_an_unwritable_json_path_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_cli, "cmd_doctor", lambda args: pytest.fail("ran despite a bad --json path"))
    assert cli.main(["doctor", "--json", "/no/such/folder/d.json"]) == BadInput.exit_code


def test_a_model_that_fails_to_load_is_a_failed_check_not_a_crash() -> None:
    def broken() -> LoadedModel:
        raise ImportError("No module named 'gguf'")

    lm, check = doctor.load_check(broken)
    assert lm is None and (check.name, check.status) == ("model loads", "FAIL")
    assert check.line == "ImportError: No module named 'gguf'"


# --- each verdict's rule, on hand-made figures -----------------------------------------------------------------------
def env(**changes: object) -> Environment:
    base = Environment(
        python="3.11.7",
        platform="Linux x86_64 (linux)",
        packages={"torch": "2.13.0+cpu", "transformers": "5.23.0", "streamlit": "1.67.0"},
        pinned={"torch": "2.13.0", "transformers": "5.23.0", "streamlit": "1.67.0"},
        torch_threads=2,
        cuda_build=None,
        cuda_devices=0,
        nvml=NvmlStatus(False, "NVML Shared Library Not Found"),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_versions_warn_off_their_pin_and_fail_when_a_package_the_runs_need_is_missing() -> None:
    assert versions_check(env()).status == "PASS" and "as requirements.txt pins them" in versions_check(env()).line
    assert "threshold:" in versions_check(env()).line
    newer = versions_check(env(packages={"torch": "2.14.0+cu128", "transformers": "5.23.0", "streamlit": "1.67.0"}))
    assert newer.status == "WARN" and "torch 2.14.0+cu128 (requirements.txt pins 2.13.0)" in newer.line
    assert "the checks below say whether this machine runs the explorer" in newer.line
    image = versions_check(env(packages={"torch": "2.11.0+cu130", "transformers": "5.17.0", "streamlit": "1.67.0"}))
    assert image.status == "WARN" and "transformers 5.17.0 (requirements.txt pins 5.23.0)" in image.line
    cuda_build = versions_check(
        env(packages={"torch": "2.13.0+cu128", "transformers": "5.23.0", "streamlit": "1.67.0"})
    )
    assert cuda_build.status == "PASS"  # a build tag is not another version
    missing = versions_check(env(packages={"torch": "2.13.0", "transformers": None, "streamlit": "1.67.0"}))
    assert missing.status == "FAIL" and "transformers not installed" in missing.line
    # A GPU image without streamlit (the H200's): the CLI, bench and the GPU check run there, only the app does not.
    no_app = versions_check(env(packages={"torch": "2.11.0+cu130", "transformers": "5.23.0", "streamlit": None}))
    assert no_app.status == "WARN" and "streamlit not installed: the CLI, bench and the GPU check run" in no_app.line
    assert "torch 2.11.0+cu130 (requirements.txt pins 2.13.0)" in no_app.line


def test_a_gpu_torch_cannot_use_is_a_failure_and_no_gpu_a_skip() -> None:
    assert cuda_check(env()).status == "SKIP"
    stranded = cuda_check(env(nvml=NvmlStatus(True, driver="570.1", cuda_driver="12.8", gpus=1)))
    assert stranded.status == "FAIL" and "install a CUDA build of torch" in stranded.line
    assert cuda_check(env(cuda_build="12.8", cuda_devices=2)).status == "PASS"


class FakeSystemNvml:
    """pynvml's system queries on a driver 570 box with two GPUs."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"570.124.06"  # older bindings return bytes

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.570.124.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return 2


def test_nvml_status_reads_the_driver_and_says_why_when_it_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_module, "pynvml", FakeSystemNvml())
    assert nvml_status() == NvmlStatus(True, "", "570.124.06", "12.570.124.06", "12.8", 2)
    monkeypatch.setattr(device_module, "pynvml", None)
    assert nvml_status() == NvmlStatus(False, "nvidia-ml-py is not installed")


def test_nvml_fails_when_it_misses_a_gpu_or_the_driver_is_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_module, "pynvml", FakeSystemNvml())
    good = env(cuda_build="12.8", cuda_devices=2, nvml=nvml_status())
    assert nvml_check(good).status == "PASS" and "threshold:" in nvml_check(good).line
    fewer = nvml_check(replace(good, cuda_devices=3))
    assert fewer.status == "FAIL" and "NVML sees 2 GPU(s) where torch uses 3" in fewer.line
    old_driver = nvml_check(replace(good, cuda_build="13.0"))
    assert old_driver.status == "FAIL" and "torch was built for 13.0" in old_driver.line
    broken = nvml_check(replace(good, nvml=NvmlStatus(False, "NVML started but a query failed: Unknown Error")))
    assert broken.status == "FAIL"
    assert nvml_check(env()).status == "SKIP"  # no GPU: nothing to read


def hand_profile(**changes: object) -> DeviceProfile:
    base = DeviceProfile(
        "NVIDIA H100 80GB HBM3", "cuda", "bfloat16", 989.4e12, "spec", 3.35e12, "nvml",
        measured_flops=700e12, measured_bandwidth_bytes_per_s=3.0e12, flops_samples=(700e12,),
        bandwidth_samples=(3.0e12,), matmul_n=8192, copy_bytes=1024**3, read_bandwidth_bytes_per_s=3.35e12,
        read_bandwidth_source="nvml", measured_read_bandwidth_bytes_per_s=3.2e12, read_bandwidth_samples=(3.2e12,),
        read_bytes=1024**3, datasheet_flops=989.4e12, datasheet_bandwidth_bytes_per_s=3.35e12,
        datasheet_bandwidth_source="nvml",
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def cpu_profile(**changes: object) -> DeviceProfile:
    """The project's 2-core CPU as its recordings measured it: 176 GFLOP/s float32, 25.8 GB/s copy, 28.1 GB/s read."""
    base = DeviceProfile(
        "AMD EPYC", "cpu", "float32", 176e9, "measured", 25.8e9, "measured", measured_flops=176e9,
        measured_bandwidth_bytes_per_s=25.8e9, flops_samples=(176e9,) * 5, bandwidth_samples=(25.8e9,) * 5,
        matmul_n=2048, copy_bytes=512_000_000, read_bandwidth_bytes_per_s=28.1e9, read_bandwidth_source="measured",
        measured_read_bandwidth_bytes_per_s=28.1e9, read_bandwidth_samples=(28.1e9,) * 5, read_bytes=512_000_000,
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


CPU_RUN = RunFloor("cpu", "float32", flops_per_s=85e9, bytes_per_s=9.3e9)  # short-chat: its prefill and a decode


def test_a_gpu_matmul_outside_the_datasheets_window_fails() -> None:
    assert matmul_check("cuda:0", hand_profile()).status == "PASS"
    over = matmul_check("cuda:0", hand_profile(measured_flops=1200e12))
    assert over.status == "FAIL" and "spec row does not fit" in over.line
    under = matmul_check("cuda:0", hand_profile(measured_flops=200e12))  # 20 % of 989.4 TFLOP/s
    assert under.status == "FAIL" and "under a quarter of the datasheet" in under.line
    assert "threshold: 25 % to 110 % of the datasheet's dense peak" in matmul_check("cuda:0", hand_profile()).line
    assert matmul_check("cuda:0", hand_profile(measured_flops=None)).status == "FAIL"


def test_a_cpu_matmul_a_pass_of_the_run_beat_fails() -> None:
    """29 GFLOP/s where the run's own prefill reached 85: the figure was taken too low (it passed on any figure)."""
    good = matmul_check("cpu", cpu_profile(), CPU_RUN)
    assert good.status == "PASS" and "at least the run's best pass" in good.line and "roofline" in good.line
    low = matmul_check("cpu", cpu_profile(measured_flops=29e9), CPU_RUN)
    assert low.status == "FAIL" and "a pass of the run beat it" in low.line
    bf16 = cpu_profile(dtype="bfloat16", measured_flops=0.29e9)  # a software path: slow, but a real figure
    assert matmul_check("cpu", bf16, None, float32_flops=176e9).status == "PASS"
    broken = matmul_check("cpu", replace(bf16, measured_flops=0.1e9), None, float32_flops=176e9)
    assert broken.status == "FAIL" and "broken" in broken.line


def test_cpu_bandwidths_a_pass_of_the_run_beat_fail() -> None:
    copy, read = bandwidth_checks("cpu", cpu_profile(), CPU_RUN)
    assert (copy.status, read.status) == ("PASS", "PASS") and "threshold:" in copy.line and "threshold:" in read.line
    low_copy, _ = bandwidth_checks("cpu", cpu_profile(measured_bandwidth_bytes_per_s=4e9), CPU_RUN)
    assert low_copy.status == "FAIL" and "a pass of the run moved bytes faster" in low_copy.line
    low_read = cpu_profile(measured_bandwidth_bytes_per_s=6e9, measured_read_bandwidth_bytes_per_s=8e9)
    _, read_fails = bandwidth_checks("cpu", low_read, CPU_RUN)
    assert read_fails.status == "FAIL" and "moved bytes faster" in read_fails.line


def test_a_machine_check_is_judged_against_the_run_it_made() -> None:
    figures = DeviceFigures("cpu", "AMD EPYC", None, None, (cpu_profile(measured_flops=29e9),))
    checks = {c.name: c.status for c in machine.machine_checks(env(), (figures,), (CPU_RUN,))}
    assert checks["cpu float32 matmul"] == "FAIL"
    without_run = {c.name: c.status for c in machine.machine_checks(env(), (figures,))}
    assert without_run["cpu float32 matmul"] == "PASS"  # nothing bounds it then: the line says so


def test_the_run_checks_fail_on_broken_input(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tokens = generate(), TTFT >= prefill and the clocks each see FAIL when their input is broken (the KV formula
    is broken through the CLI above; a model that does not load below). A tiny model's run: the rules, not the model."""
    request = Request(doctor.DOCTOR_PROMPT, max_new_tokens=doctor.DOCTOR_TOKENS, stop_at_eos=False)
    trace = generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)
    assert doctor.tokens_check(tiny_lm, trace).status == "PASS"
    monkeypatch.setattr(doctor, "generate_tokens", lambda lm, ids, n: (*trace.generated_token_ids[:-1], -1))
    wrong = doctor.tokens_check(tiny_lm, trace)
    assert wrong.status == "FAIL" and "differ from generate()" in wrong.line and "all 16 ids" in wrong.line
    first = trace.repeats[0]
    slow_prefill = replace(first[0], wall_s=trace.ttft_s * 2)
    clocks_off = replace(trace, repeats=((slow_prefill, *first[1:]),), shown_repeat=0)
    assert doctor.ttft_check(trace).status == "PASS" and doctor.ttft_check(clocks_off).status == "FAIL"
    assert doctor.clocks_verdict([(0.010, 0.0101), (0.005, 0.00505)]).status == "PASS"
    apart = doctor.clocks_verdict([(0.010, 0.0101), (0.005, 0.008)])
    assert apart.status == "FAIL" and "threshold: within 10%" in apart.line


def test_nvml_and_the_spec_row_must_agree() -> None:
    figures = DeviceFigures("cuda:0", "NVIDIA H100 80GB HBM3", "H100 SXM", 3.35e12, (hand_profile(),))
    assert spec_check(figures).status == "PASS" and "agrees" in spec_check(figures).line
    wrong = replace(figures, profiles=(hand_profile(datasheet_bandwidth_bytes_per_s=2.0e12),))
    assert spec_check(wrong).status == "FAIL"
    unknown = replace(figures, spec_row=None, spec_bandwidth_bytes_per_s=None)
    assert spec_check(unknown).status == "SKIP"


def test_figures_a_pass_beat_are_taken_again_after_the_run_before_one_is_called_wrong(report: DoctorReport) -> None:
    """The first figures taken on a busy machine (a tenth of this machine's FLOP/s), beaten by the run's best pass:
    the doctor takes them again and judges those; figures still beaten then fail, as before; a figure that fails for
    another reason (none measured) is not taken again."""
    real = report.devices
    busy = tuple(
        replace(f, profiles=tuple(replace(p, measured_flops=p.measured_flops / 10) for p in f.profiles)) for f in real
    )
    cpu_float32 = next(p for p in real[0].profiles if p.dtype == "float32")
    floor = RunFloor("cpu", "float32", flops_per_s=cpu_float32.measured_flops / 2, bytes_per_s=1.0)
    env = machine.environment()
    assert any(c.status == "FAIL" for c in machine.machine_checks(env, busy, (floor,)))  # what the first figures gave

    taken: list[int] = []
    devices, checks = doctor.bounded_by_the_run(env, busy, (floor,), lambda: taken.append(1) or real)
    assert taken == [1] and devices == real
    assert all(c.status != "FAIL" for c in checks)
    assert checks[-1].name == "device figures taken again" and "taken again after the run" in checks[-1].line
    assert "cpu float32 matmul" in checks[-1].line  # which figure the pass beat, as first taken
    matmul = next(c for c in checks if c.name == "cpu float32 matmul")
    assert matmul.status == "PASS" and matmul.figure == cpu_float32.measured_flops  # the second figures judged

    devices, checks = doctor.bounded_by_the_run(env, busy, (floor,), lambda: busy)  # still busy: still wrong
    assert next(c for c in checks if c.name == "cpu float32 matmul").status == "FAIL"
    assert checks[-1].status == "FAIL"

    def not_again() -> tuple:
        pytest.fail("taken again")

    assert doctor.bounded_by_the_run(env, real, (floor,), not_again) == (
        real,
        machine.machine_checks(env, real, (floor,)),
    )
    unmeasured = (
        replace(real[0], profiles=(replace(real[0].profiles[0], measured_flops=None), *real[0].profiles[1:])),
    )
    devices, checks = doctor.bounded_by_the_run(env, unmeasured, (floor,), not_again)
    assert next(c for c in checks if c.name == "cpu float32 matmul").status == "FAIL"  # said, not blamed on load
