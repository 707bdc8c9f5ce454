"""`python -m explorer soak`: RSS over many in-process runs through the app's code path, printed at checkpoints."""

from __future__ import annotations

import argparse

from explorer.checks.soak import (
    DEFAULT_ATTENTION_EVERY,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_RUNS,
    RssSample,
    SoakConfig,
    SoakResult,
    run_soak,
)
from explorer.cli.common import (
    StderrProgress,
    add_command,
    add_json_arg,
    add_model_args,
    check_output_paths,
    write_json,
)
from explorer.core.paths import context_without_loading
from explorer.core.request import check_fits_context
from explorer.core.units import megabytes


def register(commands: argparse._SubParsersAction) -> None:
    soak = add_command(
        commands,
        "soak",
        "RSS over many in-process runs",
        description="Many runs in one process through the app's code path, printing the RSS at runs 10, 50, 100\n"
        "and the last (under 10 runs: run 1 and the last).",
    )
    add_model_args(soak)
    soak.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="requests to run, one after another")
    soak.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help="tokens each request may make")
    soak.add_argument(
        "--attention-every", type=int, default=DEFAULT_ATTENTION_EVERY, help="capture attention every N runs (0: off)"
    )
    soak.add_argument("--prompt", default=None, help="one prompt for every run (default: cycle short prompts)")
    add_json_arg(soak, "every run's RSS")
    soak.set_defaults(func=cmd_soak, precheck=precheck)


def config_from_args(args: argparse.Namespace) -> SoakConfig:
    return SoakConfig(
        runs=args.runs, max_new_tokens=args.max_new_tokens, attention_every=args.attention_every, prompt=args.prompt
    )


def precheck(args: argparse.Namespace) -> None:
    """Before the model loads: the soak's numbers (against the model's context from its config.json), the output
    folder."""
    config = config_from_args(args)
    config.validate()
    check_fits_context(config.max_new_tokens, context_without_loading(args.model))
    check_output_paths(args.json)


def cmd_soak(args: argparse.Namespace) -> None:
    result = run_soak(
        args.model,
        args.device,
        args.dtype,
        config_from_args(args),
        on_checkpoint=lambda sample: print(format_checkpoint(sample), flush=True),
        on_progress=StderrProgress(loading=True),  # run_soak loads the model first, then reports its runs
    )
    print(format_soak(result))
    write_json(args.json, result.to_json())


def format_checkpoint(sample: RssSample) -> str:
    return f"run {sample.run:>5}: RSS {megabytes(sample.rss_bytes):>10} after {sample.elapsed_s:7.1f} s"


def growth_line(result: SoakResult) -> str:
    """Growth needs two checkpoints; a soak of 1 or 10 runs has one, and says so rather than print '+0.0 MB'."""
    checkpoints = result.config.checkpoints
    if len(checkpoints) == 1:
        return (
            f"growth: not measured, run {checkpoints[0]} is the only checkpoint; --runs {result.config.runs + 1} or "
            f"more compares run {checkpoints[0]} with the last"
        )
    return (
        f"growth from run {checkpoints[0]} to run {checkpoints[-1]}: {megabytes(result.growth_bytes, signed=True)} "
        "(measured)"
    )


def format_soak(result: SoakResult) -> str:
    """The summary after the live checkpoint lines: what ran, RSS around the load, and the growth."""
    attention = (
        f"attention captured every {result.config.attention_every} runs"
        if result.config.attention_every
        else "no attention capture"
    )
    return "\n".join(
        [
            f"soak: {result.config.runs} runs of {result.model} ({result.dtype} on {result.device}), up to "
            f"{result.config.max_new_tokens} new tokens each, {attention}; RSS from {result.rss_source}",
            f"RSS before loading {megabytes(result.rss_before_load_bytes)}, after loading "
            f"{megabytes(result.rss_at(0))}",
            growth_line(result),
        ]
    )
