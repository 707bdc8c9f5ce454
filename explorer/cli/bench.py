"""`python -m explorer bench`: the instrumented loop against HF generate(), eager and static, in one process, and its
printed table."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from explorer.checks.bench_config import BenchConfig
from explorer.cli.common import (
    StderrProgress,
    add_command,
    add_decode_path_arg,
    add_json_arg,
    add_model_args,
    check_output_paths,
    load,
    write_json,
)
from explorer.core.paths import context_without_loading
from explorer.core.report import format_device

if TYPE_CHECKING:  # the benchmark imports torch: only once its settings have been checked
    from explorer.checks.bench import BenchResult


def register(commands: argparse._SubParsersAction) -> None:
    defaults = BenchConfig()
    bench = add_command(commands, "bench", "the instrumented loop against HF generate(), A/B in one process")
    add_model_args(bench)
    bench.add_argument(
        "--prompt-tokens", type=int, default=defaults.prompt_tokens, help="length of the fixed prompt, in tokens"
    )
    bench.add_argument(
        "--new-tokens", type=int, default=defaults.new_tokens, help="tokens each side makes (end-of-text ignored)"
    )
    bench.add_argument(
        "--repeats", type=int, default=defaults.repeats, help="A/B rounds, the order alternating each round"
    )
    add_decode_path_arg(bench)
    add_json_arg(bench, "every repeat's timings and the summary")
    bench.set_defaults(func=cmd_bench, precheck=precheck)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        decode_path=args.decode_path,
    )


def precheck(args: argparse.Namespace) -> None:
    """Before torch is imported: the benchmark's numbers (against the model's context from its config.json) and
    the output path; run_bench checks the same config again against the loaded model."""
    config_from_args(args).validate(context_without_loading(args.model))
    check_output_paths(args.json)


def cmd_bench(args: argparse.Namespace) -> None:
    from explorer.checks.bench import run_bench

    result = run_bench(load(args), config_from_args(args), on_progress=StderrProgress())
    print(format_bench(result))
    write_json(args.json, result.to_json())


def format_bench(result: BenchResult) -> str:
    s = result.summary()
    m, d, c = result.model, result.device, result.config
    static = "compiled by transformers (CUDA graphs)" if result.hf_static_compiled else "not compiled off CUDA"
    return "\n".join(
        [
            f"bench   {m.display_name}, {m.dtype} on {d.name} ({d.kind}); prompt {c.prompt_tokens} tokens, "
            f"{c.new_tokens} new tokens, {c.repeats} repeats, order rotating, one process",
            format_device(d),
            f"HF static = generate(cache_implementation='static'), {static}; explorer on its {result.decode_path} "
            "decode path",
            "                  HF eager  HF static   explorer  expl./HF  expl./static  roofline limit  measured/limit "
            "(expl.)",
            f"prefill (median) {s['hf_prefill_s'] * 1e3:8.2f} ms {s['hf_static_prefill_s'] * 1e3:7.2f} ms "
            f"{s['explorer_prefill_s'] * 1e3:7.2f} ms {s['prefill_ratio_explorer_over_hf']:8.3f}x "
            f"{s['explorer_prefill_s'] / s['hf_static_prefill_s']:11.3f}x {s['prefill_limit_s'] * 1e3:12.2f} ms "
            f"{s['explorer_prefill_s'] / s['prefill_limit_s']:10.1f}x   (flops / peak)",
            f"ITL (median)     {s['hf_itl_s'] * 1e3:8.2f} ms {s['hf_static_itl_s'] * 1e3:7.2f} ms "
            f"{s['explorer_itl_s'] * 1e3:7.2f} ms {s['itl_ratio_explorer_over_hf']:8.3f}x "
            f"{s['itl_ratio_explorer_over_hf_static']:11.3f}x {s['decode_limit_s'] * 1e3:12.2f} ms "
            f"{s['explorer_itl_s'] / s['decode_limit_s']:10.1f}x   (weight bytes / read bandwidth)",
            f"same greedy tokens on every side: {'yes' if s['same_tokens'] else 'NO'}",
        ]
    )
