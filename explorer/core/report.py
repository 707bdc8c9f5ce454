"""Plain-text summaries of a Trace for the CLI: the passes, the latency figures with their spread, the device."""

from __future__ import annotations

from collections.abc import Callable

from explorer.core.device_profile import READ_BANDWIDTH_COUNTS
from explorer.core.figure_trust import caveat, figures_line, marked_bound
from explorer.core.roofline import prefill_ridge_tokens
from explorer.core.trace import DeviceProfile, ModelInfo, PassRecord, Spread, Trace
from explorer.core.units import human_bandwidth, human_bytes, human_flops_per_s, ms

MAX_ROWS = 24  # longer runs show the first and last passes


def _row(p: PassRecord) -> str:
    c = p.cost
    return (
        f"{p.index:>4} {p.phase:<7} {p.tokens_in:>5} {p.cache_len_before:>5}->{p.cache_len_after:<5} "
        f"{p.wall_s * 1e3:>8.2f} {c.t_weight_read_s * 1e3:>8.2f} {c.t_kv_s * 1e3:>7.3f} "
        f"{c.t_compute_s * 1e3:>8.2f} {p.overhead_s * 1e3:>8.2f}  {human_bytes(p.kv_cache_bytes):>10}  "
        f"{p.token_text!r}"
    )


def spread_text(spread: Spread | None, unit: str = "ms") -> str:
    """'31.20 ms (min 30.11, max 35.02, 3 repeats)', or the single sample said as such."""
    if spread is None:
        return "n/a"
    scale, fmt = (1e3, ".2f") if unit == "ms" else (1.0, ".1f")
    median = f"{spread.median * scale:{fmt}} {unit}"
    if spread.samples == 1:
        return median
    return f"{median} (min {spread.low * scale:{fmt}}, max {spread.high * scale:{fmt}})"


def format_device(d: DeviceProfile) -> str:
    def samples(values: tuple[float, ...], fmt: Callable[[float], str]) -> str:
        return f" best of {len(values)}, spread {fmt(min(values))} – {fmt(max(values))}" if values else ""

    lines = [
        f"device  {d.name} ({d.kind}, {d.dtype}): peak {human_flops_per_s(d.peak_flops)} [{d.peak_flops_source}], "
        f"{read_bandwidth_text(d)}, copy bandwidth {human_bandwidth(d.bandwidth_bytes_per_s)} "
        f"[{d.bandwidth_source}, counts {d.bandwidth_counts}], ridge {d.ridge_point_flops_per_byte:.1f} FLOP/B"
        + caveat(d),
    ]
    if d.measured_flops is not None and d.matmul_n:
        lines.append(
            f"        matmul {d.matmul_n}x{d.matmul_n} {d.dtype}: {human_flops_per_s(d.measured_flops)}"
            + samples(d.flops_samples, human_flops_per_s)
        )
    if d.measured_bandwidth_bytes_per_s is not None and d.copy_bytes:
        lines.append(
            f"        copy {human_bytes(d.copy_bytes)} (read + write): "
            f"{human_bandwidth(d.measured_bandwidth_bytes_per_s)}" + samples(d.bandwidth_samples, human_bandwidth)
        )
    if d.measured_read_bandwidth_bytes_per_s is not None and d.read_bytes:
        lines.append(
            f"        read {human_bytes(d.read_bytes)} (read only, a sum): "
            f"{human_bandwidth(d.measured_read_bandwidth_bytes_per_s)}"
            + samples(d.read_bandwidth_samples, human_bandwidth)
        )
    if d.datasheet_flops or d.datasheet_bandwidth_bytes_per_s:  # beside the measured figures the roofline used
        sheet = [human_flops_per_s(d.datasheet_flops)] if d.datasheet_flops else []
        sheet += [human_bandwidth(d.datasheet_bandwidth_bytes_per_s)] if d.datasheet_bandwidth_bytes_per_s else []
        lines.append(f"        datasheet: {', '.join(sheet)} ({d.datasheet_source}); the roofline uses the above")
    if d.benchmark_core_share is not None:
        lines.append(f"        load: the memory streams' threads had {d.benchmark_core_share:.0%} of their cores")
    if d.busy_note:
        lines.append(f"        note: {d.busy_note}")
    if d.figures_taken_under_load:
        lines.append(f"        WARNING: {figures_line(d)}")
    elif d.figures_note:
        lines.append(f"        note: figures {d.figures_note}")
    return "\n".join(lines)


def read_bandwidth_text(d: DeviceProfile) -> str:
    """'read bandwidth 14.2 GB/s [measured, read only]', or what an older trace without the figure divides reads by."""
    if d.read_bandwidth_from_copy:
        return "read bandwidth not in this trace (taken before it was measured): reads use the copy figure"
    figure = human_bandwidth(d.effective_read_bandwidth_bytes_per_s)
    return f"read bandwidth {figure} [{d.read_bandwidth_source}, {READ_BANDWIDTH_COUNTS}]"


def compute_bound_prompts(model: ModelInfo, device: DeviceProfile) -> str:
    tokens = prefill_ridge_tokens(model, device)
    if tokens is None:
        return f"no prompt within the context of {model.max_context} tokens is compute-bound here{caveat(device)}"
    return f"prompts of {tokens} tokens or more are compute-bound here{caveat(device)}"


def heads_text(m: ModelInfo) -> str:
    """`9 heads / 3 KV heads x 64`, or for MLA the two widths each head attends with."""
    if m.sv_head_dim != m.head_dim:
        return f"{m.heads} heads x (QK {m.head_dim}, V {m.sv_head_dim})"
    return f"{m.heads} heads / {m.kv_heads} KV heads x {m.head_dim}"


def format_trace(trace: Trace) -> str:
    m = trace.model
    lines = [
        f"model   {m.display_name}: {m.params / 1e6:.1f} M params, {m.layers} layers, {heads_text(m)}, {m.dtype}, "
        f"weights {human_bytes(m.weight_bytes)}",
        f"        {model_shape_text(m)}",
        *([f"        SHAPE MODEL: {m.shape_note}"] if m.random_weights else []),
        format_device(trace.device),
        f"prompt  {trace.prompt_len} tokens (chat template: {'yes' if trace.chat_template_used else 'no'}); "
        f"warm-up ran: {'yes' if trace.warmup_ran else 'no'}; repeats: {trace.repeat_count} "
        f"(passes below: repeat {trace.shown_repeat + 1}, the median end-to-end)",
        f"decode  {decode_path_text(trace)}",
        "",
        "measured: wall; modelled: weight, kv (read + write), compute (roofline: reads at the read bandwidth, writes "
        "at the copy bandwidth); "
        "overhead = wall - max(compute, weight + kv)",
        "pass phase   tok_in  cache       wall_ms weight_ms  kv_ms  compute_ms overhd_ms    kv_cache  token",
    ]
    passes = trace.passes
    if len(passes) <= MAX_ROWS:
        lines += [_row(p) for p in passes]
    else:
        half = MAX_ROWS // 2
        lines += [_row(p) for p in passes[:half]]
        lines.append(f"   … {len(passes) - 2 * half} more decode passes …")
        lines += [_row(p) for p in passes[-half:]]
    meaning = "; random weights: not meaningful" if m.random_weights else ""
    lines += [
        "",
        f"output  {trace.generated_text!r} ({trace.new_tokens} tokens, stopped by {trace.stop_reason}{meaning})",
    ]
    lines += latency_lines(trace)
    lines.append(
        f"KV cache {human_bytes(trace.final_kv_cache_bytes)} held after {trace.passes[-1].cache_len_after} positions "
        f"({kv_per_token_text(m)}); {allocated_text(trace)}"
    )
    lines += bound_lines(trace)
    return "\n".join(lines)


DECODE_PATH_WORDS = {
    "eager": "eager: a DynamicCache grown by concatenation, every kernel launched from Python",
    "static": "static: a StaticCache of {capacity} positions per layer, written in place; every kernel launched from "
    "Python",
    "graph": "graph: a StaticCache of {capacity} positions per layer, the decode step replayed as one captured CUDA "
    "graph",
}


def decode_path_text(trace: Trace) -> str:
    """Which decode path ran, in words (the JSON's `decode_path`)."""
    return DECODE_PATH_WORDS[trace.decode_path].format(capacity=trace.kv_cache_capacity)


def allocated_text(trace: Trace) -> str:
    """The cache's tensors' size beside what it holds: a static cache reserves its capacity before the prefill."""
    if trace.kv_cache_capacity is None:
        return "allocated: the same (the cache grows with each pass)"
    return (
        f"allocated {human_bytes(trace.allocated_kv_cache_bytes)} (measured: a static cache reserves its "
        f"{trace.kv_cache_capacity} positions up front)"
    )


def bound_lines(trace: Trace) -> list[str]:
    """Which side of the ridge the prefill and the last decode sit on, marked where the device figures look taken
    under load: a bound from such figures is never stated as fact."""
    d, prefill = trace.device, trace.prefill
    lines = [
        f"prefill  {marked_bound(prefill.cost.bound, d)} (model, intensity {prefill.cost.arithmetic_intensity:.1f} "
        f"FLOP/B against ridge {d.ridge_point_flops_per_byte:.1f}): compute {ms(prefill.cost.t_compute_s)}, weights "
        f"{ms(prefill.cost.t_weight_read_s)}, KV {ms(prefill.cost.t_kv_s)}; measured {ms(prefill.wall_s)}; "
        + compute_bound_prompts(trace.model, d)
    ]
    if trace.decodes:
        last = trace.decodes[-1]
        lines.append(
            f"decode   {marked_bound(last.cost.bound, d)} (model, intensity {last.cost.arithmetic_intensity:.2f} "
            f"FLOP/B): compute {ms(last.cost.t_compute_s)}, weights {ms(last.cost.t_weight_read_s)}, KV "
            f"{ms(last.cost.t_kv_s)}; measured {ms(last.wall_s)} (last pass)"
        )
    return lines


def model_shape_text(m: ModelInfo) -> str:
    """'attention sdpa; every layer full attention; dense', or the sliding layers and the experts a model has."""
    kernel = m.attn_implementation or "not recorded"
    if m.sliding_layers:
        windows = sorted({w for w in m.windows if w})
        attention = (
            f"{m.sliding_layers} sliding-window layers (window {', '.join(map(str, windows))}) and "
            f"{m.full_layers} full-attention layers"
        )
    else:
        attention = "every layer full attention"
    if m.experts is None:
        mix = "dense"
    else:
        e = m.experts
        active = m.active_params_per_token or m.params
        mix = (
            f"mixture of experts: {e.moe_layers} MoE layers x {e.n_experts} experts, {e.experts_per_token} per token "
            f"({active / 1e6:.2f} M of {m.params / 1e6:.2f} M params active per token)"
        )
    return f"attention {kernel}; {attention}; {mix}"


def cache_holds_text(m: ModelInfo) -> str:
    """What the cache holds per layer and position, in plain words: per-head K and V, or (MLA) what transformers keeps
    instead. Widths come from the cache's own tensors (`model_shape.latent_attention`)."""
    if m.latent_cache:
        return (
            f"transformers caches MLA's compressed latent, not per-head K and V: per layer and position "
            f"{m.cache_key_width} latent values (kv_lora_rank) + {m.cache_value_width} rotary key values "
            f"(qk_rope_head_dim), shared by all {m.heads} heads; every pass expands each cached position into K "
            f"{m.head_dim} + V {m.sv_head_dim} values per head (kv_b_proj)"
        )
    if m.kv_cache_key_width:
        return f"the cache holds K {m.cache_key_width} + V {m.cache_value_width} values per layer and position"
    return f"K and V of {m.kv_heads} KV heads x {m.head_dim} values per layer and position"


def kv_per_token_text(m: ModelInfo) -> str:
    """What one more position adds to the cache, true for sliding layers too (they stop growing at their window),
    and for a cache that holds something else than per-head K and V (MLA), what it holds."""
    if m.kv_cache_key_width:
        return f"{human_bytes(m.kv_bytes_per_token)} per token: {cache_holds_text(m)}"
    if not m.sliding_layers:
        return f"{human_bytes(m.kv_bytes_per_token)} per token"
    per_layer = m.kv_bytes_per_token_per_layer
    capped = sum(max(0, w - 1) for w in m.windows if w) * per_layer
    return (
        f"{human_bytes(m.kv_bytes_per_token_full_layers)} per token in the {m.full_layers} full-attention layers; "
        f"the {m.sliding_layers} sliding layers add {human_bytes(per_layer)} per token each until they hold their "
        f"window - 1 positions, {human_bytes(capped)} at most together"
    )


def latency_lines(trace: Trace) -> list[str]:
    """TTFT, ITL, E2E and decode rate: the median over repeats with min and max, or one sample said as such."""
    if trace.repeat_count == 1:
        rate = trace.decode_tokens_per_s
        return [
            f"TTFT {ms(trace.ttft_s)}   ITL p50 {ms(trace.itl_p50_s)}  p90 {ms(trace.itl_p90_s)}  "
            f"p99 {ms(trace.itl_p99_s)}   E2E {ms(trace.e2e_s)}   decode " + (f"{rate:.1f} tok/s" if rate else "n/a"),
            "(one sample on a shared machine: use --repeats N for a median and its spread)",
        ]
    same = "yes" if trace.same_tokens_every_repeat else "NO"
    spreads = trace.spreads
    return [
        f"over {trace.repeat_count} repeats (median, min, max); same tokens every repeat: {same}",
        f"TTFT     {spread_text(spreads.ttft_s)}",
        f"ITL p50  {spread_text(spreads.itl_p50_s)}",
        f"ITL p90  {spread_text(spreads.itl_p90_s)}",
        f"ITL p99  {spread_text(spreads.itl_p99_s)}",
        f"E2E      {spread_text(spreads.e2e_s)}",
        f"decode   {spread_text(spreads.decode_tokens_per_s, 'tok/s')}",
    ]
