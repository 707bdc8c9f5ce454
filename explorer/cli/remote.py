"""`python -m explorer remote`: a concurrency sweep against an OpenAI-compatible streaming endpoint, printed as a
table and optionally written as JSON. A sweep that stops early (a level failed entirely, the time limit, Ctrl-C)
still prints and writes the levels that finished, then exits 1 (130 for Ctrl-C) with one line saying why."""

from __future__ import annotations

import argparse
from pathlib import Path

from explorer.cli.common import StderrProgress, add_command, check_output_paths, quiet_libraries
from explorer.core.errors import BadInput, Interrupted, RunFailed
from explorer.core.units import ms_value
from explorer.hosting.settings import api_key_from_env
from explorer.remote import engine
from explorer.remote.endpoint import APIS, make_endpoint
from explorer.remote.records import ITL_RULE, SweepResult
from explorer.remote.sweep import (
    DEFAULT_ITL_SLO_S,
    DEFAULT_LEVELS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_REQUESTS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TTFT_SLO_S,
    SweepConfig,
    default_prompt,
    parse_levels,
    run_sweep,
)
from explorer.remote.tokens import load_chunk_counter


def register(commands: argparse._SubParsersAction) -> None:
    """`python -m explorer remote`: the concurrency sweep against an OpenAI-compatible streaming endpoint."""
    remote = add_command(commands, "remote", "TTFT, ITL and goodput of an OpenAI-compatible streaming server")
    remote.add_argument(
        "--base-url",
        default=None,
        help="the server's OpenAI root, e.g. http://127.0.0.1:8000/v1 (default: the vLLM `./run vllm` started)",
    )
    remote.add_argument(
        "--model",
        default=None,
        help=f"the model name the server serves (default with `./run vllm`: {engine.MODEL_NAME})",
    )
    remote.add_argument("--api", choices=APIS, default="chat", help="chat or completions")
    remote.add_argument("--api-key-env", default=None, help="name of the environment variable holding the API key")
    remote.add_argument("--prompt", default=None, help="the prompt every request sends (default: one each API answers)")
    remote.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="tokens each request may make")
    remote.add_argument(
        "--fixed-length",
        action="store_true",
        help="ask for exactly --max-tokens each (min_tokens and ignore_eos, as benchmark clients send; vLLM and SGLang "
        "take them)",
    )
    remote.add_argument("--concurrency", default=",".join(map(str, DEFAULT_LEVELS)), help="levels, e.g. 1,4")
    remote.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="requests per concurrency level")
    remote.add_argument("--ttft-slo-ms", type=float, default=DEFAULT_TTFT_SLO_S * 1e3, help="TTFT SLO for goodput")
    remote.add_argument("--itl-slo-ms", type=float, default=DEFAULT_ITL_SLO_S * 1e3, help="p99 ITL SLO for goodput")
    remote.add_argument(
        "--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="deadline of each request, from sending to its end"
    )
    remote.add_argument("--time-limit-s", type=float, default=DEFAULT_TIME_LIMIT_S, help="limit for the whole sweep")
    remote.add_argument(
        "--tokenizer", default=None, help="'embedded' or a local folder: count each chunk's tokens locally"
    )
    remote.add_argument("--no-warmup", action="store_true", help="skip the uncounted first request")
    remote.add_argument("--json", type=Path, default=None, help="write levels, percentiles and every request")
    # loads_models=False: cli.main may skip importing transformers
    remote.set_defaults(func=cmd_remote, precheck=precheck_remote, loads_models=False)


def precheck_remote(args: argparse.Namespace) -> None:
    """What can be refused before anything is sent or a tokenizer loads: every number of the sweep (finite, within
    its bounds: the check run_sweep repeats) and the output path (a sweep's minutes are not lost to a typo)."""
    config_from_args(args).validate()
    check_output_paths(args.json)


def endpoint_from_args(args: argparse.Namespace) -> tuple[str, str]:
    """(base URL, model) as given, else the vLLM `./run vllm` started and the name it serves; one line without it."""
    if args.base_url is not None:
        if args.model is None:
            raise BadInput("--model is required with --base-url: the name the server serves (GET <base URL>/models).")
        return args.base_url, args.model
    url = engine.local_engine_url()
    if url is None:
        raise BadInput(f"--base-url not given and {engine.START_HINT}.")
    return url, engine.MODEL_NAME if args.model is None else args.model


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    base_url, model = endpoint_from_args(args)
    return SweepConfig(
        endpoint=make_endpoint(base_url, model, args.api),
        prompt=default_prompt(args.api) if args.prompt is None else args.prompt,
        max_tokens=args.max_tokens,
        concurrency_levels=parse_levels(args.concurrency),
        requests_per_level=args.requests,
        ttft_slo_s=args.ttft_slo_ms / 1e3,
        itl_slo_s=args.itl_slo_ms / 1e3,
        timeout_s=args.timeout_s,
        time_limit_s=args.time_limit_s,
        warmup=not args.no_warmup,
        fixed_length=args.fixed_length,
    )


def cmd_remote(args: argparse.Namespace) -> None:
    config = config_from_args(args)  # checked by precheck_remote, before a tokenizer loads
    api_key = api_key_from_env(args.api_key_env)
    counter = None
    if args.tokenizer:
        quiet_libraries()  # only this option loads transformers in this command
        counter = load_chunk_counter(args.tokenizer)
    result = run_sweep(config, api_key=api_key, counter=counter, on_progress=StderrProgress())
    print(format_sweep(result))
    if args.json:
        try:
            args.json.write_text(result.to_json(), encoding="utf-8")
        except OSError as exc:
            raise RunFailed(
                f"Cannot write {args.json} ({exc.strerror}): the table above is all that was kept."
            ) from exc
        print(f"wrote {args.json}")
    if result.stopped:
        kept = f"kept {len(result.levels)} level{'s' if len(result.levels) != 1 else ''}"
        kept += f" in {args.json}" if args.json else " above"
        raise (Interrupted if result.interrupted else RunFailed)(f"{result.stopped} ({kept})")


def format_sweep(result: SweepResult, ttft_slo_s: float | None = None, itl_slo_s: float | None = None) -> str:
    ttft_slo_s = result.ttft_slo_s if ttft_slo_s is None else ttft_slo_s
    itl_slo_s = result.itl_slo_s if itl_slo_s is None else itl_slo_s
    endpoint = result.endpoint
    lines = [
        f"endpoint {endpoint.base_url} · model {endpoint.model} · {endpoint.api} API · {result.requests_per_level} "
        f"requests per level · up to {result.max_tokens} tokens each (all figures measured)",
    ]
    if result.warmup is not None:
        lines.append(f"warm-up request, not counted: TTFT {ms_value(result.warmup.ttft_s)} ms")
    lines.append(
        f"{'conc':>4} {'ok':>7} {'TTFT p50/p90/p99 ms':>24} {'ITL p50/p90/p99 ms':>22} {'out tok/s':>9} "
        f"{'req/s':>6} {'goodput':>9}"
    )
    for level in result.levels:
        s = level.summary(ttft_slo_s, itl_slo_s)
        ttft = "/".join(ms_value(v) for v in s.ttft_percentiles_s)
        itl = "/".join(ms_value(v) for v in s.itl_percentiles_s)
        rate = "n/a" if s.total_output_tokens_per_s is None else f"{s.total_output_tokens_per_s:.1f}"
        lines.append(
            f"{level.concurrency:>4} {s.succeeded:>3}/{s.requests:<3} {ttft:>24} {itl:>22} {rate:>9} "
            f"{s.requests_per_s or 0:>6.2f} {s.goodput_requests:>4}/{s.requests:<4}"
        )
        lines += [f"     request {r.index} failed: {r.error}" for r in level.records if r.error]
    lines.append(
        f"goodput: requests with TTFT < {ttft_slo_s * 1e3:g} ms and their p99 ITL < {itl_slo_s * 1e3:g} ms; "
        f"tokens counted by {result.token_sources}"
    )
    lines += server_lines(result)
    if result.tokens_note:
        lines.append(f"warning: {result.tokens_note}")
    if result.stopped:
        lines.append(f"partial: the sweep stopped early, the levels above are those that finished. {result.stopped}")
    lines.append(ITL_RULE)
    return "\n".join(lines)


def server_lines(result: SweepResult) -> list[str]:
    """The server's own split per level (reported by its /metrics), or one line saying why there is none."""
    if not any(level.server for level in result.levels):
        return [f"server metrics: none ({result.metrics_note or 'not in this sweep'}); queue/prefill/decode not shown"]
    lines = []
    for level in result.levels:
        if level.server is not None:
            line = level.server.phase_line or "no per-request phase split"
            lines.append(f"{level.concurrency:>4} server (reported): {line}")
    return lines
