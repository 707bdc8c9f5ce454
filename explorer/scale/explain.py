"""The what-if's formulas written out with this scenario's numbers, for `whatif --explain` and the page: every figure
can be checked by hand from config.json and the spec sheets."""

from __future__ import annotations

from explorer.scale.params import attention_biases_per_layer, storage_bits
from explorer.scale.whatif import ALL_REDUCES_PER_LAYER, WhatIf


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def param_lines(result: WhatIf) -> list[str]:
    s, c = result.scenario, result.counts
    a = s.arch
    bias = attention_biases_per_layer(a)
    head = "0 (tied: the input table)" if a.tied_embeddings else f"vocab x hidden = {_n(c.lm_head)}"
    return [
        "params [modelled, exact from config.json]",
        f"  embeddings = vocab x hidden = {a.vocab_size:,} x {a.hidden_size:,} = {_n(c.embeddings)}",
        f"  attention = layers x (2 x hidden x heads x head_dim + 2 x hidden x kv_heads x head_dim"
        f"{' + biases' if bias else ''}) = {a.layers} x (2 x {a.hidden_size} x {a.heads} x {a.head_dim} + 2 x "
        f"{a.hidden_size} x {a.kv_heads} x {a.head_dim}{f' + {bias:,}' if bias else ''}) = {_n(c.attention)}",
        f"  mlp = dense layers x 3 x hidden x intermediate = {a.layers - a.moe_layers} x 3 x {a.hidden_size} x "
        f"{a.intermediate_size} = "
        f"{_n(c.mlp)}" + (" (+ biases)" if a.mlp_bias else ""),
        *expert_lines(result),
        f"  norms = layers x {a.norms_per_layer} x hidden{' (+ q/k norms)' if a.qk_norm else ''} + hidden = "
        f"{_n(c.norms)}",
        f"  lm_head = {head}",
        f"  params = {_n(c.total)}",
        f"weight_bytes = params x {storage_bits(s.weights_storage) / 8:g} bytes ({s.weights_storage}) = "
        f"{_n(result.weight_bytes)}",
        f"kv per new token = 2 (K and V) x layers x kv_heads x head_dim x bytes = 2 x {a.layers} x {a.kv_heads} x "
        f"{a.head_dim} x {storage_bits(s.kv_storage) / 8:g} ({s.kv_storage}) = {_n(result.kv_bytes_per_new_token)}",
        *window_lines(result),
    ]


def expert_lines(result: WhatIf) -> list[str]:
    a, c = result.scenario.arch, result.counts
    if not a.is_moe:
        return []
    return [
        f"  experts = moe_layers x n_experts x (3 x hidden x expert_width{' + biases' if a.expert_biases else ''}) = "
        f"{a.moe_layers} x {a.n_experts} x {_n(c.expert_each)} = {_n(c.experts)}; routers = {_n(c.router)}",
        f"  active per token = params - experts + moe_layers x k x one expert = {_n(c.total)} - {_n(c.experts)} + "
        f"{a.moe_layers} x {a.experts_per_token} x {_n(c.expert_each)} = {_n(c.active)}",
        f"  a step of B tokens reads, per sparse layer, n (1 - (1 - k/n)^B) = "
        f"{result.experts_read_per_layer:.2f} distinct experts (routing ASSUMED uniform and independent)",
    ]


def window_lines(result: WhatIf) -> list[str]:
    a, s = result.scenario.arch, result.scenario
    if not a.sliding_layers:
        return [
            f"kv_bytes_per_token = kv per new token = {_n(result.kv_bytes_per_token)} (every layer keeps every "
            "position)"
        ]
    return [
        f"  {a.sliding_layers} of {a.layers} layers slide: each keeps at most its window of positions; one request's "
        f"cache at T = {s.context:,} holds sum over layers of min(T, window) positions",
        f"kv_bytes_per_token = that cache / T = {_n(result.kv_bytes_per_token)}",
    ]


def shard_lines(result: WhatIf) -> list[str]:
    s, part = result.scenario, result.shard
    if s.gpus == 1:
        return ["one GPU: it holds every weight and every request's KV cache"]
    link = s.link
    assert link is not None
    return [
        f"tensor parallel over N = {s.gpus} GPUs [modelled; link spec: {link.name} {link.bytes_per_s / 1e9:,.1f} GB/s "
        "both ways, so half of it each way in a ring]",
        f"  weights per GPU = (params - norms) / N + norms (kept whole) = {_n(part.weight_bytes)} bytes",
        f"  KV heads per GPU = max(1, kv_heads / N) = {part.kv_heads}; KV per token per GPU = "
        f"{_n(part.kv_bytes_per_token)} bytes",
        f"  all-reduces per pass = {ALL_REDUCES_PER_LAYER} x layers, each of tokens x hidden x bytes; a ring sends "
        "2 (N - 1) / N of it: time = bytes sent / one-way link bandwidth (latency not modelled: a floor)",
        f"  decode step: {_n(result.decode.link_bytes)} bytes sent per GPU = {_ms(result.decode.t_link_s)}",
    ]


def decode_lines(result: WhatIf) -> list[str]:
    s, d, part = result.scenario, result.decode, result.shard
    a = s.arch
    return [
        f"decode step, batch B = {s.batch}, context T = {s.context:,}, per GPU [modelled, spec peak and bandwidth]",
        f"  weights read = {read_rule(result)} = {_n(d.weight_bytes)} bytes -> "
        f"{_ms(d.t_weight_s)} at {s.gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
        f"  KV moved = B x (the cache at T read + 1 position written: {_n(part.kv_bytes_per_token)}) = "
        f"{_n(d.kv_bytes)} bytes -> "
        f"{_ms(d.t_kv_s)}",
        f"  FLOPs = B x (2 x {_n(result.counts.linear)} matmul weights + 4 x layers x heads x head_dim x T) / N = "
        f"{s.batch} x (2 x {_n(result.counts.linear)} + 4 x {a.layers} x {a.heads} x {a.head_dim} x {s.context}) / "
        f"{s.gpus} = {d.flops:.4g} -> {_ms(d.t_compute_s)} at {s.peak_flops / 1e12:,.1f} TFLOP/s",
        f"  decode_step_s_floor = max(compute, weights + KV) + all-reduces = max({_ms(d.t_compute_s)}, "
        f"{_ms(d.t_memory_s)}) + {_ms(d.t_link_s)} = {_ms(d.floor_s)} ({d.bound}-bound)",
        f"  decode_tokens_per_s_ceiling = B / floor = {result.decode_tokens_per_s_ceiling:,.1f} tokens/s in all, "
        f"{result.decode_tokens_per_s_ceiling_per_stream:,.1f} per stream",
    ]


def read_rule(result: WhatIf) -> str:
    if not result.scenario.arch.is_moe:
        return "every weight once per step, whatever B"
    return (
        "every weight outside the experts once, and per sparse layer the distinct experts B tokens pick, "
        f"{result.experts_read_per_layer:.2f} expected (uniform routing assumed)"
    )


def prefill_lines(result: WhatIf) -> list[str]:
    s, p = result.scenario, result.prefill
    return [
        f"prefill, one prompt of P = {s.prompt_tokens:,} tokens, per GPU [modelled]",
        "  FLOPs = (2 x (matmul weights - LM head) x P + 2 x LM head (last position only) + 4 x layers x heads x "
        f"head_dim x P (P + 1) / 2 (causal pairs)) / N = {p.flops:.4g} -> {_ms(p.t_compute_s)}",
        f"  bytes = weights once + P x KV per token written = {_n(p.weight_bytes + p.kv_bytes)} -> {_ms(p.t_memory_s)}",
        f"  prefill_s_floor = max(compute, memory) + all-reduces = {_ms(p.floor_s)} ({p.bound}-bound)",
    ]


def batch_lines(result: WhatIf) -> list[str]:
    s, part = result.scenario, result.shard
    ridge = (
        f"{result.ridge_batch:,}"
        if result.ridge_batch is not None
        else "none: at this context each request adds more bytes than its FLOPs can hide"
    )
    crossover = result.kv_crossover_context
    beyond = f" (beyond the model's {s.arch.max_context:,})" if (crossover or 0) > s.arch.max_context else ""
    overtake = f"{crossover:,}{beyond}" if crossover is not None else "never (every layer slides)"
    return [
        "ridge_batch = the smallest B with B x compute per request >= weights + B x KV per request (in time) = "
        f"{ridge} [modelled]",
        f"max_batch = floor((GPU memory - weights per GPU) / (one request's KV at T per GPU)) = floor(("
        f"{_n(s.memory_bytes)} - {_n(part.weight_bytes)}) / {_n(part.kv_bytes_at(s, s.context))}) = "
        f"{result.max_batch:,} "
        f"[memory spec: {s.gpu.memory_text}; an engine keeps some for activations, so fewer in practice]",
        f"KV reads overtake the weights at context T >= weights / (B x KV per token) - 1 = {overtake}",
    ]


def knee_text(result: WhatIf) -> str:
    """Where the decode step turns compute-bound, said only where a batch that fits reaches it: a knee beyond the
    memory's max batch cannot be reached on this GPU, so it is named as out of reach, not as a knee."""
    s, ridge = result.scenario, result.ridge_batch
    if ridge is None:
        return (
            f"at context {s.context:,} each request brings more KV bytes than its FLOPs can hide, so no batch turns "
            "the step compute-bound: the curve flattens instead"
        )
    if ridge > result.max_batch:
        return (
            f"the step stays memory-bound at every batch that fits: it would turn compute-bound only at "
            f"B = {ridge:,}, beyond the memory's {result.max_batch:,}"
        )
    return f"the step turns compute-bound at B = {ridge:,} (the roofline's knee)"


def caveat_lines(result: WhatIf) -> list[str]:
    a, c = result.scenario.arch, result.counts
    lines = [
        f"assumptions: weights stored as {result.scenario.weights_storage}, the KV cache as "
        f"{result.scenario.kv_storage} (a quantized format's scales not counted), compute in "
        f"{result.scenario.dtype}; no speculative decoding; every pass "
        "reaches the spec peak and bandwidth (real kernels reach less: see this machine's own gap on the page)",
    ]
    if not a.tied_embeddings:
        share = c.embeddings / c.total
        lines.append(
            f"the floor reads every weight once per step; the untied input table ({share:.1%} of the weights) is "
            "in fact only gathered row by row, so a stricter floor is that much lower"
        )
    return lines


def formula_lines(result: WhatIf) -> list[str]:
    """Every formula of the what-if, each with this scenario's numbers and its result."""
    return [
        *param_lines(result),
        *shard_lines(result),
        *prefill_lines(result),
        *decode_lines(result),
        *batch_lines(result),
        *caveat_lines(result),
    ]
