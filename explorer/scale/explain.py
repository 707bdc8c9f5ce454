"""The what-if's formulas written out with this scenario's numbers, for `whatif --explain` and the page: every figure
can be checked by hand from config.json and the spec sheets."""

from __future__ import annotations

from dataclasses import replace

from explorer.core.roofline import layer_pairs
from explorer.core.units import human_bytes
from explorer.scale.params import attention_biases_per_layer, expert_weight_params, storage_bits, stored_bytes
from explorer.scale.whatif import ALL_REDUCES_PER_LAYER, WhatIf, decode_step


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
        weight_bytes_line(result),
        f"kv per new token = 2 (K and V) x layers x kv_heads x head_dim x bytes = 2 x {a.layers} x {a.kv_heads} x "
        f"{a.head_dim} x {storage_bits(s.kv_storage) / 8:g} ({s.kv_storage}) = {_n(result.kv_bytes_per_new_token)}",
        *window_lines(result),
    ]


def weight_bytes_line(result: WhatIf) -> str:
    s = result.scenario
    per = f"{storage_bits(s.weights_storage) / 8:g} bytes ({s.weights_storage})"
    if not s.arch.is_moe or s.experts_storage == s.weights_storage:
        return f"weight_bytes = params x {per} = {_n(result.weight_bytes)}"
    experts = expert_weight_params(s.arch)
    return (
        f"weight_bytes = (params - expert weights) x {per} + expert weights x {storage_bits(s.experts_storage) / 8:g} "
        f"bytes ({s.experts_storage}) = {_n(result.counts.total - experts)} x {storage_bits(s.weights_storage) / 8:g} "
        f"+ {_n(experts)} x {storage_bits(s.experts_storage) / 8:g} = {_n(result.weight_bytes)}"
    )


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
        f"  {a.sliding_layers} of {a.layers} layers slide: each keeps at most window - 1 positions, as transformers' "
        "cache holds them (the next query brings the window's last position itself); one request's cache at "
        f"T = {s.context:,} holds sum over layers of min(T, window - 1) positions",
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
    a, c = s.arch, d.cost
    return [
        f"decode step, batch B = {s.batch}, context T = {s.context:,}, per GPU [modelled, spec peak and bandwidth]",
        f"  weights read = {read_rule(result)} = {_n(c.weight_bytes_read)} bytes -> "
        f"{_ms(c.t_weight_read_s)} at {s.gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
        f"  KV moved (a read-once cache, as vLLM's paged one) = B x (the cache at T and the new position read + "
        f"the new position written; {_n(part.kv_bytes_per_token)} bytes a position) = {_n(c.kv_bytes_read)} + "
        f"{_n(c.kv_bytes_written)} bytes -> {_ms(c.t_kv_s)}",
        f"  FLOPs = B x (2 x {_n(result.counts.linear)} matmul weights + 4 x heads x head_dim x useful pairs (T + 1 "
        f"keys a layer, at most its window)) / N = {s.batch} x (2 x {_n(result.counts.linear)} + 4 x {a.heads} x "
        f"{a.head_dim} x {_n(sum(layer_pairs(w, 1, s.context) for w in a.windows))}) / {s.gpus} = "
        f"{c.flops:.4g} -> {_ms(c.t_compute_s)} at {s.peak_flops / 1e12:,.1f} TFLOP/s",
        f"  decode_step_s_floor = max(compute, weights + KV) + all-reduces = max({_ms(c.t_compute_s)}, "
        f"{_ms(c.t_memory_s)}) + {_ms(d.t_link_s)} = {_ms(d.floor_s)} ({d.bound}-bound)",
        f"  decode_tokens_per_s_ceiling = B / floor = {result.decode_tokens_per_s_ceiling:,.1f} tokens/s in all, "
        f"{result.decode_tokens_per_s_ceiling_per_stream:,.1f} per stream",
    ]


def read_rule(result: WhatIf) -> str:
    a = result.scenario.arch
    table = "" if a.tied_embeddings else ", the untied input table only gathered (B rows, not the whole table)"
    if not a.is_moe:
        return f"every weight once per step, whatever B{table}"
    return (
        f"every weight outside the experts once{table}, and per sparse layer the distinct experts B tokens pick, "
        f"{result.experts_read_per_layer:.2f} expected (uniform routing assumed)"
    )


def prefill_lines(result: WhatIf) -> list[str]:
    s, p = result.scenario, result.prefill
    c = p.cost
    return [
        f"prefill, one prompt of P = {s.prompt_tokens:,} tokens, per GPU [modelled]",
        "  FLOPs = (2 x (matmul weights - LM head) x P + 2 x LM head (last position only) + 4 x layers x heads x "
        "head_dim x P (P + 1) / 2 (the useful causal pairs: a fused kernel skips the masked tiles; fewer on sliding "
        f"layers)) / N = {c.flops:.4g} -> {_ms(c.t_compute_s)}",
        f"  bytes = weights once (P rows of an untied input table) + the prompt's KV written and read = "
        f"{_n(c.bytes_moved)} -> {_ms(c.t_memory_s)}",
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
        f"kv_crossover_context = the shortest T whose step moves as many KV bytes as weight bytes (B x the KV moved "
        f"at T >= weights read) = {overtake}",
    ]


FLAT_GAIN = 1.1  # tokens/s gaining under 10 % over the last doubling of B is a curve that has flattened


def curve_shape(result: WhatIf) -> str:
    """What the tokens/s curve does over its last doubling of B up to where it ends (the memory wall), computed from
    the curve itself: "" where it has no doubling to read."""
    s = result.scenario
    top = max(result.max_batch, s.batch)
    if top < 2:
        return ""
    gain = (top / decode_step(s, top).floor_s) / ((top // 2) / decode_step(s, top // 2).floor_s)
    shape = "the curve flattens" if gain < FLAT_GAIN else "the curve keeps rising"
    return f"{shape}: tokens/s gains {gain - 1:.0%} from B = {top // 2:,} to {top:,}"


def knee_text(result: WhatIf) -> str:
    """Where the decode step turns compute-bound, said only where a batch that fits reaches it: a knee beyond the
    memory's max batch cannot be reached on this GPU, so it is named as out of reach, not as a knee; then what the
    curve does, read off the curve."""
    s, ridge = result.scenario, result.ridge_batch
    if ridge is not None and ridge <= result.max_batch:
        return f"the step turns compute-bound at B = {ridge:,} (the roofline's knee)"
    shape = curve_shape(result)
    if ridge is None:
        said = (
            f"at context {s.context:,} each request brings more KV bytes than its FLOPs can hide, so no batch turns "
            "the step compute-bound"
        )
    else:
        said = (
            f"the step stays memory-bound at every batch that fits: it would turn compute-bound only at "
            f"B = {ridge:,}, beyond the memory's {result.max_batch:,}"
        )
    return f"{said}; {shape}" if shape else said


def ceiling_if_read_whole_text(result: WhatIf) -> str | None:
    """What the tokens/s ceiling would be if the untied input table were read whole each step, as the rule of thumb
    'weights / bandwidth' reads it: '209 if the 1.05 GB input table were read whole'; None when the table is tied (the
    LM head reads it whole anyway, so both conventions agree)."""
    whole = result.decode_tokens_per_s_ceiling_table_whole
    if whole is None:
        return None
    share = " (one GPU's share)" if result.scenario.gpus > 1 else ""
    return f"{whole:,.0f} if the {human_bytes(result.input_table_bytes)} input table{share} were read whole"


def ceiling_why_text(result: WhatIf) -> str | None:
    """Why the tokens/s ceiling is not the familiar 'parameters x bytes / bandwidth' (Llama-3.1-8B on an H100: 223, not
    209): the input embedding is a row lookup that reads one row per token, not the whole table. Computed from the
    scenario; None when the table is tied (the LM head reads it whole, so both agree)."""
    whole = result.decode_tokens_per_s_ceiling_table_whole
    if whole is None:
        return None
    s = result.scenario
    row_bytes = stored_bytes(s.arch.hidden_size / s.gpus, s.weights_storage)  # one GPU's share of a row
    tokens = f"{s.batch:,} tokens" if s.batch > 1 else "one token"
    share = " (one GPU's share)" if s.gpus > 1 else ""
    return (
        f"{result.decode_tokens_per_s_ceiling:,.0f} tokens/s, not the rule of thumb's {whole:,.0f} (every parameter's "
        f"bytes / the bandwidth): that rule reads the {human_bytes(result.input_table_bytes)} input embedding "
        f"table{share} whole, but the input embedding is a row lookup, reading one {human_bytes(row_bytes)} row "
        f"per token ({tokens} a step here)."
    )


def caveat_lines(result: WhatIf) -> list[str]:
    s, c = result.scenario, result.counts
    lines = [
        f"assumptions: weights stored as {s.weights_storage}"
        + (f" (the experts as {s.experts_storage})" if s.arch.is_moe else "")
        + f", the KV cache as {s.kv_storage} (fp8, int8 and int4 scales not counted; MXFP4's counted), compute in "
        f"{s.dtype}; no speculative decoding; every pass reaches the spec peak and bandwidth (real kernels reach "
        "less: see this machine's own gap on the page)",
    ]
    if not s.arch.tied_embeddings:
        every = decode_step(replace(s, batch=1), 1).cost
        whole = every.weight_bytes_read + result.shard.table_bytes
        lines.append(
            f"the untied input table ({c.embeddings / c.total:.1%} of the weights) is gathered row by row, as a "
            "lookup reads it (the live run's convention too); the back-of-envelope 'every weight once per token' "
            f"reads it whole: {_n(whole)} bytes a step at B = 1, {s.gpu.bandwidth_bytes_per_s / whole:,.1f} "
            "tokens/s at the spec bandwidth, weights alone"
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
