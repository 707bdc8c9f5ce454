"""The quiz's question bank, in our own words after teaching notes on prefill and decode: each question's choices, its
right answer, the common wrong answer where the notes name one (None elsewhere: no answer is called common without a
source), the general rule it teaches, and what kind of question it is. Grading and the evidence from a run are in
`explorer.teach.quiz`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    key: str
    topic: str
    prompt: str
    choices: tuple[str, ...]
    correct: int  # index into choices
    common_wrong: int | None  # the answer people commonly give; None where no source names one
    explanation: str
    origin: str  # the kind of question, in plain words ("interview Q&A on LLM inference")


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
        origin="interview Q&A on LLM inference",
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
        origin="interview Q&A on LLM inference",
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
        origin="a recall question",
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
        common_wrong=None,  # no source names a common wrong answer here (choice 0 is what recomputing would give)
        explanation=(
            "Prefill scores every prompt query against every prompt key: T × T. Decode has one query, scored "
            "against every key in the cache. The first decode pass feeds the token the prefill sampled; its own key "
            "and value join the cache before attention, so its row covers 5 + 1 = 6 keys, and each later pass one "
            "more. A square 6 × 6 would mean recomputing the whole sequence, which the cache exists to avoid."
        ),
        origin="a recall question, applied",
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
            "weight for only two FLOPs each, so in general (the roofline model) the least a pass can take is the time "
            "its bytes take to arrive, and the cache adds more bytes at every step. That is a floor, not the "
            "measured time: your run below says how far above it its passes sat."
        ),
        origin="interview Q&A on LLM inference",
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
            "and each one re-reads the weights. In general, multiplied by the number of output tokens, decode "
            "dominates the end-to-end latency unless the prompt is long and the output short: your run below says "
            "which it was."
        ),
        origin="common misconceptions about prefill and decode",
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
        origin="common misconceptions about prefill and decode",
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
        origin="common misconceptions about prefill and decode",
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
        origin="how the KV cache is updated",
    ),
)
