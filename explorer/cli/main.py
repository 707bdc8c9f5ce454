"""`python -m explorer <command>`: the parser, the dispatch to one module per command, and one-line errors."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from explorer.cli.common import OneLineParser, quiet_libraries
from explorer.core.errors import ExplorerError, one_line, out_of_memory_as_run_failed
from explorer.models.model_config import check_model_config

# Each command lives in its own module, whose `register(commands)` adds its parser and sets `func` (and optionally
# `precheck`, run before torch is imported, and `loads_models=False` for a command that never imports torch). Only the
# command being run is imported: the others are listed for --help by these lines alone.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("explorer.cli.run", "run one instrumented request and print its passes"),
    "profile": ("explorer.cli.profile", "replay one pass of a run under torch.profiler: its time grouped by what ran"),
    "bench": ("explorer.cli.bench", "the instrumented loop against HF generate(), A/B in one process"),
    "nocache": (
        "explorer.cli.nocache",
        "the cached loop against a naive loop that re-runs the whole sequence each step",
    ),
    "batch": ("explorer.cli.batch", "decode B requests together: step time, tokens/s and ITL against batch size"),
    "schedule": ("explorer.cli.schedule", "serve a workload with continuous batching and print every engine step"),
    "remote": ("explorer.cli.remote", "TTFT, ITL and goodput of an OpenAI-compatible streaming server"),
    "soak": ("explorer.cli.soak", "RSS over many in-process runs"),
    "doctor": ("explorer.cli.doctor", "check this machine end to end: versions, devices, figures, a 16-token run"),
    "whatif": ("explorer.cli.whatif", "what-if roofline of a model on a GPU: floors, ceilings, batch and memory"),
    "gpucheck": ("explorer.cli.gpucheck", "the GPU suite, doctor and bench on CUDA, into one markdown report"),
    "owner": ("explorer.cli.owner", "the device owner: runs the model for the app's web tier, over HTTP"),
}

DESCRIPTION = f"""Measure the prefill and decode passes of a real LLM, from the command line.

python -m explorer {{{"|".join(COMMANDS)}}} [options]
Each command's options and their defaults: python -m explorer COMMAND --help"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command is listed; only `command`'s module is imported, to add its options."""
    parser = OneLineParser(prog="explorer", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for name, (module, summary) in COMMANDS.items():
        if name == command:
            importlib.import_module(module).register(commands)
        else:
            commands.add_parser(name, help=summary)
    return parser


def dispatch(args: argparse.Namespace) -> None:
    """Refuse what can be refused before torch loads, then run the command."""
    if getattr(args, "loads_models", True) and isinstance(getattr(args, "model", None), str):
        check_model_config(args.model)  # a local config.json transformers cannot build: one line, before torch
    if getattr(args, "precheck", None):
        args.precheck(args)
    if getattr(args, "loads_models", True):  # a client of a remote server never imports torch
        quiet_libraries()
    with out_of_memory_as_run_failed(f"running `explorer {args.command}`"):  # one line, errors.OOM_ADVICE
        args.func(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # no command: what there is to run, as a usage error
        print(build_parser().format_help(), end="", file=sys.stderr)
        return 2
    try:
        args = build_parser(argv[0]).parse_args(argv)
        args.argv = list(argv)  # the command as typed: a recording says how it was made
        dispatch(args)
    except ExplorerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("EXPLORER_DEBUG"):  # a developer wants the traceback
            raise
        print(f"error: unexpected failure: {one_line(exc)} (set EXPLORER_DEBUG=1 for details)", file=sys.stderr)
        return 1
    return 0
