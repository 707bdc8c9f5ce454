"""`python -m explorer profile`: run a request, replay one pass under the profiler, print where its time went."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from explorer.cli.common import add_command, add_json_arg, add_model_args, check_output_paths, load, write_json
from explorer.core.errors import BadInput
from explorer.core.limits import number_text
from explorer.core.paths import context_without_loading
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, Request, check_fits_context, validate

if TYPE_CHECKING:  # registering the command must stay cheap: every `python -m explorer ...` builds the parser
    from explorer.core.profiler import PassProfile

TOP_OPS_SHOWN = 3


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `profile` subcommand (listed in `explorer.cli.main.COMMANDS`)."""
    summary = "replay one pass of a run under torch.profiler: its time grouped by what ran"
    parser = add_command(commands, "profile", summary)
    add_model_args(parser)
    parser.add_argument("--prompt", required=True, help="the request whose pass is replayed")
    parser.add_argument("--pass", dest="pass_index", type=int, default=1, help="0 = prefill, 1.. = decode")
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="tokens the run makes (default: just enough to reach --pass)"
    )
    parser.add_argument("--no-chat-template", action="store_true", help="tokenize the raw prompt")
    add_json_arg(parser, "the profile (every op, grouped)")
    parser.set_defaults(func=cmd_profile, precheck=precheck_profile)


def new_tokens_for(args: argparse.Namespace) -> int:
    """Just enough new tokens to reach `--pass` unless `--max-new-tokens` says otherwise."""
    return max(1, args.pass_index + 1) if args.max_new_tokens is None else args.max_new_tokens


def request_from_args(args: argparse.Namespace) -> Request:
    """The request exactly as `cmd_profile` runs it."""
    return Request(
        prompt=args.prompt,
        max_new_tokens=new_tokens_for(args),
        use_chat_template=not args.no_chat_template,
        decode_path="eager",  # the profiler replays the eager path (`explorer.core.profiler`)
    )


def precheck_profile(args: argparse.Namespace) -> None:
    """What can be refused before torch is even imported: the pass, the request (the pages' own check), the model's
    context from its config.json, the output folder."""
    check_pass_reachable(args.pass_index, new_tokens_for(args))
    validate(request_from_args(args))
    check_fits_context(new_tokens_for(args), context_without_loading(args.model))
    check_output_paths(args.json)


def check_pass_reachable(pass_index: int, max_new_tokens: int) -> None:
    """Before the model loads: a run of N new tokens has passes 0..N-1."""
    if not 0 <= pass_index < MAX_NEW_TOKENS_LIMIT:  # a run makes at most MAX_NEW_TOKENS_LIMIT tokens, one per pass
        raise BadInput(
            f"--pass must be 0 (the prefill) or a decode pass 1, 2, … up to {MAX_NEW_TOKENS_LIMIT - 1}, not "
            f"{number_text(pass_index)}."
        )
    if pass_index >= max_new_tokens:
        raise BadInput(
            f"--pass {pass_index} needs at least {pass_index + 1} new tokens (pass 0 is the prefill): raise "
            f"--max-new-tokens or pick a lower pass."
        )


def format_profile(profile: PassProfile) -> str:
    wall_s = profile.wall_s_profiled
    samples = ", ".join(f"{t * 1e3:.2f}" for t in profile.wall_s_unprofiled_samples)
    cost = (
        f"profiling added {profile.profiler_cost_s * 1e3:.2f} ms ({profile.profiler_cost_s / wall_s:.0%} of the "
        "profiled wall): its event recording and our region markers"
        if profile.profiler_cost_s >= 0
        else "the profiled pass ran faster than the median without the profiler: the machine's load changed between "
        "them, so read every time here as one noisy sample"
    )
    tokens = f"{profile.tokens_in} token{'s' if profile.tokens_in != 1 else ''}"
    lines = [
        f"pass {profile.pass_index} ({profile.phase}: {tokens} in, {profile.cache_len_before} cached before) on "
        f"{profile.device_kind}; measured: {profile.time_kind} per op, grouped by the module it ran in",
        f"{'group':<40} {'ms':>9} {'% wall':>7}  top ops (ms x calls)",
    ]
    for group in profile.groups:
        top = ", ".join(f"{op.name} {op.self_s * 1e3:.2f} x{op.count}" for op in group.ops[:TOP_OPS_SHOWN])
        lines.append(f"{group.name:<40} {group.self_s * 1e3:>9.2f} {group.self_s / wall_s:>7.1%}  {top}")
    lines += [
        f"{profile.remainder_name:<40} {profile.remainder_s * 1e3:>9.2f} {profile.remainder_s / wall_s:>7.1%}  "
        "(profiled wall - every op's self time)",
        f"{'total':<40} {profile.parts_total_s * 1e3:>9.2f} {profile.parts_total_s / wall_s:>7.1%}",
        "",
        f"profiled wall {profile.wall_s_profiled * 1e3:.2f} ms; same pass timed without the profiler "
        f"{profile.wall_s_unprofiled * 1e3:.2f} ms (median of {samples}; the pass in the run: "
        f"{profile.wall_s_run * 1e3:.2f} ms)",
        cost,
    ]
    return "\n".join(lines)


def cmd_profile(args: argparse.Namespace) -> None:
    from explorer.core.measure import measure
    from explorer.core.profiler import profile_pass

    lm = load(args)
    trace = measure(lm, request_from_args(args))  # as `run` runs it: checked, warmed up, honest device figures
    profile = profile_pass(lm, trace, args.pass_index)
    print(format_profile(profile))
    write_json(args.json, profile.to_json())
