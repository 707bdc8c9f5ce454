"""Seed 1's tiny attention head worked by hand: one query row's dot products, √d scaling, causal mask and softmax.

The default vectors are the seed's (d = 2, three keys). The prefill row is query q1 against keys k0..k2 where k2 is
in q1's future and masked; the decode row is the new query q3 against three cached keys, none of them in the future.
Everything here is plain numpy on a handful of numbers, so the page can recompute it on every edit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from explorer.core.trace import ModelInfo

D = 2  # the seed's head dimension
# On paper one writes each exponential to two decimals and divides by their sum: that is how the seed gets its
# probabilities. Full precision differs in the third decimal (0.1956 vs the seed's 0.195), so both are shown.
WRITTEN_EXP_DECIMALS = 2
SHOWN_DECIMALS = 3
VECTOR_LIMIT = 10.0  # the editor's bound on each component: keeps e^score far from float64 overflow

Vector = tuple[float, ...]


@dataclass(frozen=True)
class RowInputs:
    """One query against its keys; `masked` marks keys in the query's future (hidden by the causal mask)."""

    phase: str  # "prefill" | "decode"
    query_name: str
    query: Vector
    key_names: tuple[str, ...]
    keys: tuple[Vector, ...]
    masked: tuple[bool, ...]

    @property
    def vector_names(self) -> tuple[str, ...]:
        return (self.query_name, *self.key_names)

    @property
    def vectors(self) -> tuple[Vector, ...]:
        return (self.query, *self.keys)

    def with_vectors(self, vectors: tuple[Vector, ...]) -> RowInputs:
        """The same row with the query and keys replaced, in `vector_names` order."""
        if len(vectors) != 1 + len(self.keys):
            raise ValueError(
                f"expected {1 + len(self.keys)} vectors ({', '.join(self.vector_names)}), not {len(vectors)}"
            )
        return replace(self, query=vectors[0], keys=tuple(vectors[1:]))

    def with_mask(self, on: bool) -> RowInputs:
        """Switching the mask off keeps the future key visible: the leak a causal mask exists to stop."""
        return self if on else replace(self, masked=tuple(False for _ in self.keys))


# Seed 1, section 4: "One worked example and the systems lesson". Both rows score a query against three keys.
SEED_KEY_NAMES = ("k0", "k1", "k2")
PREFILL_KEYS = ((1.0, 0.0), (2.0, 0.0), (3.0, 0.0))
DECODE_KEYS = ((1.0, 0.0), (1.0, 1.0), (0.0, 2.0))
K2_MASKED = (False, False, True)  # prefill: q1 sits at position 1, so k2 (position 2) is its future
NONE_MASKED = (False, False, False)  # decode: the cache holds only the past, so nothing is hidden
SEED_PREFILL = RowInputs(
    phase="prefill", query_name="q1", query=(2.0, 0.0), key_names=SEED_KEY_NAMES, keys=PREFILL_KEYS, masked=K2_MASKED
)
SEED_DECODE = RowInputs(
    phase="decode", query_name="q3", query=(2.0, 1.0), key_names=SEED_KEY_NAMES, keys=DECODE_KEYS, masked=NONE_MASKED
)
SEED_PREFILL_PROBS = (0.195, 0.805, 0.000)  # the seed's printed rows
SEED_DECODE_PROBS = (0.248, 0.504, 0.248)


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
    written_probs: tuple[float, ...]  # written_exps / their sum: the seed's route

    @property
    def d(self) -> int:
        return len(self.inputs.query)

    @property
    def written_exp_sum(self) -> float:
        return round(float(sum(self.written_exps)), WRITTEN_EXP_DECIMALS)

    @property
    def shown_probs(self) -> tuple[float, ...]:
        """The by-hand probabilities to the shown decimals: the seed's row for its vectors."""
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
def changes(prefill: RowInputs, decode: RowInputs, mask_on: bool) -> list[str]:
    """What differs from the seed's example, and what it did to the rows; empty when nothing does."""
    lines = []
    for edited, seed in ((prefill, SEED_PREFILL), (decode, SEED_DECODE)):
        for name, now, was in zip(edited.vector_names, edited.vectors, seed.vectors):
            if tuple(map(float, now)) != was:
                lines.append(f"{seed.phase}: {name} is {vector_text(now)} (seed: {vector_text(was)})")
    if not mask_on:
        lines.append("prefill: the causal mask is off")
    if not lines:
        return []
    new_prefill = work_row(prefill.with_mask(mask_on))
    new_decode = work_row(decode)
    if new_prefill.shown_probs != SEED_PREFILL_PROBS:
        lines.append(
            f"→ prefill row {row_text(new_prefill.shown_probs)} instead of the seed's {row_text(SEED_PREFILL_PROBS)}"
        )
    if new_decode.shown_probs != SEED_DECODE_PROBS:
        lines.append(
            f"→ decode row {row_text(new_decode.shown_probs)} instead of the seed's {row_text(SEED_DECODE_PROBS)}"
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

    A real decode pass appends the fed token's own K and V before attending, so its row covers `decode_cache_len`
    = the cache length after the pass; the seed's q3 row covers its three cached keys only.
    """
    H, Hkv, d, T = model.heads, model.kv_heads, model.head_dim, prompt_len
    group = H // max(1, Hkv)
    toy_T = len(SEED_PREFILL.keys)
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
        links.append(ShapeLink("decode scores", shape(1, 1, 1, toy_T), "no decode pass", "the run made one token"))
        return links
    C = decode_cache_len
    which = f"pass {decode_pass}" if decode_pass is not None else "a decode pass"
    links += [
        ShapeLink("decode Q", shape(1, 1, 1, D), shape(1, H, 1, d), f"{which}: one query, the token fed in"),
        ShapeLink(
            "decode scores",
            shape(1, 1, 1, toy_T),
            shape(1, H, 1, C),
            "one row over the cache; the real row includes the fed token's own key",
        ),
        ShapeLink("masked cells (decode)", "0", "0", "the cache holds only the past"),
    ]
    return links
