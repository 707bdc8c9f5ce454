"""`python -m explorer whatif`: the what-if roofline of a model on a GPU, from its config.json and the cited spec
tables: floors, ceilings, batch and memory, and with `--explain` every formula with its numbers. No weights, no torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.cli.common import check_output_paths
from explorer.cli.whatif_split import add_split_arguments, emit, precheck_split, run_split
from explorer.core.errors import BadInput

if TYPE_CHECKING:
    from explorer.scale.whatif import WhatIf

HELP = "what-if roofline of a model on a GPU: floors, ceilings, batch and memory"


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `whatif` subcommand."""
    from explorer.scale.config import DEFAULT_MODEL, shipped
    from explorer.scale.params import DTYPE_BYTES, STORAGE_BITS

    parser = commands.add_parser("whatif", help=HELP, description=HELP)
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"a shipped config ({', '.join(shipped())}; 'embedded' is smollm2-135m), a folder holding a config.json, "
        f"or a hub id (needs network); default {DEFAULT_MODEL}",
    )
    parser.add_argument("--gpu", default="H100 SXM", help="a row of the spec table, e.g. 'H100 SXM', 'A100 80GB SXM'")
    parser.add_argument("--gpus", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    parser.add_argument("--dtype", default="bfloat16", help=f"{' | '.join(DTYPE_BYTES)} (default bfloat16)")
    parser.add_argument(
        "--weights-dtype",
        default=None,
        help=f"how the weights are stored: {' | '.join(STORAGE_BITS)} (default: --dtype); compute stays in --dtype",
    )
    parser.add_argument(
        "--kv-dtype", default=None, help=f"how the KV cache is stored: {' | '.join(STORAGE_BITS)} (default: --dtype)"
    )
    parser.add_argument(
        "--experts-dtype",
        default=None,
        help="a mixture of experts: how the experts' weights are stored (default: as the model ships them, e.g. "
        "gpt-oss's mxfp4, else --weights-dtype)",
    )
    parser.add_argument("--batch", type=int, default=1, help="requests decoded together (default 1)")
    parser.add_argument("--context", type=int, default=1024, help="tokens each request holds at the decode step")
    parser.add_argument("--prompt-tokens", type=int, default=512, help="one prompt's length, for the prefill floor")
    parser.add_argument("--explain", action="store_true", help="print every formula with its numbers")
    add_split_arguments(parser)
    parser.add_argument("--json", type=Path, default=None, help="write every figure as JSON")
    parser.set_defaults(func=cmd_whatif, precheck=precheck_whatif, loads_models=False)


def precheck_whatif(args: argparse.Namespace) -> None:
    """What needs neither a config nor the network: the GPU, the dtype, the numbers, the output folder."""
    from explorer.scale.params import bytes_per_element, storage_bits
    from explorer.scale.whatif import find_gpu

    find_gpu(args.gpu)
    bytes_per_element(args.dtype)
    for stored in (args.weights_dtype, args.kv_dtype, args.experts_dtype):
        if stored is not None:
            storage_bits(stored)
    for flag, value in (("--gpus", args.gpus), ("--batch", args.batch), ("--context", args.context)):
        if value < 1:
            raise BadInput(f"{flag} must be at least 1, not {value}.")
    if args.prompt_tokens < 1:
        raise BadInput(f"--prompt-tokens must be at least 1, not {args.prompt_tokens}.")
    check_output_paths(args.json)
    if args.split:
        precheck_split(args)


def cmd_whatif(args: argparse.Namespace) -> None:
    from explorer.scale.config import load_architecture
    from explorer.scale.explain import formula_lines
    from explorer.scale.whatif import Scenario, find_gpu, what_if

    scenario = Scenario(
        arch=load_architecture(args.model),
        gpu=find_gpu(args.gpu),
        dtype=args.dtype,
        gpus=args.gpus,
        batch=args.batch,
        context=args.context,
        prompt_tokens=args.prompt_tokens,
        weights_dtype=args.weights_dtype,
        kv_dtype=args.kv_dtype,
        experts_dtype=args.experts_dtype,
    )
    if args.split:
        run_split(args, scenario)
        return
    result = what_if(scenario)
    emit(args, format_whatif(result), lambda: formula_lines(result), result.to_json)


def _row(name: str, value: str, source: str) -> str:
    return f"{name:<40} {value:<52} {source}"


def format_whatif(result: WhatIf) -> str:
    """One line per figure: its name as in the JSON, its value with units, and whether it is modelled or spec."""
    from explorer.core.units import human_bandwidth, human_flops_per_s, ms

    s, d, p = result.scenario, result.decode, result.prefill
    parts = ", ".join(f"{name} {count:,}" for name, count in result.counts.by_part.items())
    link = s.link
    ridge = f"{result.ridge_batch:,}" if result.ridge_batch is not None else "none (memory-bound at any batch)"
    fit = "" if result.fits else f" (batch {s.batch} does NOT fit)"
    crossover = (
        f"{result.kv_crossover_context:,} (a step's KV traffic reaches its weight read)"
        if result.kv_crossover_context is not None
        else "never (every layer slides: the cache stops growing)"
    )
    lines = [
        f"what-if: {s.arch.display_name} on {s.gpus} x {s.gpu.name}, {s.dtype}, batch {s.batch}, context "
        f"{s.context:,}, prompt {s.prompt_tokens:,} tokens (config: {s.arch.source})",
        _row("figure", "value", "source"),
        _row("params", f"{result.params:,}", published_source(result, result.params, "published_params")),
        _row("  by part", parts, "modelled"),
        *moe_rows(result),
        *storage_rows(result),
        _row("prefill_s_floor", f"{ms(p.floor_s)} ({p.bound}-bound)", "modelled"),
        _row(
            "decode_step_s_floor",
            f"{ms(d.floor_s)} ({d.bound}-bound: weights {ms(d.cost.t_weight_read_s)}, KV {ms(d.cost.t_kv_s)})",
            "modelled",
        ),
        _row(
            "decode_tokens_per_s_ceiling",
            f"{result.decode_tokens_per_s_ceiling:,.1f} in all, {result.decode_tokens_per_s_ceiling_per_stream:,.1f} "
            "per stream",
            "modelled",
        ),
        _row("ridge_batch", ridge, "modelled"),
        _row("max_batch", f"{result.max_batch:,} at context {s.context:,}{fit}", "modelled"),
        _row("kv_crossover_context", crossover, "modelled"),
        _row(
            "GPU (each)",
            f"{human_flops_per_s(s.peak_flops)} {s.dtype}, {human_bandwidth(s.gpu.bandwidth_bytes_per_s)}, "
            f"{s.gpu.memory_text}",
            f"spec: {s.gpu.source}",
        ),
    ]
    if link is not None:
        lines.append(
            _row(
                f"tensor parallel ({s.gpus} GPUs)",
                f"{result.shard.weight_bytes:,} weight bytes per GPU; all-reduces {ms(d.t_link_s)} per step",
                f"modelled; {link.name} {human_bandwidth(link.bytes_per_s)} both ways: spec, {link.source}",
            )
        )
    return "\n".join(lines)


def published_source(result: WhatIf, exact: int, field: str) -> str:
    """The source column of a count: exact from config.json, and beside it the publisher's figure and how it was cut."""
    row = result.published
    note = row.note(exact, getattr(row, field)) if row else ""
    return "modelled (exact, config.json)" + (f"; {note}" if note else "")


def moe_rows(result: WhatIf) -> list[str]:
    """A mixture of experts' rows: what one token uses, and what a step at this batch is expected to read."""
    experts = result.experts_dict()
    if experts is None:
        return []
    return [
        _row(
            "active_params",
            f"{result.active_params:,} per token",
            "modelled (exact, config.json)" + (f"; {note}" if (note := result.published_active_note()) else ""),
        ),
        _row(
            "  experts",
            f"{experts['experts_per_token']} of {experts['n_experts']} per token in {experts['moe_layers']} layers; "
            f"{experts['expected_experts_read_per_layer']:.1f} per layer read at batch {result.scenario.batch}",
            "modelled; routing ASSUMED uniform",
        ),
    ]


def storage_rows(result: WhatIf) -> list[str]:
    """The weights' and the KV cache's bytes, each in the type it is stored in."""
    from explorer.core.units import human_bytes

    s = result.scenario
    windows = (
        f"; {s.arch.sliding_layers} of {s.arch.layers} layers keep only their window" if s.arch.sliding_layers else ""
    )
    return [
        _row(
            "weight_bytes",
            f"{result.weight_bytes:,} ({human_bytes(result.weight_bytes)}, stored as {s.weights_storage}"
            + (f", the experts as {s.experts_storage})" if s.arch.is_moe else ")"),
            "modelled",
        ),
        _row(
            "kv_bytes_per_token",
            f"{result.kv_bytes_per_token:,} at context {s.context:,} (stored as {s.kv_storage})",
            "modelled" + windows,
        ),
    ]
