"""`python -m explorer nocache`: the cached loop against a naive loop with no KV cache, and its printed table."""

from __future__ import annotations

import argparse

from explorer.cli.common import (
    add_command,
    add_json_arg,
    add_model_args,
    check_output_paths,
    run_lab_command,
)
from explorer.core.paths import context_without_loading
from explorer.core.request import Request, validate
from explorer.labs.nocache import (
    DEFAULT_BUDGET_S,
    DEFAULT_NEW_TOKENS,
    EDGE_STEPS,
    PROJECTED_TOKENS,
    NoCacheResult,
    check_settings,
    growth_verdict,
    run_nocache,
)


def register(commands: argparse._SubParsersAction) -> None:
    summary = "the cached loop against a naive loop that re-runs the whole sequence each step"
    parser = add_command(commands, "nocache", summary)
    add_model_args(parser)
    parser.add_argument("--prompt", required=True, help="the text both loops continue")
    parser.add_argument(
        "--max-new-tokens", type=int, default=DEFAULT_NEW_TOKENS, help="tokens each loop makes (end-of-text ignored)"
    )
    parser.add_argument("--no-chat-template", action="store_true", help="tokenize the raw prompt")
    parser.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, help="refuse a naive loop modelled to take longer"
    )
    add_json_arg(parser, "both loops' steps, the growth and the projections")
    parser.set_defaults(func=cmd_nocache, precheck=precheck)


def request_from_args(args: argparse.Namespace) -> Request:
    return Request(args.prompt, max_new_tokens=args.max_new_tokens, use_chat_template=not args.no_chat_template)


def precheck(args: argparse.Namespace) -> None:
    """Before the model loads: the request (the pages' own check), the lab's settings against the model's context
    from its config.json, the output path; the lab checks them again with the tokenized prompt."""
    validate(request_from_args(args))
    check_settings(args.max_new_tokens, args.budget_s, context_without_loading(args.model))
    check_output_paths(args.json)


def cmd_nocache(args: argparse.Namespace) -> None:
    run_lab_command(
        args,
        lambda lm, device, progress: run_nocache(
            lm, device, request_from_args(args), budget_s=args.budget_s, progress=progress
        ),
        format_nocache,
    )


def format_nocache(result: NoCacheResult) -> str:
    lines = [
        f"prompt {result.prompt_len} tokens, {len(result.cached)} new tokens each way (greedy, EOS ignored)",
        f"same tokens both ways: {'yes' if result.same_tokens else 'NO'}",
        "step  position  cached_ms  uncached_ms  uncached_tokens",
    ]
    for c, u in zip(result.cached, result.uncached):
        lines.append(
            f"{c.position - result.prompt_len:>4} {c.position:>8} {c.wall_s * 1e3:>10.2f} {u.wall_s * 1e3:>12.2f} "
            f"{u.tokens_processed:>12}"
        )
    if result.compares_edges:
        cached, uncached = result.growth_s(result.cached), result.growth_s(result.uncached)
        lines.append(
            f"measured: mean of the last {EDGE_STEPS} steps minus the first {EDGE_STEPS} decode steps: cached "
            f"{cached * 1e3:+.2f} ms, uncached {uncached * 1e3:+.2f} ms"
        )
    lines += [
        f"measured: {growth_verdict(result)}",
        f"total: cached {sum(s.wall_s for s in result.cached):.2f} s, "
        f"uncached {sum(s.wall_s for s in result.uncached):.2f} s; {result.estimate_note}",
        f"projection: {result.projection_method}",
    ]
    for n in PROJECTED_TOKENS:
        projected = result.projection_s(n)
        lines.append(
            f"modelled: {n} new tokens take ~{projected['cached']:.1f} s cached, ~{projected['uncached']:.1f} s "
            f"uncached ({projected['uncached'] / projected['cached']:.1f}x)"
        )
    return "\n".join(lines)
