"""`python -m explorer schedule`: serve a workload with transformers' continuous batching and print every step.

Prompts: with --prompt (repeatable) each request uses its text as typed. Otherwise request i gets plain English from
a fixed corpus, starting at sentence i, as many words as stay within its --prompt-tokens target (so a prompt may be a
token or two short). --prefix TEXT is written in front of every prompt as "TEXT\\n<prompt>". Each request's prompt
is printed in full and kept in the JSON (requests[i].prompt_text, .prompt_token_ids); to check a request alone run
`python -m explorer run --no-chat-template --max-new-tokens N --prompt "<its prompt_text>"`: the token ids must be
the same (the output says which token differs and why if the engine's float rounding flips a near tie). `run` stops
at an end-of-sequence token and this command does not, unless --stop-at-eos: compare up to `run`'s last token.
"""

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
from explorer.core.errors import BadInput
from explorer.core.lab_progress import LabProgress
from explorer.core.paths import context_without_loading
from explorer.core.request import check_fits_context
from explorer.core.slo import REFERENCE_ITL_SLO_S, REFERENCE_TTFT_SLO_S
from explorer.core.trace import percentile
from explorer.core.units import human_bytes, ms, ms_value
from explorer.labs.schedule.records import ScheduleRun
from explorer.labs.schedule.sharing import explain_sharing
from explorer.labs.schedule.workload import (
    SCHEDULERS,
    EngineSettings,
    Workload,
    parse_float_list,
    parse_int_list,
    validate,
)

if TYPE_CHECKING:  # torch loads only once the input has been checked
    from explorer.core.device_profile import DeviceProfile
    from explorer.core.loaded_model import LoadedModel

MAX_ENTRIES_SHOWN = 8  # requests listed per step row; the rest are summed as "+k more"


def register(commands: argparse._SubParsersAction) -> None:
    defaults, engine = Workload(), EngineSettings()
    summary = "serve a workload with continuous batching and print every engine step"
    p = add_command(commands, "schedule", summary, description=__doc__)
    add_model_args(p)
    requests_help = f"number of requests (default: one per --prompt, else {defaults.requests})"
    p.add_argument("--requests", type=int, default=None, help=requests_help)
    p.add_argument(
        "--prompt-tokens",
        default=",".join(map(str, defaults.prompt_tokens)),
        help="prompt length targets, comma-separated, cycled over the requests",
    )
    p.add_argument("--prompt", action="append", default=None, help="a prompt text; repeat for one per request")
    p.add_argument(
        "--new-tokens",
        default=",".join(map(str, defaults.new_tokens)),
        help="max new tokens, comma-separated, cycled over the requests",
    )
    p.add_argument(
        "--stagger-ms",
        type=float,
        default=defaults.stagger_ms,
        help="request i arrives at i x this many ms (0: all at once)",
    )
    p.add_argument(
        "--arrivals-ms", default=None, help="arrival times in ms, comma-separated, earliest first (default: staggered)"
    )
    p.add_argument("--prefix", default="", help="a shared prefix (system prompt) before every prompt (default: none)")
    p.add_argument(
        "--scheduler", choices=list(SCHEDULERS), default=engine.scheduler, help="fifo: decodes first; or prefill-first"
    )
    p.add_argument(
        "--token-budget",
        type=int,
        default=engine.token_budget,
        help="tokens one step may compute; longer prompts are prefilled in chunks",
    )
    p.add_argument("--block-size", type=int, default=engine.block_size, help="tokens per KV block")
    p.add_argument("--num-blocks", type=int, default=engine.num_blocks, help="KV blocks in the cache")
    p.add_argument("--no-prefix-sharing", action="store_true", help="never reuse a cached prefix's blocks")
    p.add_argument("--stop-at-eos", action="store_true", help="end a request at end-of-sequence (default: never)")
    p.add_argument("--compare", action="store_true", help="also serve it with static batching and one at a time")
    p.add_argument(
        "--ttft-slo-ms", type=float, default=REFERENCE_TTFT_SLO_S * 1e3, help="TTFT SLO for the goodput count (ms)"
    )
    p.add_argument(
        "--tpot-slo-ms", type=float, default=REFERENCE_ITL_SLO_S * 1e3, help="TPOT SLO for the goodput count (ms)"
    )
    add_json_arg(p, "the run")
    p.set_defaults(func=cmd_schedule, precheck=precheck)


def precheck(args: argparse.Namespace) -> None:
    """Bad input is refused before torch is even imported."""
    workload = workload_from_args(args)
    validate(workload, settings_from_args(args))
    for flag, value in (("--ttft-slo-ms", args.ttft_slo_ms), ("--tpot-slo-ms", args.tpot_slo_ms)):
        if not value > 0:
            raise BadInput(f"{flag} must be above 0, not {value}.")
    check_fits_config(workload, context_without_loading(args.model))
    check_output_paths(args.json)


def check_fits_config(workload: Workload, max_context: int | None) -> None:
    """Each request at its longest against the model's context from its config.json (None: known once it loads,
    when the lab checks the tokenized prompts): a prompt's target length, or one token for a typed prompt."""
    for i in range(workload.requests):
        prompt_tokens = None if workload.prompts else workload.prompt_tokens_of(i)
        check_fits_context(workload.new_tokens_of(i), max_context, prompt_tokens=prompt_tokens)


def workload_from_args(args: argparse.Namespace) -> Workload:
    prompts = tuple(args.prompt or ())
    requests = args.requests if args.requests is not None else (len(prompts) or Workload().requests)
    return Workload(
        requests=requests,
        prompt_tokens=parse_int_list(args.prompt_tokens, "--prompt-tokens"),
        new_tokens=parse_int_list(args.new_tokens, "--new-tokens"),
        stagger_ms=args.stagger_ms,
        arrivals_ms=parse_float_list(args.arrivals_ms, "--arrivals-ms") if args.arrivals_ms else (),
        prompts=prompts,
        prefix=args.prefix,
        stop_at_eos=args.stop_at_eos,
    )


def settings_from_args(args: argparse.Namespace) -> EngineSettings:
    return EngineSettings(
        scheduler=args.scheduler,
        token_budget=args.token_budget,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        prefix_sharing=not args.no_prefix_sharing,
    )


def cmd_schedule(args: argparse.Namespace) -> None:
    from explorer.labs.schedule.run import run_schedule  # transformers' serving engine: only once input is checked

    def run(lm: LoadedModel, device: DeviceProfile, progress: LabProgress) -> ScheduleRun:
        workload, settings = workload_from_args(args), settings_from_args(args)
        return run_schedule(lm, device, workload, settings, compare=args.compare, progress=progress)

    slos_s = (args.ttft_slo_ms / 1e3, args.tpot_slo_ms / 1e3)
    run_lab_command(args, run, lambda served: format_run(served, slos_s))


# --- plain-text report -----------------------------------------------------------------------------------------------
def step_rows(run: ScheduleRun) -> list[str]:
    rows = [
        "step  start_ms  wall_ms  prefill  decode  blocks  free  kind           requests (p prefill, d decode)",
    ]
    for s in run.steps:
        parts = [
            f"{e.request}:{e.prefill_tokens}p" + (f"#{e.chunk}" if e.chunk > 1 or not e.completes_prefill else "")
            if e.prefill_tokens
            else f"{e.request}:d"
            for e in s.entries
        ]
        if len(parts) > MAX_ENTRIES_SHOWN:
            parts = parts[:MAX_ENTRIES_SHOWN] + [f"+{len(parts) - MAX_ENTRIES_SHOWN} more"]
        notes = [s.kind] + (["chunked"] if s.has_partial_prefill else [])
        parts += [f"(prefix hit: {h.request} reuses {h.tokens} tokens)" for h in s.prefix_hits]
        rows.append(
            f"{s.index:>4} {s.start_s * 1e3:>9.1f} {s.wall_s * 1e3:>8.1f} {s.prefill_tokens:>8} {s.decode_tokens:>7} "
            f"{s.blocks_held:>7} {s.free_blocks:>5}  {'+'.join(notes):<14} {' '.join(parts)}"
        )
    return rows


def request_rows(run: ScheduleRun) -> list[str]:
    checks = {c.request: c for c in run.checks}
    times = ("arrive_ms", "queue_ms", "prefill_ms", "ttft_ms", "itl_p50_ms", "itl_p99_ms", "e2e_ms")
    rows = ["req  prompt  prefix  reused  new " + "".join(f"{t:>11}" for t in times) + "  same as solo"]
    for r in run.requests:
        check = checks.get(r.id)
        same = "n/a" if check is None else ("yes" if check.matches else f"NO (token {check.position})")
        rows.append(
            f"{r.id:<4} {r.prompt_len:>6} {r.prefix_tokens:>7} {r.prefix_tokens_reused:>7} {len(r.token_ids):>4} "
            + "".join(f"{ms_value(t):>11}" for t in (r.arrival_s, r.queue_s, r.prefill_s, r.ttft_s))
            + "".join(f"{ms_value(t):>11}" for t in (r.itl_p50_s, r.itl_p99_s, r.e2e_s))
            + f"  {same}"
        )
    return rows


def format_run(run: ScheduleRun, slos_s: tuple[float, float] = (REFERENCE_TTFT_SLO_S, REFERENCE_ITL_SLO_S)) -> str:
    s, w = run.settings, run.workload
    lines = [
        f"model     {run.model}, {run.dtype}, on {run.device}; transformers {run.transformers_version}",
        f"engine    continuous batching, scheduler {s.scheduler}, token budget {s.token_budget}/step, "
        f"{run.engine_num_blocks} KV blocks x {s.block_size} tokens ({human_bytes(run.block_bytes)} each), "
        f"prefix sharing {'on' if s.prefix_sharing else 'off'}",
        f"workload  {w.requests} requests, arrivals "
        + (", ".join(f"{a:g}" for a in w.arrivals_ms) + " ms" if w.arrivals_ms else f"every {w.stagger_ms:g} ms")
        + (f", shared prefix of {run.requests[0].prefix_tokens} tokens" if w.prefix else ""),
        "",
        "steps (measured: start and wall time of each forward; a step packs every scheduled request into one pass)",
        *step_rows(run),
        "",
        "requests (measured; ttft = queue + prefill, from arrival)",
        *request_rows(run),
        "",
        f"summary   {len(run.steps)} steps, {sum(x.is_mixed for x in run.steps)} mixed prefill+decode, "
        f"{sum(x.has_partial_prefill for x in run.steps)} with a chunked prefill; prefill tokens computed "
        f"{run.prefill_tokens_computed}, reused from the prefix cache {run.prefix_tokens_reused}; "
        f"{run.served.total_tokens} tokens in {run.served.span_s:.2f} s = {run.served.tokens_per_s:.1f} tokens/s",
    ]
    mismatches = [c for c in run.checks if not c.matches]
    if not mismatches:
        lines.append("tokens    every request's tokens equal its solo greedy run (explorer engine, same prompt ids)")
    else:
        lines.append(f"tokens    {len(mismatches)} of {len(run.checks)} requests differ from their solo greedy run:")
        lines += [f"  {c.explanation}" for c in mismatches]
    lines += [f"goodput   {mode.mode}: {mode.goodput(*slos_s).sentence()} (measured)" for mode in run.modes]
    if run.prefix_off is not None:
        lines += ["", *prefix_lines(run)]
    if run.baselines:
        lines += ["", *comparison_lines(run)]
    lines += [
        "",
        "prompts (check one alone: python -m explorer run --no-chat-template --max-new-tokens N --prompt TEXT)",
        *(f"{r.id} ({r.prompt_len} tokens, {r.max_new_tokens} new): {r.prompt_text!r}" for r in run.requests),
    ]
    return "\n".join(lines)


def prefix_lines(run: ScheduleRun) -> list[str]:
    off = run.prefix_off
    assert off is not None
    saved = off.prefill_tokens_computed - run.prefill_tokens_computed
    prefix_len = run.requests[0].prefix_tokens
    same = all(a.token_ids == b.token_ids for a, b in zip(run.requests, off.requests))
    lines = [
        "prefix sharing on vs off (same workload, measured)",
        f"  prefill tokens computed: {run.prefill_tokens_computed} on vs {off.prefill_tokens_computed} off: "
        f"{saved} fewer; (N-1) x prefix = {(len(run.requests) - 1) * prefix_len} (reuse is in whole blocks of "
        f"{run.settings.block_size})",
        "  TTFT on/off: "
        + ", ".join(f"{a.id} {ms(a.ttft_s)}/{ms(b.ttft_s)}" for a, b in zip(run.requests, off.requests)),
        f"  tokens identical with and without sharing: {'yes' if same else 'NO'}",
    ]
    lines.append(f"  {explain_sharing(run).sentence}")  # the cause computed from this run's steps
    return lines


def comparison_lines(run: ScheduleRun) -> list[str]:
    lines = [
        "serving modes compared on the same workload (measured one after another; load_1m: the OS load average as "
        "each finished, other work on this machine)",
        "mode                  tokens  span_s  tokens/s    ttft_p50     itl_p50     itl_p99     e2e_max  load_1m  "
        "same as solo",
    ]
    for mode in run.modes:
        ttft = percentile([r.ttft_s for r in mode.requests], 50)
        gaps = [g for r in mode.requests for g in r.itl_s]
        latencies = (ttft, percentile(gaps, 50), percentile(gaps, 99), max(r.e2e_s for r in mode.requests))
        same = {None: "n/a", True: "yes", False: "NO"}[mode.all_tokens_match]
        load = "n/a" if mode.load_avg_1m is None else f"{mode.load_avg_1m:.1f}"
        lines.append(
            f"{mode.mode:<20} {mode.total_tokens:>7} {mode.span_s:>7.2f} {mode.tokens_per_s:>9.1f} "
            + "".join(f"{ms(t):>12}" for t in latencies)
            + f" {load:>8}  {same}"
        )
        lines.append(
            "  per request ITL p50/p99: "
            + ", ".join(f"{r.id} {ms(r.itl_p50_s)}/{ms(r.itl_p99_s)}" for r in mode.requests)
        )
        lines += [f"  {c.explanation}" for c in mode.checks if not c.matches]
    return lines
