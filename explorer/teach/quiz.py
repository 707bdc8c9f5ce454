"""Check yourself: a short quiz on prefill and decode, with the evidence for each answer read from the user's own run.

The questions follow common recall questions, interview Q&A and misconceptions about the two phases, in our own words.
Where a source names a common wrong answer it is among the choices and grading says so; where none is named, no answer
is called common. Explanations state the general rule (and say so); evidence is computed from a `Trace` (and its
attention maps when they were captured): measured shapes, bytes and times, and the roofline model's predictions.
Nothing here keeps state: the page holds the answers in the session only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from explorer.charts.kv import kv_traffic_text
from explorer.core.attention_maps import AttentionMaps
from explorer.core.report import cache_holds_text
from explorer.core.trace import ModelInfo, PassRecord, Trace
from explorer.core.units import human_bytes, human_flops, ms
from explorer.teach.questions import QUESTIONS, Question

EXAMPLE_DECODE_PASS = 5  # "your decode pass 5": far enough in that the cache has visibly grown


@dataclass(frozen=True)
class Verdict:
    correct: bool
    common_wrong: bool  # the chosen answer is the commonly given wrong one
    headline: str


@dataclass(frozen=True)
class Evidence:
    text: str
    source: str  # what kind of number it is: measured, modelled, or both


def question(key: str) -> Question:
    return next(q for q in QUESTIONS if q.key == key)


def grade(q: Question, choice: int) -> Verdict:
    if not 0 <= choice < len(q.choices):
        raise ValueError(f"choice {choice} is not one of the {len(q.choices)} answers")
    if choice == q.correct:
        return Verdict(True, False, "Right.")
    if choice == q.common_wrong:
        return Verdict(False, True, f"That is a wrong answer commonly given (it appears in {q.origin}).")
    return Verdict(False, False, "Not quite.")


def score(answers: dict[str, int]) -> tuple[int, int]:
    """(right, answered) over the answers given so far, by question key."""
    right = sum(grade(question(key), choice).correct for key, choice in answers.items())
    return right, len(answers)


# --- evidence from the user's run ------------------------------------------------------------------------------------
def example_decode(trace: Trace) -> PassRecord | None:
    """Decode pass 5, or the last one in a shorter run; None when the run made a single token."""
    if not trace.decodes:
        return None
    return trace.passes[min(EXAMPLE_DECODE_PASS, trace.new_tokens - 1)]


def shape(*dims: int | str) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def prefill_scores(trace: Trace) -> str:
    T = trace.prompt_len
    return shape(1, trace.model.heads, T, T)


def decode_scores(trace: Trace, p: PassRecord) -> str:
    """One row over every key in the cache, the fed token's own included."""
    return shape(1, trace.model.heads, 1, p.cache_len_after)


def largest_masked_prob(maps: AttentionMaps) -> float:
    """The largest captured probability above the diagonal, over every captured layer and head."""
    T = maps.prompt_len
    upper = np.triu(np.ones((T, T), dtype=bool), k=1)
    if not upper.any():
        return 0.0
    return float(max(maps.prefill[layer][:, upper].max() for layer in maps.layers))


def no_decode() -> Evidence:
    return Evidence("Your run made one token, so it had no decode pass: raise Max new tokens and run again.", "")


def evidence_decode_mask(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    T = trace.prompt_len
    text = (
        f"Your prefill's scores were {prefill_scores(trace)}: {T * (T - 1) // 2:,} of each head's {T * T:,} cells "
        "lie above the diagonal and were masked."
    )
    p = example_decode(trace)
    if p is not None:
        text += (
            f" Your decode pass {p.index} had scores {decode_scores(trace, p)}: one row over the "
            f"{p.cache_len_after} keys in the cache, none of them after the new token, so nothing to mask."
        )
    if maps is not None:
        text += f" In the captured maps the largest probability above the diagonal is {largest_masked_prob(maps):g}."
    return Evidence(text, "measured (shapes from the run's cache lengths; probabilities captured)")


def evidence_prefill_like_training(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    prefill = trace.prefill
    text = f"Your prefill computed all {prefill.tokens_in} prompt tokens in one pass of {ms(prefill.wall_s)}; " + (
        "each decode pass computed 1." if trace.decodes else "a decode pass would compute 1."
    )
    if maps is not None:
        text += (
            f" Causal, not bidirectional: across the {len(maps.layers)} captured layers and every head, the largest "
            f"probability a prompt token gave a later one is {largest_masked_prob(maps):g}."
        )
    return Evidence(text, "measured")


def evidence_bound(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    ridge = trace.device.ridge_point_flops_per_byte
    prefill = trace.prefill.cost
    text = (
        f"On this run's device figures the ridge point is {ridge:.1f} FLOP/byte. Your prefill: "
        f"{prefill.arithmetic_intensity:.1f} FLOP/byte, {prefill.bound}-bound."
    )
    p = example_decode(trace)
    if p is not None:
        bound = f"{p.cost.bound}-bound"
        text += f" Your decode pass {p.index}: {p.cost.arithmetic_intensity:.2f} FLOP/byte, {bound}."
    if prefill.bound == "memory":
        text += (
            f" Here even the prefill sits below the ridge: {trace.prompt_len} tokens reuse each weight fewer times "
            "than this device needs to be kept busy; a longer prompt moves it right."
        )
    return Evidence(text, "modelled (roofline: FLOPs and bytes from the model's shapes, device peaks)")


def evidence_score_shapes(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    text = f"Your prompt had {trace.prompt_len} tokens: prefill scores {prefill_scores(trace)}"
    if not trace.decodes:
        return Evidence(text + "; the run made one token, so no decode pass followed.", "measured")
    first, last = trace.decodes[0], trace.decodes[-1]
    text += f", first decode pass {decode_scores(trace, first)}"
    if last is not first:
        text += f", last decode pass (pass {last.index}) {decode_scores(trace, last)}"
    return Evidence(text + ".", "measured (the run's cache lengths and the model's heads)")


def over_memory_floor(p: PassRecord) -> float:
    """How many times its modelled memory floor (weights and KV traffic at the device's bandwidths) a pass took."""
    return p.wall_s / p.cost.t_memory_s


def evidence_decode_slow(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    p = example_decode(trace)
    if p is None:
        return no_decode()
    c = p.cost
    text = (
        f"Your decode pass {p.index} computed {p.tokens_in} token, yet read {human_bytes(c.weight_bytes_read)} of "
        f"weights and moved {kv_traffic_text(c.kv_bytes_moved, p.kv_cache_bytes)} for {human_flops(c.flops)}. The "
        f"roofline model gives {ms(c.t_memory_s)} for the memory traffic and {ms(c.t_compute_s)} for the maths; the "
        f"pass took {ms(p.wall_s)}, {over_memory_floor(p):.1f}× its memory floor."
    )
    factors = [over_memory_floor(d) for d in trace.decodes]
    if len(factors) > 1:
        text += (
            f" Your {len(factors)} decode passes took {min(factors):.1f}×–{max(factors):.1f}× their memory floor "
            f"(median {float(np.median(factors)):.1f}×)"
        )
        text += (
            ": the bytes set the least a pass can take; the rest is time the roofline does not model."
            if min(factors) >= 1
            else "; below 1×, faster than the device figures predict: the figures may have been taken while the "
            "device was busy."
        )
    return Evidence(text, "modelled bytes, FLOPs and times · measured wall time")


def evidence_decode_cheap(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    if not trace.decodes:
        return no_decode()
    after_first_s = sum(trace.itl_s)  # from the first token to the last: every decode step with its sampling
    text = (
        f"In your run the prefill took {ms(trace.prefill.wall_s)} (time to first token {ms(trace.ttft_s)}); the "
        f"{len(trace.decodes)} decode steps after it took {ms(after_first_s)} together, "
        f"{after_first_s / trace.e2e_s:.0%} of the {ms(trace.e2e_s)} end to end."
    )
    return Evidence(text, "measured")


def evidence_prefill_once(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    prefill = trace.prefill
    text = (
        f"Your prefill of {prefill.tokens_in} tokens is modelled at {human_flops(prefill.cost.flops)}, took "
        f"{ms(prefill.wall_s)} and was {prefill.wall_s / trace.ttft_s:.0%} of your time to first token "
        f"({ms(trace.ttft_s)})."
    )
    p = example_decode(trace)
    if p is not None:
        ratio = prefill.cost.flops / p.cost.flops
        text += f" That is {ratio:.0f}× the FLOPs of your decode pass {p.index} ({human_flops(p.cost.flops)})."
    return Evidence(text, "modelled FLOPs · measured times")


def evidence_same_model(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    m = trace.model
    prefill_read = trace.prefill.cost.weight_bytes_read
    text = (
        f"All {trace.new_tokens} passes of your run used one model, {m.display_name}: {m.params / 1e6:.1f} M "
        f"parameters, {human_bytes(m.weight_bytes)} of weights. "
    )
    decode_reads = {p.cost.weight_bytes_read for p in trace.decodes}
    if not decode_reads or decode_reads == {prefill_read}:
        text += f"Each pass read the same {human_bytes(prefill_read)} of them. "
    else:  # an untied embedding table is read row by row: one row per token fed in
        text += (
            f"The prefill read {human_bytes(prefill_read)} of them and each decode pass "
            f"{human_bytes(min(decode_reads))}: the same weights, apart from the embedding rows each pass looks up. "
        )
    text += f"The prefill fed {trace.prefill.tokens_in} tokens into an empty cache" + (
        ", every decode pass 1 token into a filled one." if trace.decodes else "; no decode pass followed."
    )
    return Evidence(text, "the loaded model · modelled bytes read")


def kv_formula(m: ModelInfo) -> str:
    """The bytes one position adds, as the cache holds them: per-head K and V in every layer, only the full layers
    once the sliding ones hold their window, or (MLA) the latent's two widths."""
    if m.kv_cache_key_width:
        return (
            f"({m.cache_key_width} + {m.cache_value_width}) × {m.layers} × {m.bytes_per_element} = "
            f"{m.kv_bytes_per_token:,} bytes ({cache_holds_text(m)})"
        )
    if m.sliding_layers:
        return (
            f"2 × {m.kv_heads} × {m.head_dim} × {m.bytes_per_element} = {m.kv_bytes_per_token_per_layer:,} bytes per "
            f"layer; a sliding layer stops at window - 1 positions, so past the windows a token adds "
            f"{m.full_layers} full layers × that = {m.kv_bytes_per_token_full_layers:,} bytes"
        )
    return f"2 × {m.layers} × {m.kv_heads} × {m.head_dim} × {m.bytes_per_element} = {m.kv_bytes_per_token:,} bytes"


def evidence_kv_growth(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    m = trace.model
    formula = kv_formula(m)
    if not trace.decodes:
        return Evidence(f"The formula for this model: {formula}. Your run had no decode pass to show it.", "modelled")
    steps = {b.kv_cache_bytes - a.kv_cache_bytes for a, b in zip(trace.passes, trace.passes[1:])}
    if len(steps) == 1 and steps <= {m.kv_bytes_per_token, m.kv_bytes_per_token_full_layers}:
        growth = f"by exactly {min(steps):,} bytes at every decode pass"  # past the windows: the full layers' share
    else:
        growth = f"by {', '.join(f'{s:,}' for s in sorted(steps))} bytes per decode pass"
    text = (
        f"Your cache held {trace.prefill.kv_cache_bytes:,} bytes after the prefill ({trace.prompt_len} positions) "
        f"and grew {growth}, to {trace.final_kv_cache_bytes:,} bytes. The formula: {formula}."
    )
    if m.is_gqa:  # said only of a model that shares its KV heads
        text += (
            f" Under grouped-query attention its {m.heads} query heads share {m.kv_heads} KV heads, so the cache "
            f"grows {m.heads // m.kv_heads}× more slowly than the query heads suggest."
        )
    return Evidence(text, "measured (the real cache tensors) · the formula from the model's config")


EVIDENCE: dict[str, Callable[[Trace, AttentionMaps | None], Evidence]] = {
    "decode-mask": evidence_decode_mask,
    "prefill-like-training": evidence_prefill_like_training,
    "bound": evidence_bound,
    "score-shapes": evidence_score_shapes,
    "decode-slow": evidence_decode_slow,
    "decode-cheap": evidence_decode_cheap,
    "prefill-once": evidence_prefill_once,
    "same-model": evidence_same_model,
    "kv-growth": evidence_kv_growth,
}


def evidence(key: str, trace: Trace | None, maps: AttentionMaps | None = None) -> Evidence | None:
    """What the user's own run shows for this question; None without a run."""
    if trace is None:
        return None
    return EVIDENCE[key](trace, maps)
