"""Check yourself: a short quiz on prefill and decode, with the evidence for each answer read from the user's own run.

The questions follow the recall questions, interview Q&A and common misconceptions of seeds 1 and 3, in our own words;
each lists the wrong answer people commonly give among its choices. Evidence is computed from a `Trace` (and its
attention maps when they were captured): measured shapes, bytes and times, and the roofline model's predictions.
Nothing here keeps state: the page holds the answers in the session only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from explorer.core.attention import AttentionMaps
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import human_bytes, human_flops, ms

EXAMPLE_DECODE_PASS = 5  # "your decode pass 5": far enough in that the cache has visibly grown


@dataclass(frozen=True)
class Question:
    key: str
    topic: str
    prompt: str
    choices: tuple[str, ...]
    correct: int  # index into choices
    common_wrong: int | None  # the answer people commonly give; None where the seeds name none
    explanation: str
    origin: str  # which seed section it comes from


@dataclass(frozen=True)
class Verdict:
    correct: bool
    common_wrong: bool  # the chosen answer is the commonly given wrong one
    headline: str


@dataclass(frozen=True)
class Evidence:
    text: str
    source: str  # what kind of number it is: measured, modelled, or both


QUESTIONS: tuple[Question, ...] = (
    Question(
        key="decode-mask",
        topic="The mask in decode",
        prompt="A decode pass computes attention for one new token. Does it need the triangular causal mask?",
        choices=(
            "Yes: every attention call applies the same lower triangle, or the model would see the future.",
            "No: its keys all come from the KV cache, and the cache holds nothing later than the new token.",
            "No: decode skips the softmax, so there is nothing to mask.",
            "Only on the first decode pass, while the prompt is still in the cache.",
        ),
        correct=1,
        common_wrong=0,
        explanation=(
            "A mask hides keys that come after the query. In prefill the whole prompt is in memory, so those later "
            "keys exist and must be hidden. In decode the query is the newest position and the cache holds only "
            "earlier ones: the future has not been generated, so causality holds by construction. Some libraries "
            "still pass a mask to keep one code path; the result does not depend on it."
        ),
        origin="seed 1 · interview Q&A",
    ),
    Question(
        key="prefill-like-training",
        topic="Prefill and training",
        prompt="Why does a prefill pass look more like a training forward pass than a decode pass does?",
        choices=(
            "It runs every prompt position through the model at once, with the causal visibility training uses.",
            "Because prefill attention is bidirectional, like an encoder such as BERT.",
            "Because prefill adjusts the weights slightly for each prompt.",
            "Because prefill runs a separate, larger copy of the model.",
        ),
        correct=0,
        common_wrong=1,
        explanation=(
            "Training scores every position of a sequence in one pass under a causal mask; prefill does the same "
            "with the prompt. Parallel is not the same as bidirectional: an early prompt token still cannot see a "
            "later one. Decode, by contrast, feeds one position per pass."
        ),
        origin="seed 1 · interview Q&A",
    ),
    Question(
        key="bound",
        topic="What limits each phase",
        prompt="Which phase is usually limited by arithmetic, and which by memory traffic?",
        choices=(
            "Prefill by memory traffic, decode by arithmetic.",
            "Both by arithmetic: the model does the same maths in each.",
            "Prefill by arithmetic, decode by memory traffic.",
            "Both by memory traffic: each reads the KV cache.",
        ),
        correct=2,
        common_wrong=None,
        explanation=(
            "It comes down to arithmetic intensity, FLOPs per byte moved. A prefill of T tokens uses each weight it "
            "reads T times, so its intensity grows with the prompt; a decode pass reads every weight to compute a "
            "single token, a couple of FLOPs per weight. Below the device's ridge point (peak FLOP/s divided by "
            "bandwidth) a pass waits on memory."
        ),
        origin="seed 1 · pause and recall",
    ),
    Question(
        key="score-shapes",
        topic="Score shapes",
        prompt=(
            "A prompt has 5 tokens and the model has H query heads. What are the attention score shapes of the "
            "prefill and of the first decode pass (batch of 1)?"
        ),
        choices=(
            "[1, H, 5, 5], then [1, H, 6, 6]",
            "[1, H, 1, 5], then [1, H, 1, 1]",
            "[1, H, 5, 5] both times",
            "[1, H, 5, 5], then [1, H, 1, 6]",
        ),
        correct=3,
        common_wrong=0,  # what recomputing the whole sequence every token would give
        explanation=(
            "Prefill scores every prompt query against every prompt key: T × T. Decode has one query, scored "
            "against every key in the cache. The first decode pass feeds the token the prefill sampled; its own key "
            "and value join the cache before attention, so its row covers 5 + 1 = 6 keys, and each later pass one "
            "more. A square 6 × 6 would mean recomputing the whole sequence, which the cache exists to avoid."
        ),
        origin="seed 1 · pause and recall, apply now",
    ),
    Question(
        key="decode-slow",
        topic="Why decode takes time",
        prompt="A decode pass does very little arithmetic. Why can it still take as long as it does?",
        choices=(
            "It recomputes the whole prompt for every new token.",
            "It reads every weight, plus the growing KV cache, from memory to produce a single token.",
            "Choosing the token from the logits is the slow part.",
            "It runs a larger model than the prefill does.",
        ),
        correct=1,
        common_wrong=0,
        explanation=(
            "With a KV cache nothing is recomputed: one token goes in. But a matrix-vector product touches every "
            "weight for only two FLOPs each, so the pass lasts as long as the bytes take to arrive, and the cache "
            "adds more bytes at every step."
        ),
        origin="seed 1 · interview Q&A",
    ),
    Question(
        key="decode-cheap",
        topic="“Decode is cheap”",
        prompt="Someone says: “decode is cheap, each step does hardly any work.” What is wrong with that?",
        choices=(
            "Nothing: a request's cost is in its prefill.",
            "Decode steps are each more expensive than the whole prefill.",
            "Each step is cheap, but there is one per output token, one after another, so together they often "
            "take most of the request's time.",
            "Decode only costs much when sampling with a temperature.",
        ),
        correct=2,
        common_wrong=0,
        explanation=(
            "Per step the work is small, but the steps cannot run side by side (each needs the token before it) "
            "and each one re-reads the weights. Multiplied by the number of output tokens, decode usually "
            "dominates the end-to-end latency."
        ),
        origin="seed 3 · common misconceptions",
    ),
    Question(
        key="prefill-once",
        topic="“Prefill runs once, so it doesn't matter”",
        prompt="The prefill runs only once per request. Can you ignore it when tuning performance?",
        choices=(
            "No: its work grows with the prompt (attention with its square), and the user waits for it before "
            "the first token appears.",
            "Yes: something that runs once is negligible next to the token loop.",
            "No, because the prefill runs again for every generated token.",
            "Yes, because the prefill happens before the request is timed.",
        ),
        correct=0,
        common_wrong=1,
        explanation=(
            "The matmul FLOPs of a prefill grow in step with the prompt and its attention scores with the prompt's "
            "square, so a long prompt makes it the largest pass by far. It sets the time to first token, and with "
            "long prompts or big batches it can take most of the compute."
        ),
        origin="seed 3 · common misconceptions",
    ),
    Question(
        key="same-model",
        topic="“Two different models”",
        prompt="Are prefill and decode run by two different models, or two sets of weights?",
        choices=(
            "Yes: a prefill model reads the prompt and a decode model writes the answer.",
            "No, but decode uses a compressed copy of the weights.",
            "Yes, but they share the embedding layer.",
            "No: the same weights run both; what differs is the input (many tokens or one) and the KV cache.",
        ),
        correct=3,
        common_wrong=0,
        explanation=(
            "Both phases call the same forward function of the same network. Prefill hands it the whole prompt "
            "and an empty cache; decode hands it one token and a filled cache. That difference in input is what "
            "changes the cost."
        ),
        origin="seed 3 · common misconceptions",
    ),
    Question(
        key="kv-growth",
        topic="How the cache grows",
        prompt="By how much does the KV cache grow when one more token is generated?",
        choices=(
            "Not at all: its size is fixed by the prompt.",
            "By one position's K and V in every layer: 2 × layers × KV heads × head dim × bytes per value.",
            "By the whole prompt's K and V again.",
            "By one position's Q, K and V in every layer.",
        ),
        correct=1,
        common_wrong=None,
        explanation=(
            "Each new token appends its key and value vectors, in every layer and every KV head, and nothing else: "
            "a query is used once and dropped."
        ),
        origin="seed 3 · KV cache update",
    ),
)


def question(key: str) -> Question:
    return next(q for q in QUESTIONS if q.key == key)


def grade(q: Question, choice: int) -> Verdict:
    if not 0 <= choice < len(q.choices):
        raise ValueError(f"choice {choice} is not one of the {len(q.choices)} answers")
    if choice == q.correct:
        return Verdict(True, False, "Right.")
    if choice == q.common_wrong:
        return Verdict(False, True, "That is the answer people most often give, and it is wrong.")
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
        text += f" Your decode pass {p.index}: {p.cost.arithmetic_intensity:.2f} FLOP/byte, {p.cost.bound}-bound."
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


def evidence_decode_slow(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    p = example_decode(trace)
    if p is None:
        return no_decode()
    c = p.cost
    text = (
        f"Your decode pass {p.index} computed {p.tokens_in} token, yet read {human_bytes(c.weight_bytes_read)} of "
        f"weights and moved {human_bytes(c.kv_bytes_moved)} of KV cache for {human_flops(c.flops)}. The roofline "
        f"model gives {ms(c.t_memory_s)} for the memory traffic and {ms(c.t_compute_s)} for the maths; the pass "
        f"took {ms(p.wall_s)}."
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


def evidence_kv_growth(trace: Trace, maps: AttentionMaps | None) -> Evidence:
    m = trace.model
    formula = f"2 × {m.layers} × {m.kv_heads} × {m.head_dim} × {m.bytes_per_element} = {m.kv_bytes_per_token:,} bytes"
    if not trace.decodes:
        return Evidence(f"The formula for this model: {formula}. Your run had no decode pass to show it.", "modelled")
    steps = {b.kv_cache_bytes - a.kv_cache_bytes for a, b in zip(trace.passes, trace.passes[1:])}
    if steps == {m.kv_bytes_per_token}:
        growth = f"by exactly {m.kv_bytes_per_token:,} bytes at every decode pass"
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
