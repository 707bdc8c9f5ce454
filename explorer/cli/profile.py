"""`python -m explorer profile`: run a request, replay one pass under the profiler, print where its time went."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from explorer.cli.common import add_command, add_json_arg, add_model_args, check_output_paths, load, write_json
from explorer.core.errors import BadInput

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


def precheck_profile(args: argparse.Namespace) -> None:
    """What can be refused before torch is even imported: the pass, the prompt, the output folder."""
    check_pass_reachable(args.pass_index, new_tokens_for(args))
    if not args.prompt or not args.prompt.strip():
        raise BadInput("The prompt is empty: type some text to run.")
    check_output_paths(args.json)


def check_pass_reachable(pass_index: int, max_new_tokens: int) -> None:
    """Before the model loads: a run of N new tokens has passes 0..N-1."""
    if pass_index < 0:
        raise BadInput(f"--pass must be 0 (the prefill) or a decode pass 1, 2, …, not {pass_index}.")
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
    from explorer.core.engine import Request, validate
    from explorer.core.measure import measure
    from explorer.core.profiler import profile_pass

    request = Request(
        prompt=args.prompt, max_new_tokens=new_tokens_for(args), use_chat_template=not args.no_chat_template
    )
    validate(request)
    lm = load(args)
    trace = measure(lm, request)  # the request as `run` runs it: checked, warmed up, with honest device figures
    profile = profile_pass(lm, trace, args.pass_index)
    print(format_profile(profile))
    write_json(args.json, profile.to_json())
