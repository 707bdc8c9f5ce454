"""`python -m explorer batch`: decode B requests together for each batch size, and the printed table."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from explorer.cli.common import (
    add_command,
    add_json_arg,
    add_model_args,
    check_output_paths,
    run_lab_command,
)
from explorer.core.figure_trust import caveat
from explorer.core.paths import context_without_loading
from explorer.core.units import human_bytes
from explorer.labs.batch_settings import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_BUDGET_S,
    MAX_BATCH,
    BatchConfig,
    check_settings,
    parse_batch_sizes,
)

if TYPE_CHECKING:  # the lab imports torch: only once its settings have been checked
    from explorer.labs.batch import BatchResult


def register(commands: argparse._SubParsersAction) -> None:
    defaults = BatchConfig()
    summary = "decode B requests together: step time, tokens/s and ITL against batch size"
    parser = add_command(commands, "batch", summary)
    add_model_args(parser)
    parser.add_argument(
        "--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)), help=f"comma-separated, each 1 to {MAX_BATCH}"
    )
    parser.add_argument(
        "--prompt-tokens", type=int, default=defaults.prompt_tokens, help="tokens in every prompt (one length)"
    )
    parser.add_argument(
        "--new-tokens", type=int, default=defaults.new_tokens, help="tokens each request makes (end-of-text ignored)"
    )
    parser.add_argument("--repeat-one-prompt", action="store_true", help="one prompt repeated, not different ones")
    parser.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, help="refuse a sweep modelled to take longer"
    )
    add_json_arg(parser, "the settings, every batch's steps and the solo check")
    parser.set_defaults(func=cmd_batch, precheck=precheck)


def config_from_args(args: argparse.Namespace) -> BatchConfig:
    return BatchConfig(
        batch_sizes=parse_batch_sizes(args.batch_sizes),
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        distinct_prompts=not args.repeat_one_prompt,
        budget_s=args.budget_s,
    )


def precheck(args: argparse.Namespace) -> None:
    """Before torch is imported: the sweep's numbers, against the model's context from its config.json (the lab
    checks the same config again, with the loaded model's context, its KV cap and its time estimate)."""
    check_settings(config_from_args(args), context_without_loading(args.model))
    check_output_paths(args.json)


def cmd_batch(args: argparse.Namespace) -> None:
    from explorer.labs.batch import run_batch_sweep

    run_lab_command(
        args, lambda lm, device, progress: run_batch_sweep(lm, device, config_from_args(args), progress), format_batch
    )


def format_batch(result: BatchResult) -> str:
    lines = [
        f"prompts of {result.config.prompt_tokens} tokens ({'different' if result.config.distinct_prompts else 'one'}"
        f" prompt{'s' if result.config.distinct_prompts else ' repeated'}), {result.config.new_tokens} new tokens",
        "batch  prefill_ms  step_ms(median)  ITL_p50_ms  tok/s(decode)  KV_cache     modelled step: weights / KV / "
        "compute (ms), bound",
    ]
    for run in result.runs:
        s, c = run.summary(), run.median_step_cost
        lines.append(
            f"{run.batch_size:>5} {run.prefill_s * 1e3:>11.1f} {run.median_step_s * 1e3:>16.2f} "
            f"{s['itl_p50_s'] * 1e3:>11.2f} {run.tokens_per_s:>14.1f}  {human_bytes(run.kv_cache_bytes):>10}   "
            f"{c.t_weight_read_s * 1e3:.2f} / {c.t_kv_s * 1e3:.2f} / {c.t_compute_s * 1e3:.2f}, {c.bound}"
        )
    first, last = result.runs[0], result.runs[-1]
    lines += [
        f"measured: batch {last.batch_size} gives {last.tokens_per_s / first.tokens_per_s:.1f}x the tokens/s of "
        f"batch {first.batch_size} at {last.median_step_s / first.median_step_s:.1f}x the step time",
        f"modelled: decode becomes compute-bound here at batch {result.ridge_batch} (ridge "
        f"{result.device.ridge_point_flops_per_byte:.1f} FLOP/B, {result.device.dtype}){caveat(result.device)}"
        if result.ridge_batch
        else f"modelled: decode stays memory-bound up to batch {MAX_BATCH} here{caveat(result.device)}",
        "every request's tokens equal its solo tokens: " + ("yes" if result.every_request_matches_solo else "NO"),
    ]
    lines += [f"  {note}" for run in result.runs for note in run.mismatch_notes]
    return "\n".join(lines)
