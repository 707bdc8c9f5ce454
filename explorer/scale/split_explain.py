"""The split what-if's formulas written out with its numbers, for `whatif --split --explain` and the page: each can be
checked by hand from config.json, the spec sheets and the cited link rates."""

from __future__ import annotations

from explorer.scale.split import ATTAINMENT_TARGET, PREFILL_TOKEN_BUDGET, iteration_s
from explorer.scale.split_whatif import SplitResult


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.4g} ms"


def transfer_lines(result: SplitResult) -> list[str]:
    s, link = result.inputs.scenario, result.link
    a = s.arch
    per_element = result.kv_bytes_per_request / max(1, 2 * a.layers * a.kv_heads * a.head_dim * s.prompt_tokens)
    layers = a.layers
    sliding = "; sliding layers hold only their window" if a.sliding_layers else ""
    return [
        f"KV bytes per request = 2 (K and V) x layers x kv_heads x head_dim x bytes x prompt tokens = 2 x {layers} x "
        f"{a.kv_heads} x {a.head_dim} x {per_element:g} ({s.kv_storage}) x {s.prompt_tokens:,} = "
        f"{result.kv_bytes_per_request:,} bytes [modelled{sliding}]",
        f"KV bytes per rank (tensor parallel over N = {s.gpus} GPU(s): each holds ceil(kv_heads / N) = "
        f"{-(-a.kv_heads // s.gpus)} KV heads, replicated past N = kv_heads) = {result.kv_bytes_per_rank:,} bytes "
        "[modelled]",
        f"links: {link.links_words}",
        f"transfer, whole after the prefill: t_x = {'KV bytes per rank' if link.per_gpu else 'KV bytes per request'} "
        f"/ link one way = {result.kv_bytes_per_rank if link.per_gpu else result.kv_bytes_per_request:,} / "
        f"{link.one_way_bytes_per_s / 1e9:,.4g} GB/s ({link.name}) = {_ms(result.transfer_whole_s)} [link: spec, "
        f"{link.source}]",
        f"transfer, streamed layer by layer (Mooncake, Dynamo): exposed = max(t_x / L, t_x - t_prefill x (L - 1) / L) "
        f"= max({_ms(result.transfer_whole_s)} / {layers}, {_ms(result.transfer_whole_s)} - {_ms(result.prefill_s)} "
        f"x {layers - 1} / {layers}) = {_ms(result.exposed_streamed_s)}",
        f"exposed transfer used: {_ms(result.exposed_s)} "
        f"({'streamed' if result.inputs.streamed else 'whole'}); each prefill instance's link sends one request at a "
        "time (a queue of its own)",
    ]


def phase_lines(result: SplitResult) -> list[str]:
    steps, inputs = result.steps, result.inputs
    pre = steps.prefill()
    one = steps.decode(1)
    source = steps.source
    lines = [
        f"prefill of P = {steps.prompt_tokens:,} tokens [{source}] = max(compute {_ms(pre.compute_s)}, weights "
        f"{_ms(pre.weights_s)} + KV {_ms(pre.kv_s)}) + all-reduces {_ms(pre.link_s)} = {_ms(pre.floor_s)}",
        "TTFT (disaggregated) = queue for a prefill instance + prefill + exposed transfer; colocated = queue + "
        "prefill (its iteration)",
        f"decode step at batch B [{source}] = max(compute, weights + B x KV per request) + all-reduces; B = 1: "
        f"{_ms(one.floor_s)}",
        f"decode batch under the TPOT SLO ({_ms(inputs.tpot_slo_s)}) = the largest B <= the memory's "
        f"{result.memory_batch:,} with step(B) < SLO = {result.tpot_batch:,} (step {_ms(result.tpot_batch_step_s)}); "
        f"its KV at prompt + output tokens = {result.tpot_batch:,} x one request's = "
        f"{result.tpot_batch_kv_bytes:,} bytes",
        "an iteration carrying B running requests and c prompt tokens (a chunk, or whole prompts): max(decode "
        "compute(B) + c/P x prefill compute, weights + decode KV(B) + c/P x prefill KV) + all-reduces; colocated "
        "prefill-first runs prompts with B = 0 (every running request waits: the stall), chunked runs both together "
        f"(c <= {inputs.chunk_tokens:,})",
        f"prompts per prefill iteration: up to {PREFILL_TOKEN_BUDGET:,} tokens (an assumption), at least one",
    ]
    if inputs.chunk_tokens:
        mixed = iteration_s(steps, result.tpot_batch or 1, inputs.chunk_tokens)
        lines.append(
            f"  e.g. B = {result.tpot_batch or 1:,} with a chunk of {inputs.chunk_tokens:,}: {_ms(mixed)} a step"
        )
    return lines


def goodput_lines(result: SplitResult) -> list[str]:
    lines = [
        f"TPOT of a request = (last token - first token) / (output tokens - 1); it meets the SLOs when TTFT < "
        f"{_ms(result.inputs.ttft_slo_s)} and TPOT < {_ms(result.inputs.tpot_slo_s)} (strictly under)",
        f"goodput (DistServe) = the highest arrival rate at which >= {ATTAINMENT_TARGET:.0%} of requests meet both, "
        "interpolated between the simulated rates, over the layout's GPUs; Poisson arrivals, "
        f"{result.requests} requests a rate, random seed {result.inputs.seed}"
        + (f" ({result.fewer_requests})" if result.fewer_requests else ""),
        "capacity (no SLO): colocated = N / (prefill per request + (O - 1) x step(B_mem) / B_mem); disaggregated = "
        "min(x prompts / prefill, x / t_x, y x B_mem / ((O - 1) x step(B_mem)))",
    ]
    for c in result.curves:
        lines.append(
            f"  {c.layout.label} on {c.gpus} GPUs: capacity {c.capacity_per_gpu:.4g}, goodput "
            f"{c.goodput_per_gpu:.4g} requests/s per GPU; held back by {c.limit}"
        )
    crossing = result.crossover_per_s
    lines.append(
        "crossover (the better layout changes): "
        + (f"at {crossing:.4g} requests/s" if crossing is not None else "none over the rates modelled")
    )
    return lines


def split_formula_lines(result: SplitResult) -> list[str]:
    return [*transfer_lines(result), *phase_lines(result), *goodput_lines(result)]
