"""A tiny attention head worked by hand: one query row's dot products, √d scaling, causal mask, softmax and the
weighted sum of the values.

The default vectors are a textbook-sized example (d = 2, three prompt tokens). The prefill row is query q1 against the
prompt's keys k0..k2, where k2 is in q1's future and masked. The decode row is the next token's query q3 against the
SAME k0..k2 (the cache keeps the prefill's keys and values; it does not recompute them) plus its own k3, which the
decode pass appends to the cache before it attends; its output weighs v0..v2 from the cache and its own v3. Everything
here is plain numpy on a handful of numbers, so the page can recompute it on every edit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from explorer.core.trace import ModelInfo

D = 2  # the example's head dimension
# On paper one writes each exponential to two decimals and divides by their sum: that is how a worked example gets its
# probabilities. Full precision differs in the third decimal (0.1956 vs the printed 0.195), so both are shown.
WRITTEN_EXP_DECIMALS = 2
SHOWN_DECIMALS = 3
VECTOR_LIMIT = 10.0  # the editor's bound on each component: keeps e^score far from float64 overflow

Vector = tuple[float, ...]


@dataclass(frozen=True)
class RowInputs:
    """One query against its keys and their values; `masked` marks keys in the query's future (hidden by the causal
    mask)."""

    phase: str  # "prefill" | "decode"
    query_name: str
    query: Vector
    key_names: tuple[str, ...]
    keys: tuple[Vector, ...]
    masked: tuple[bool, ...]
    value_names: tuple[str, ...] = ()  # one value per key (empty: the row stops at the probabilities)
    values: tuple[Vector, ...] = ()

    @property
    def vector_names(self) -> tuple[str, ...]:
        return (self.query_name, *self.key_names, *self.value_names)

    @property
    def vectors(self) -> tuple[Vector, ...]:
        return (self.query, *self.keys, *self.values)

    def with_vectors(self, vectors: tuple[Vector, ...]) -> RowInputs:
        """The same row with the query, keys and values replaced, in `vector_names` order."""
        if len(vectors) != len(self.vector_names):
            raise ValueError(
                f"expected {len(self.vector_names)} vectors ({', '.join(self.vector_names)}), not {len(vectors)}"
            )
        n = len(self.keys)
        return replace(self, query=vectors[0], keys=tuple(vectors[1 : 1 + n]), values=tuple(vectors[1 + n :]))

    def with_mask(self, on: bool) -> RowInputs:
        """Switching the mask off keeps the future key visible: the leak a causal mask exists to stop."""
        return self if on else replace(self, masked=tuple(False for _ in self.keys))


# The worked example: three prompt tokens, d = 2. The prefill scores q1 against all three keys (k2 masked).
PROMPT_KEY_NAMES = ("k0", "k1", "k2")
PROMPT_VALUE_NAMES = ("v0", "v1", "v2")
PREFILL_KEYS = ((1.0, 0.0), (2.0, 0.0), (3.0, 0.0))
PREFILL_VALUES = ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))
K2_MASKED = (False, False, True)  # prefill: q1 sits at position 1, so k2 (position 2) is its future
EXAMPLE_PREFILL = RowInputs(
    phase="prefill",
    query_name="q1",
    query=(2.0, 0.0),
    key_names=PROMPT_KEY_NAMES,
    keys=PREFILL_KEYS,
    masked=K2_MASKED,
    value_names=PROMPT_VALUE_NAMES,
    values=PREFILL_VALUES,
)
# What the decode pass brings of its own: the new token's query, key and value. Its keys and values from the prompt are
# the cache's, i.e. the prefill's (`decode_inputs`).
EXAMPLE_NEW_TOKEN = RowInputs(
    phase="decode",
    query_name="q3",
    query=(1.0, 1.0),
    key_names=("k3",),
    keys=((0.0, 2.0),),
    masked=(False,),
    value_names=("v3",),
    values=((2.0, 0.0),),
)
EXAMPLE_PREFILL_PROBS = (0.195, 0.805, 0.000)  # the worked example's printed row: q1 = (2, 0) against k0..k2
EXAMPLE_DECODE_PROBS = (0.109, 0.221, 0.449, 0.221)  # q3 against the cached k0..k2 and its own k3, by hand


def decode_inputs(prefill: RowInputs, new_token: RowInputs) -> RowInputs:
    """The decode row: the new query against the cache, which holds the prefill's own keys and values (not new ones:
    that is what a cache is), with the new token's key and value appended before it attends. Nothing is masked: no
    key in the cache is after the query."""
    keys = (*prefill.keys, *new_token.keys)
    return replace(
        new_token,
        key_names=(*prefill.key_names, *new_token.key_names),
        keys=keys,
        masked=tuple(False for _ in keys),
        value_names=(*prefill.value_names, *new_token.value_names),
        values=(*prefill.values, *new_token.values),
    )


EXAMPLE_DECODE = decode_inputs(EXAMPLE_PREFILL, EXAMPLE_NEW_TOKEN)


@dataclass(frozen=True)
class WorkedRow:
    """Every intermediate of softmax(q·kᵀ / √d + mask) for one query row."""

    inputs: RowInputs
    raw_scores: tuple[float, ...]  # q · k
    scale: float  # √d
    scaled: tuple[float, ...]  # (q · k) / √d
    logits: tuple[float, ...]  # scaled, with -inf where masked
    exps: tuple[float, ...]  # e^logit: exactly 0 where masked
    probs: tuple[float, ...]  # the exact softmax
    written_exps: tuple[float, ...]  # exps rounded as on paper
    written_probs: tuple[float, ...]  # written_exps / their sum: the route on paper
    output: tuple[float, ...] = ()  # Σ probability x value (exact): what the head passes on; () without values

    @property
    def d(self) -> int:
        return len(self.inputs.query)

    @property
    def written_exp_sum(self) -> float:
        return round(float(sum(self.written_exps)), WRITTEN_EXP_DECIMALS)

    @property
    def shown_probs(self) -> tuple[float, ...]:
        """The by-hand probabilities to the shown decimals: the printed row for the example's vectors."""
        return tuple(round(p, SHOWN_DECIMALS) for p in self.written_probs)


def work_row(inputs: RowInputs) -> WorkedRow:
    """The arithmetic of one attention row, step by step, in float64."""
    q = np.asarray(inputs.query, dtype=np.float64)  # (d,)
    k = np.asarray(inputs.keys, dtype=np.float64)  # (keys, d)
    masked = np.asarray(inputs.masked, dtype=bool)  # (keys,)
    if k.ndim != 2 or k.shape[1] != q.shape[0]:
        raise ValueError(f"every key needs {q.shape[0]} components, like the query")
    if masked.shape != (k.shape[0],):
        raise ValueError("one mask flag per key")
    if masked.all():
        raise ValueError("every key is masked: a query can always see at least itself")
    raw = k @ q  # (keys,)
    scale = math.sqrt(q.shape[0])
    scaled = raw / scale
    logits = np.where(masked, -np.inf, scaled)
    exps = np.exp(logits)  # e^-inf = 0: a masked key gets exactly no weight
    # Subtracting the largest logit first gives the same softmax without overflow for large edited vectors.
    shifted = np.exp(logits - logits[~masked].max())
    probs = shifted / shifted.sum()
    written = np.round(exps, WRITTEN_EXP_DECIMALS)
    written_probs = written / written.sum() if written.sum() > 0 else probs
    if inputs.values and len(inputs.values) != len(inputs.keys):
        raise ValueError("one value per key")
    output = probs @ np.asarray(inputs.values, dtype=np.float64) if inputs.values else np.zeros(0)  # (d,)
    return WorkedRow(
        inputs=inputs,
        raw_scores=tuple(raw.tolist()),
        scale=scale,
        scaled=tuple(scaled.tolist()),
        logits=tuple(logits.tolist()),
        exps=tuple(exps.tolist()),
        probs=tuple(probs.tolist()),
        written_exps=tuple(written.tolist()),
        written_probs=tuple(written_probs.tolist()),
        output=tuple(output.tolist()),
    )


# --- formatting the arithmetic ------------------------------------------------------------------------------------
def number(x: float, decimals: int = SHOWN_DECIMALS) -> str:
    """'2' for whole numbers, '1.414' otherwise, '−∞' for a masked logit."""
    if math.isinf(x):
        return "−∞" if x < 0 else "∞"
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.{decimals}f}".rstrip("0").rstrip(".")


def vector_text(v: Vector) -> str:
    return "[" + ", ".join(number(x) for x in v) + "]"


def row_text(values: tuple[float, ...], decimals: int = SHOWN_DECIMALS) -> str:
    """A probability row with a fixed number of decimals: '[0.195, 0.805, 0.000]'."""
    return "[" + ", ".join(f"{v:.{decimals}f}" for v in values) + "]"


def dot_text(q: Vector, k: Vector) -> str:
    """'2×1 + 0×0 = 2'."""
    terms = " + ".join(f"{number(a)}×{number(b)}" for a, b in zip(q, k))
    return f"{terms} = {number(float(np.dot(q, k)))}"


# --- what changed ---------------------------------------------------------------------------------------------------
def changes(prefill: RowInputs, new_token: RowInputs, mask_on: bool) -> list[str]:
    """What differs from the worked example, and what it did to the rows; empty when nothing does."""
    lines = []
    for edited, example in ((prefill, EXAMPLE_PREFILL), (new_token, EXAMPLE_NEW_TOKEN)):
        for name, now, was in zip(edited.vector_names, edited.vectors, example.vectors):
            if tuple(map(float, now)) != was:
                lines.append(f"{example.phase}: {name} is {vector_text(now)} (example: {vector_text(was)})")
    if not mask_on:
        lines.append("prefill: the causal mask is off")
    if not lines:
        return []
    new_prefill = work_row(prefill.with_mask(mask_on))
    new_decode = work_row(decode_inputs(prefill, new_token))
    if new_prefill.shown_probs != EXAMPLE_PREFILL_PROBS:
        lines.append(
            f"→ prefill row {row_text(new_prefill.shown_probs)} instead of the example's "
            f"{row_text(EXAMPLE_PREFILL_PROBS)}"
        )
    if new_decode.shown_probs != EXAMPLE_DECODE_PROBS:
        lines.append(
            f"→ decode row {row_text(new_decode.shown_probs)} instead of the example's {row_text(EXAMPLE_DECODE_PROBS)}"
        )
    if not mask_on:
        future = [n for n, m in zip(prefill.key_names, prefill.masked) if m]
        leak = sum(p for p, m in zip(new_prefill.probs, prefill.masked) if m)
        lines.append(
            f"→ without the mask {prefill.query_name} puts {leak:.3f} of its attention on "
            f"{', '.join(future)}, a token after it: the leak the mask exists to stop"
        )
    return lines


# --- the same shapes in the real model ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ShapeLink:
    """One quantity of the toy head beside the same quantity in the run's model."""

    quantity: str
    toy: str
    real: str
    note: str


def shape(*dims: int | str) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def shape_links(
    model: ModelInfo, prompt_len: int, decode_cache_len: int | None, decode_pass: int | None
) -> list[ShapeLink]:
    """The toy's sizes beside this model's for one prefill of `prompt_len` tokens and one decode pass (batch 1).

    A decode pass appends the fed token's own K and V before attending, so its row covers `decode_cache_len` = the
    cache length after the pass, as the toy's q3 row covers the cached k0..k2 and its own k3.
    """
    H, Hkv, d, T = model.heads, model.kv_heads, model.head_dim, prompt_len
    group = H // max(1, Hkv)
    toy_T = len(EXAMPLE_PREFILL.keys)
    links = [
        ShapeLink("head dimension d", str(D), str(d), "components of each query and key vector"),
        ShapeLink("scale √d", number(math.sqrt(D)), number(math.sqrt(d)), "scores are divided by it before softmax"),
        ShapeLink(
            "query heads (KV heads)",
            "1 (1)",
            f"{H} ({Hkv})",
            f"{group} query heads share each KV head" if model.is_gqa else "one KV head per query head",
        ),
        ShapeLink("layers", "1", str(model.layers), "the same arithmetic runs in every layer"),
        ShapeLink("prefill Q", shape(1, 1, toy_T, D), shape(1, H, T, d), "every prompt token's query at once"),
        ShapeLink("prefill scores", shape(1, 1, toy_T, toy_T), shape(1, H, T, T), "the toy works out row 1 (q1)"),
        ShapeLink(
            "masked cells per head (prefill)",
            str(toy_T * (toy_T - 1) // 2),
            f"{T * (T - 1) // 2:,}",
            "the upper triangle: keys after the query",
        ),
    ]
    if decode_cache_len is None:
        links.append(ShapeLink("decode scores", shape(1, 1, 1, toy_T + 1), "no decode pass", "the run made one token"))
        return links
    C = decode_cache_len
    which = f"pass {decode_pass}" if decode_pass is not None else "a decode pass"
    links += [
        ShapeLink("decode Q", shape(1, 1, 1, D), shape(1, H, 1, d), f"{which}: one query, the token fed in"),
        ShapeLink(
            "decode scores",
            shape(1, 1, 1, toy_T + 1),
            shape(1, H, 1, C),
            "one row over the cache, which already holds the fed token's own key",
        ),
        ShapeLink("masked cells (decode)", "0", "0", "the cache holds only the past"),
    ]
    return links
