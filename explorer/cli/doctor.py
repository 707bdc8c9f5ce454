"""`python -m explorer doctor`: check this machine end to end and print one line per check; the checks themselves
live in `explorer.checks.doctor`. Exit 0 when none fails (any warnings named), 1 naming the failed ones."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.cli.common import StderrProgress, check_output_paths

if TYPE_CHECKING:  # registering the command must stay cheap: every `python -m explorer ...` builds the parser
    from explorer.core.loaded_model import LoadedModel

HELP = "check this machine end to end: versions, devices, figures, a 16-token run"


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `doctor` subcommand."""
    parser = commands.add_parser(
        "doctor",
        help=HELP,
        description="What to run first on a new machine: Python, torch, transformers and streamlit versions, CUDA "
        "and NVML, each device's spec and measured figures, then a 16-token run of the embedded model checked end to "
        "end. Each check prints PASS, WARN (holds with a caveat: torch or transformers off requirements.txt's pins), "
        "FAIL or SKIP (not applicable here) with its figure. Exit 0 when none fails (warnings named), 1 otherwise.",
    )
    parser.add_argument("--json", type=Path, default=None, help="write every check with its figure as JSON")
    parser.set_defaults(func=cmd_doctor, precheck=precheck_doctor)


def precheck_doctor(args: argparse.Namespace) -> None:
    check_output_paths(args.json)


def load_embedded() -> LoadedModel:
    """The embedded model on the best device here (a GPU when torch sees one), in float32."""
    from explorer.core.paths import EMBEDDED
    from explorer.models.loading import load_model

    return load_model(EMBEDDED, "auto", "float32", on_progress=StderrProgress(loading=True))


def cmd_doctor(args: argparse.Namespace) -> None:
    from explorer.checks.doctor import format_report, run_doctor
    from explorer.core.errors import RunFailed

    report = run_doctor(load_embedded, progress=StderrProgress())
    print(format_report(report))
    if args.json:  # written whatever the verdict: a failed check's figure is what a bug report needs
        args.json.write_text(report.to_json(), encoding="utf-8")
        print(f"wrote {args.json}")
    if not report.ok:
        failed = report.failed
        raise RunFailed(f"{len(failed)} doctor check{'s' if len(failed) > 1 else ''} failed: {', '.join(failed)}.")
