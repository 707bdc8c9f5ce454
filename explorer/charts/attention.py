"""The Attention page: the prefill map under its causal mask, the decode rows over the cache, and all heads at a glance.

Every builder reads a captured `AttentionMaps` only (never the model) and keeps its chart under `MAX_CELLS` rectangles:
long prompts are shown through a window of positions or max-pooled into blocks, and the frame says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt
import numpy as np
import pandas as pd

from explorer.charts.common import position_label
from explorer.core.attention_maps import AttentionMaps
from explorer.core.trace import ModelInfo

MAX_CELLS = 10_000  # rectangles per chart: more than this makes the browser stutter
WINDOW_POSITIONS = 96  # a full-resolution prefill window is at most 96 x 96 = 9,216 cells
POOLED_SIDE = 64  # the whole-prompt view: at most 64 x 64 blocks
HEAD_OVERVIEW_SIDE = 32  # each small multiple: at most 32 x 32 blocks (9 heads x 1,024 = 9,216 cells)
HEAD_OVERVIEW_MIN_SIDE = 8  # with very many heads, coarser blocks rather than an unreadable map
DECODE_MAX_STEPS = 96  # decode rows shown at once

MASKED = "masked (p = 0)"
ATTENDED = "attended"
MASKED_COLOR = "#d9d9d9"  # light grey: distinct from the darkest (smallest) probability colour
# Square-root colour scale: real heads put most mass on a few keys, so a linear scale would hide everything else.
PROB_SCALE = alt.Scale(type="sqrt", domain=[0.0, 1.0], scheme="viridis")
PROB_LEGEND = alt.Legend(values=[0.0, 0.05, 0.2, 0.5, 1.0], format=".2~f")


@dataclass(frozen=True)
class MaskFacts:
    """Checks on one layer's prefill maps, all heads together (measured on the captured float16 probabilities)."""

    masked_cells: int  # cells with key position > query position, all heads
    max_masked_prob: float  # the largest probability among them: exactly 0 under a causal mask
    max_row_sum_error: float  # max |sum of a row - 1|: float16 rounding only


def mask_facts(maps: AttentionMaps, layer: int) -> MaskFacts:
    probs = maps.prefill[layer].astype(np.float32)  # (H, T, T)
    heads, T, _ = probs.shape
    upper = np.triu(np.ones((T, T), dtype=bool), k=1)  # key > query: the future
    return MaskFacts(
        masked_cells=int(upper.sum()) * heads,
        max_masked_prob=float(probs[:, upper].max()) if upper.any() else 0.0,
        max_row_sum_error=float(np.abs(probs.sum(-1) - 1.0).max()),
    )


SINK_SOURCE = (
    "Xiao et al. 2023, Efficient Streaming Language Models with Attention Sinks: https://arxiv.org/abs/2309.17453"
)


def first_token_share(maps: AttentionMaps, layer: int, head: int) -> tuple[float, float]:
    """(measured, even) mean share of attention the prefill's queries after the first put on the first token: as
    captured, and as it would be if each query spread its attention evenly over the keys it may see (1 / (q + 1))."""
    probs = maps.prefill[layer][head].astype(np.float32)  # (T, T)
    T = probs.shape[0]
    if T < 2:
        return float(probs[0, 0]), 1.0
    queries = np.arange(1, T)
    return float(probs[1:, 0].mean()), float((1.0 / (queries + 1)).mean())


def sink_sentence(maps: AttentionMaps, layer: int, head: int, measured_word: str = "measured") -> str:
    """One sentence on the first-token column (an attention sink), with this head's measured share."""
    share, even = first_token_share(maps, layer, head)
    measured = (
        f"in layer {layer}, head {head} the queries put {share:.0%} of their attention on it ({even:.0%} if spread "
        f"evenly; {measured_word})"
    )
    if share > 2 * even:
        return (
            f"The bright first column is an attention sink: many heads park the attention they do not need on the "
            f"first token, whatever it says; {measured} ({SINK_SOURCE})."
        )
    return (
        f"The first column is where many heads park attention they do not need (an attention sink, {SINK_SOURCE}); "
        f"this one does not lean on it: {measured}."
    )


def window_bounds(total: int, start: int, size: int = WINDOW_POSITIONS) -> tuple[int, int]:
    """[start, stop) of a window of at most `size` positions, clamped so it always lies inside 0..total."""
    size = min(size, total)
    start = max(0, min(start, total - size))
    return start, start + size


def block_size(positions: int, max_side: int) -> int:
    """Positions per pooled block so that `positions` fit in at most `max_side` blocks."""
    return max(1, math.ceil(positions / max_side))


def max_pool(probs: np.ndarray, block: int) -> np.ndarray:
    """Max over block x block tiles of the last two axes (zero padding: probabilities are >= 0, so it never wins)."""
    *lead, rows, cols = probs.shape
    n_rows, n_cols = math.ceil(rows / block), math.ceil(cols / block)
    padded = np.zeros((*lead, n_rows * block, n_cols * block), dtype=np.float32)
    padded[..., :rows, :cols] = probs
    return padded.reshape(*lead, n_rows, block, n_cols, block).max(axis=(-3, -1))


# --- the prefill map at full resolution ----------------------------------------------------------------------------
def prefill_frame(maps: AttentionMaps, layer: int, head: int, start: int = 0, stop: int | None = None) -> pd.DataFrame:
    """Query rows and key columns [start, stop) of one head's prefill map: the diagonal block that holds the mask edge.

    One row per cell; `masked` marks key > query, whose probability is exactly 0 in the captured data.
    """
    T = maps.prompt_len
    stop = T if stop is None else min(stop, T)
    positions = np.arange(start, stop)
    query_pos, key_pos = (a.ravel() for a in np.meshgrid(positions, positions, indexing="ij"))
    labels = [position_label(i, maps.tokens_text[i]) for i in range(start, stop)]
    masked = key_pos > query_pos
    return pd.DataFrame(
        {
            "query_pos": query_pos,
            "key_pos": key_pos,
            "query": [labels[i - start] for i in query_pos],
            "key": [labels[i - start] for i in key_pos],
            "prob": maps.prefill[layer][head, start:stop, start:stop].astype(np.float32).ravel(),
            "masked": masked,
            "cell": np.where(masked, MASKED, ATTENDED),
        }
    )


def _heatmap_height_px(rows: int) -> int:
    return int(min(900, max(220, 16 * rows)))


def prefill_chart(frame: pd.DataFrame, height_px: int | None = None, compact: bool = False) -> alt.LayerChart:
    """Rows are queries, columns keys, both labelled with their tokens; the grey upper triangle is the causal mask.
    `height_px` fixes the height (presenter mode's first screen) instead of one that grows with the rows. `compact`
    (half a projected screen): no legends and short axis titles, so the map itself gets the width; the caption beside
    it says what the colours mean."""
    order = frame.drop_duplicates("query_pos").sort_values("query_pos")["query"].tolist()
    # Labels that would overlap are dropped by Vega-Lite (tooltips still name each cell): how many fit depends on the
    # rows, the height and the theme's type size (18 px when presenting), so the drawing decides, not a row count.
    axis = {
        "labelLimit": 60 if compact else 90,
        "labelOverlap": "parity",
    }  # parity: every other label, until none overlap
    key_title, query_title = (
        ("key", "query") if compact else ("key position (what is attended to)", "query position (who attends)")
    )
    base = alt.Chart(frame).encode(
        x=alt.X("key:N", sort=order, title=key_title, axis=alt.Axis(labelAngle=-90, **axis)),
        y=alt.Y("query:N", sort=order, title=query_title, axis=alt.Axis(**axis)),
        tooltip=["query", "key", alt.Tooltip("prob:Q", format=".4f", title="probability"), "cell"],
    )
    prob_legend = None if compact else PROB_LEGEND
    attended = (
        base.transform_filter("!datum.masked")
        .mark_rect()
        .encode(color=alt.Color("prob:Q", scale=PROB_SCALE, title="probability (√ scale)", legend=prob_legend))
    )
    masked_scale = alt.Scale(domain=[MASKED], range=[MASKED_COLOR])
    masked = (
        base.transform_filter("datum.masked")
        .mark_rect()
        .encode(color=alt.Color("cell:N", scale=masked_scale, title=None, legend=None if compact else alt.Legend()))
    )
    height_px = height_px or _heatmap_height_px(len(order))
    return alt.layer(attended, masked).resolve_scale(color="independent").properties(height=height_px)


# --- max-pooled views ----------------------------------------------------------------------------------------------
def pooled_frame(maps: AttentionMaps, layer: int, heads: list[int], max_side: int, kv_heads: int) -> pd.DataFrame:
    """The whole prompt's map of each head, max-pooled into at most max_side x max_side blocks.

    A block is `masked` only when every cell in it is in the future (its first key is after its last query).
    `kv_head` is the key/value head a query head reads under grouped-query attention.
    """
    T = maps.prompt_len
    block = block_size(T, max_side)
    pooled = max_pool(maps.prefill[layer][heads].astype(np.float32), block)  # (len(heads), n, n)
    n = pooled.shape[-1]
    q_block, k_block = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    query_start, key_start = q_block * block, k_block * block
    query_stop, key_stop = np.minimum(query_start + block, T), np.minimum(key_start + block, T)
    group = max(1, maps.heads // max(1, kv_heads))  # query heads per KV head
    frames = [
        pd.DataFrame(
            {
                "head": head,
                "kv_head": head // group,
                "head_label": f"head {head} (KV head {head // group})" if group > 1 else f"head {head}",
                "block": block,
                "query_start": query_start,
                "query_stop": query_stop,
                "key_start": key_start,
                "key_stop": key_stop,
                "prob_max": pooled[i].ravel(),
                "masked": key_start > query_stop - 1,
            }
        )
        for i, head in enumerate(heads)
    ]
    return pd.concat(frames, ignore_index=True)


def _pooled_encoding(frame: pd.DataFrame) -> dict[str, object]:
    T = int(frame["key_stop"].max())
    pooled = int(frame["block"].max()) > 1  # an unpooled map's cells are probabilities, not a block's maximum
    legend_title = "block max (√ scale)" if pooled else "probability (√ scale)"
    return {
        "x": alt.X("key_start:Q", title="key position", scale=alt.Scale(domain=[0, T], nice=False)),
        "x2": "key_stop:Q",
        "y": alt.Y("query_start:Q", title="query position", scale=alt.Scale(domain=[0, T], nice=False, reverse=True)),
        "y2": "query_stop:Q",
        "color": alt.when(alt.datum.masked)
        .then(alt.value(MASKED_COLOR))
        .otherwise(alt.Color("prob_max:Q", scale=PROB_SCALE, title=legend_title, legend=PROB_LEGEND)),
        "tooltip": [
            "head_label",
            alt.Tooltip("query_start:Q", title="queries from"),
            alt.Tooltip("query_stop:Q", title="queries to (excl.)"),
            alt.Tooltip("key_start:Q", title="keys from"),
            alt.Tooltip("key_stop:Q", title="keys to (excl.)"),
            alt.Tooltip("prob_max:Q", format=".4f", title="max probability"),
            "masked",
        ],
    }


def pooled_chart(frame: pd.DataFrame) -> alt.Chart:
    """One head's whole prompt, one rectangle per pooled block; grey blocks lie entirely in the masked future."""
    return alt.Chart(frame).mark_rect().encode(**_pooled_encoding(frame)).properties(height=480)


def head_overview_side(heads: int, max_cells: int = MAX_CELLS) -> int:
    """Blocks per side of each head's small map so that all heads together stay under max_cells rectangles."""
    fits = math.isqrt(max_cells // max(1, heads))
    return max(HEAD_OVERVIEW_MIN_SIDE, min(HEAD_OVERVIEW_SIDE, fits))


def heads_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Small multiples: every head of one layer side by side, heads sharing a KV head next to each other."""
    heads = frame.drop_duplicates("head").sort_values("head")["head_label"].tolist()
    columns = max(1, math.ceil(math.sqrt(len(heads))))
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(**_pooled_encoding(frame))
        .properties(width=170, height=170)
        .facet(facet=alt.Facet("head_label:N", sort=heads, title=None), columns=columns)
    )


# --- the decode rows -----------------------------------------------------------------------------------------------
def decode_key_bin(cache_lens: list[int], max_cells: int = MAX_CELLS) -> int:
    """Smallest number of keys per cell that keeps the decode rows (one per cache length) under max_cells."""
    total = sum(cache_lens)
    key_bin = max(1, math.ceil(total / max_cells))
    while sum(math.ceil(c / key_bin) for c in cache_lens) > max_cells:
        key_bin += 1
    return key_bin


def decode_cache_lens(maps: AttentionMaps, layer: int) -> list[int]:
    return [int(row.shape[-1]) for row in maps.decode[layer]]


def decode_frame(
    maps: AttentionMaps, layer: int, head: int, step_start: int = 0, step_stop: int | None = None, key_bin: int = 1
) -> pd.DataFrame:
    """One row per decode step, one cell per cached key (or per `key_bin` keys, max-pooled): a growing staircase.

    Step k feeds the token at position cache_len - 1 and attends over keys 0..cache_len-1: every key is in the past
    (or is the fed token itself), so there is nothing to mask.
    """
    rows = maps.decode[layer]
    step_stop = len(rows) if step_stop is None else min(step_stop, len(rows))
    frames = []
    for step in range(step_start, step_stop):
        probs = rows[step][head].astype(np.float32)  # (cache_len,)
        cache_len = probs.shape[0]
        fed = cache_len - 1  # the token this pass computes; its own K and V were just appended
        pooled = max_pool(probs[None, :], key_bin)[0] if key_bin > 1 else probs  # (ceil(cache_len / key_bin),)
        key_start = np.arange(pooled.shape[0]) * key_bin
        key_stop = np.minimum(key_start + key_bin, cache_len)
        if key_bin == 1:
            keys = [position_label(i, maps.tokens_text[i]) for i in range(cache_len)]
        else:
            keys = [f"{a}–{b - 1}" for a, b in zip(key_start, key_stop)]
        frames.append(
            pd.DataFrame(
                {
                    "step": step,
                    "row": f"step {step} · feeds {position_label(fed, maps.tokens_text[fed])}",
                    "cache_len": cache_len,
                    "key_start": key_start,
                    "key_stop": key_stop,
                    "key": keys,
                    "prob": pooled,
                    "key_bin": key_bin,
                }
            )
        )
    columns = ["step", "row", "cache_len", "key_start", "key_stop", "key", "prob", "key_bin"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def decode_chart(frame: pd.DataFrame, prompt_len: int) -> alt.LayerChart:
    """Each decode pass adds one row, one key longer than the last; the rule marks where the prompt ends."""
    order = frame.drop_duplicates("step").sort_values("step")["row"].tolist()
    cells = (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("key_start:Q", title="key position (cached K and V)", scale=alt.Scale(nice=False, zero=True)),
            x2="key_stop:Q",
            y=alt.Y(
                "row:N",
                sort=order,
                title="decode step (token fed)",
                axis=alt.Axis(labelLimit=160, labelOverlap="greedy"),  # the drawing thins what overlaps
            ),
            color=alt.Color("prob:Q", scale=PROB_SCALE, title="probability (√ scale)", legend=PROB_LEGEND),
            tooltip=["row", "key", "cache_len", alt.Tooltip("prob:Q", format=".4f", title="probability")],
        )
    )
    prompt_end = pd.DataFrame({"key_start": [prompt_len], "label": ["end of prompt"]})
    rule = alt.Chart(prompt_end).mark_rule(color="#d95f02", strokeDash=[4, 3]).encode(x="key_start:Q")
    # The label reads away from the legend on the right: to the left of the rule when the rule is on the right half.
    on_right = not frame.empty and prompt_len > 0.5 * float(frame["key_stop"].max())
    text = (
        alt.Chart(prompt_end)
        .mark_text(align="right" if on_right else "left", dx=-4 if on_right else 4, dy=-6, color="#d95f02")
        .encode(x="key_start:Q", y=alt.value(0), text="label:N")
    )
    return alt.layer(cells, rule, text).properties(
        height=min(900, max(260, 18 * len(order)))
    )  # the height includes axes and legend


NO_MASK_IN_DECODE = (
    "**Why decode needs no mask.** In prefill all prompt tokens are in memory together, so a token's query could "
    "meet *later* tokens' keys, and the causal mask must remove them. In decode the new token's query meets only the "
    "keys in the KV cache: every one of them is from the past (or the token itself). The future has not been "
    "generated yet, so there is nothing to mask."
)
# The same, precisely: for a details expander under the plain sentence above.
MASK_PRECISELY = (
    "How the mask is applied: the timed pass runs PyTorch's fused attention kernel, which applies the mask inside "
    "the kernel and skips the blocks of scores that lie wholly above the diagonal. The maps drawn here come from a "
    "separate, untimed replay with eager attention, which computes every score and sets the future ones to 0 before "
    "the softmax."
)


def heads_caption(model: ModelInfo) -> str:
    """What to notice in the all-heads view; the grouped-query sentence only for a model that groups its heads."""
    text = "Heads differ in where they look, yet all share the same causal triangle"
    if model.is_gqa:
        return f"{text}; under grouped-query attention {model.heads // model.kv_heads} query heads read each KV head."
    return f"{text}; each head reads its own keys and values."
