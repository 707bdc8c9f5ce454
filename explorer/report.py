"""Plain-text summaries of a Trace (for the CLI) and the unit formatting shared with the app."""

from __future__ import annotations

from explorer.trace import PassRecord, Trace

MAX_ROWS = 24  # longer runs show the first and last passes


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def human_flops(n: float) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} FLOP"


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _row(p: PassRecord) -> str:
    return (
        f"{p.index:>4} {p.phase:<7} {p.tokens_in:>5} {p.cache_len_before:>5}->{p.cache_len_after:<5} "
        f"{p.wall_s * 1e3:>8.2f} {p.t_weight_read_s * 1e3:>8.2f} {p.t_kv_read_s * 1e3:>7.3f} "
        f"{p.t_compute_s * 1e3:>8.2f} {p.overhead_s * 1e3:>8.2f}  {human_bytes(p.kv_cache_bytes):>10}  "
        f"{p.token_text!r}"
    )


def format_trace(trace: Trace) -> str:
    m, d = trace.model, trace.device
    lines = [
        f"model   {m.display_name}: {m.params / 1e6:.1f} M params, {m.layers} layers, {m.heads} heads / {m.kv_heads} "
        f"KV heads x {m.head_dim}, {m.dtype}, weights {human_bytes(m.weight_bytes)}",
        f"device  {d.name} ({d.kind}): peak {d.peak_flops / 1e12:.2f} TFLOP/s [{d.peak_flops_source}], "
        f"bandwidth {d.bandwidth_bytes_per_s / 1e9:.1f} GB/s [{d.bandwidth_source}], "
        f"ridge {d.ridge_point_flops_per_byte:.1f} FLOP/B",
        f"prompt  {trace.prompt_len} tokens (chat template: {'yes' if trace.chat_template_used else 'no'}); "
        f"warm-up ran: {'yes' if trace.warmup_ran else 'no'}",
        "",
        "measured: wall; modelled: weight, kv, compute (roofline); overhead = wall - max(compute, weight + kv)",
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
    prefill = trace.prefill
    lines += [
        "",
        f"output  {trace.generated_text!r} ({trace.new_tokens} tokens, stopped by {trace.stop_reason})",
        f"TTFT {ms(trace.ttft_s)}   ITL p50 {ms(trace.itl_p50_s)}  p90 {ms(trace.itl_p90_s)}  "
        f"p99 {ms(trace.itl_p99_s)}   E2E {ms(trace.e2e_s)}   decode "
        + (f"{trace.decode_tokens_per_s:.1f} tok/s" if trace.decode_tokens_per_s else "n/a"),
        f"KV cache {human_bytes(trace.final_kv_cache_bytes)} after {trace.passes[-1].cache_len_after} positions "
        f"({human_bytes(m.kv_bytes_per_token)} per token)",
        f"prefill  {prefill.bound}-bound (model): compute {ms(prefill.t_compute_s)}, "
        f"weights {ms(prefill.t_weight_read_s)}, KV {ms(prefill.t_kv_read_s)}; measured {ms(prefill.wall_s)}",
    ]
    if trace.decodes:
        last = trace.decodes[-1]
        lines.append(
            f"decode   {last.bound}-bound (model): compute {ms(last.t_compute_s)}, weights {ms(last.t_weight_read_s)}, "
            f"KV {ms(last.t_kv_read_s)}; measured {ms(last.wall_s)} (last pass)"
        )
    return "\n".join(lines)
