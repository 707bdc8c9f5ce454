"""The By hand page's builders: the editable vectors, each step of the arithmetic as a table, and the attention rows
(the toy head's and the run's real ones) as small heatmaps with the masked cells in grey."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from explorer.charts.attention import MASKED_COLOR, PROB_LEGEND, PROB_SCALE
from explorer.charts.common import position_label
from explorer.core.attention_maps import AttentionMaps
from explorer.teach.by_hand import (
    SHOWN_DECIMALS,
    WRITTEN_EXP_DECIMALS,
    ShapeLink,
    Vector,
    WorkedRow,
    dot_text,
    number,
    vector_text,
)

AXES = ("x", "y")  # the example's two components (d = 2)
VALUE_LABELS_UP_TO = 16  # keys per row up to which each cell prints its probability
REAL_PREFILL_QUERY = 1  # the real row shown beside q1: the same position, two visible keys, the rest masked


# --- the editor ---------------------------------------------------------------------------------------------------
def vectors_frame(names: tuple[str, ...], vectors: tuple[Vector, ...]) -> pd.DataFrame:
    """What the data editor shows: one row per vector, one column per component."""
    return pd.DataFrame(
        {"vector": list(names), **{axis: [float(v[i]) for v in vectors] for i, axis in enumerate(AXES)}}
    )


def vectors_from_frame(frame: pd.DataFrame) -> tuple[Vector, ...]:
    """The edited vectors back, in row order; an emptied cell counts as 0 rather than breaking the arithmetic."""
    values = frame[list(AXES)].apply(pd.to_numeric, errors="coerce").fillna(0.0)
    return tuple(tuple(float(x) for x in row) for row in values.itertuples(index=False))


# --- the arithmetic, step by step ---------------------------------------------------------------------------------
def steps_frame(row: WorkedRow) -> pd.DataFrame:
    """One line per key: q·k (which spells out the key), ÷√d, the mask, e^x (exact and as written on paper), the
    probability (both routes)."""
    inputs = row.inputs
    scale = number(row.scale)
    return pd.DataFrame(
        {
            "key": name,
            f"{inputs.query_name} · key": dot_text(inputs.query, k),
            "÷ √d": f"{number(raw)} ÷ {scale} = {number(scaled)}",
            "mask": "−∞ (future)" if masked else "none",
            "logit": number(logit),
            "e^logit": f"{e:.4f}",
            f"e^logit to {WRITTEN_EXP_DECIMALS} dp": f"{w:.{WRITTEN_EXP_DECIMALS}f}",
            "probability (exact)": f"{p:.4f}",
            "probability (by hand)": f"{hp:.{SHOWN_DECIMALS}f}",
            **({"value": f"{vname} = {vector_text(v)}"} if vname else {}),
        }
        for name, k, raw, scaled, masked, logit, e, w, p, hp, vname, v in zip(
            inputs.key_names,
            inputs.keys,
            row.raw_scores,
            row.scaled,
            inputs.masked,
            row.logits,
            row.exps,
            row.written_exps,
            row.probs,
            row.written_probs,
            inputs.value_names or ("",) * len(inputs.keys),
            inputs.values or ((),) * len(inputs.keys),
        )
    )


def softmax_text(row: WorkedRow) -> str:
    """The last step on one line: each written exponential over their sum."""
    total = f"{row.written_exp_sum:.{WRITTEN_EXP_DECIMALS}f}"
    parts = [f"{w:.{WRITTEN_EXP_DECIMALS}f}/{total}" for w in row.written_exps]
    text = f"sum of e^logit = {total};  probabilities = {', '.join(parts)}"
    if row.output:
        inputs = row.inputs
        terms = " + ".join(f"{p:.3f}·{name}" for p, name in zip(row.probs, inputs.value_names))
        text += f"\noutput = {terms} = {vector_text(tuple(round(x, SHOWN_DECIMALS) for x in row.output))}"
    return text


# --- attention rows as heatmaps -----------------------------------------------------------------------------------
def toy_rows_frame(prefill: WorkedRow, decode: WorkedRow) -> pd.DataFrame:
    """The toy's two rows, one cell per key, with the by-hand probability (the printed numbers for the example)."""
    frames = []
    for row in (prefill, decode):
        inputs = row.inputs
        frames.append(
            pd.DataFrame(
                {
                    "row": f"{inputs.phase}: {inputs.query_name}",
                    "key_pos": range(len(inputs.keys)),
                    "key": list(inputs.key_names),
                    "prob": list(row.written_probs),
                    "prob_exact": list(row.probs),
                    "masked": list(inputs.masked),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def real_rows_frame(maps: AttentionMaps, layer: int, head: int, decode_step: int | None) -> pd.DataFrame:
    """This run's rows with the toy's shapes: prefill query position 1 over every prompt key (all but two masked),
    and one decode pass's row over its whole cache (none masked). Probabilities as captured (float16)."""
    T = maps.prompt_len
    query = min(REAL_PREFILL_QUERY, T - 1)
    prefill = maps.prefill[layer][head, query].astype(np.float32)  # (T,)
    rows = [
        (
            f"prefill: query {position_label(query, maps.tokens_text[query])}",
            prefill,
            np.arange(T) > query,
        )
    ]
    if decode_step is not None:
        decode = maps.decode[layer][decode_step][head].astype(np.float32)  # (cache_len,)
        fed = decode.shape[0] - 1  # the token this pass computes, its own key already appended
        label = f"decode step {decode_step}: query {position_label(fed, maps.tokens_text[fed])}"
        rows.append((label, decode, np.zeros(decode.shape[0], dtype=bool)))
    frames = [
        pd.DataFrame(
            {
                "row": label,
                "key_pos": np.arange(len(probs)),
                "key": [position_label(i, maps.tokens_text[i]) for i in range(len(probs))],
                "prob": probs,
                "prob_exact": probs,
                "masked": masked,
            }
        )
        for label, probs, masked in rows
    ]
    return pd.concat(frames, ignore_index=True)


def rows_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """One row of cells per query, one cell per key; grey cells are masked (probability exactly 0)."""
    order = list(dict.fromkeys(frame["row"]))
    keys = int(frame["key_pos"].max()) + 1
    base = alt.Chart(frame).encode(
        x=alt.X("key_pos:O", title="key position (what is attended to)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=260)),
        tooltip=["row", "key", alt.Tooltip("prob_exact:Q", format=".4f", title="probability"), "masked"],
    )
    attended = (
        base.transform_filter("!datum.masked")
        .mark_rect(stroke="white")
        .encode(color=alt.Color("prob:Q", scale=PROB_SCALE, title="probability (√ scale)", legend=PROB_LEGEND))
    )
    masked = base.transform_filter("datum.masked").mark_rect(color=MASKED_COLOR, stroke="white")
    layers: list[alt.Chart] = [attended, masked]
    if keys <= VALUE_LABELS_UP_TO:
        labels = base.mark_text().encode(
            text=alt.Text("prob:Q", format=f".{SHOWN_DECIMALS}f"),
            # Dark text on the bright end of viridis, light text on the dark end.
            color=alt.condition("datum.prob > 0.5", alt.value("black"), alt.value("white")),
        )
        layers.append(labels)
    return alt.layer(*layers).properties(height=60 + 60 * len(order))  # the height includes the axis below


def shape_links_frame(links: list[ShapeLink]) -> pd.DataFrame:
    return pd.DataFrame(
        {"quantity": link.quantity, "toy head": link.toy, "your run": link.real, "note": link.note} for link in links
    )


def default_layer(layers: tuple[int, ...]) -> int:
    """The middle captured layer: the first and last layers' heads are the least typical."""
    return layers[len(layers) // 2] if layers else 0
