"""Two runs side by side (e.g. float32 against bfloat16, a short prompt against a long one): the figures and where
each one's prefill and decode time goes."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.cost import SEGMENT_LABELS, SEGMENT_RANGE, median_decode_index
from explorer.charts.tables import human_label
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import to_ms

FIGURES = ("ttft_s", "itl_p50_s", "itl_p99_s", "e2e_s", "decode_tokens_per_s")


def figures_frame(labelled: list[tuple[str, Trace]]) -> pd.DataFrame:
    """One row per figure, one column per run: medians over each run's repeats, plus size and set-up."""
    rows = []
    for name in FIGURES:
        shown, factor = human_label(name)  # "TTFT (ms)" for ttft_s: a person's name and unit, not the field's
        row: dict[str, object] = {"figure": shown}
        for label, trace in labelled:
            spread = getattr(trace.spreads, name)
            row[label] = None if spread is None else spread.median * factor
        rows.append(row)
    extra = {
        "prompt tokens": lambda t: t.prompt_len,
        "new tokens": lambda t: t.new_tokens,
        "final KV cache (bytes)": lambda t: t.final_kv_cache_bytes,
        "dtype": lambda t: t.model.dtype,
        "repeats": lambda t: t.repeat_count,
    }
    for name, read in extra.items():
        rows.append({"figure": name, **{label: read(trace) for label, trace in labelled}})
    # Text cells, numbers written in full: a column holding both a dtype's name and numbers is not one Arrow type,
    # and Streamlit would log a conversion error for every draw.
    return pd.DataFrame(rows).map(cell_text)


def cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    return value if isinstance(value, str) else f"{value:,.4g}"


PREFILL = "prefill"
MEDIAN_DECODE = "median decode pass"
PHASES = [PREFILL, MEDIAN_DECODE]  # one panel each, top to bottom: each run's bar in both


def _split(label: str, phase: str, p: PassRecord) -> list[dict[str, object]]:
    c = p.cost
    parts = [
        c.t_weight_read_s,
        c.t_kv_s,
        max(0.0, c.t_compute_s - c.t_memory_s),
        max(0.0, p.wall_s - c.roofline_time_s),
    ]
    return [
        {"run": label, "phase": phase, "pass index": p.index, "part": part, "ms": to_ms(value), "order": k}
        for k, (part, value) in enumerate(zip(SEGMENT_LABELS, parts))
    ]


def split_frame(labelled: list[tuple[str, Trace]]) -> pd.DataFrame:
    """Each run's prefill and its median decode pass, split into modelled weight/KV/compute time and the overhead.
    The decode rows are grouped by what they are (each run's median pass), not by pass index: two runs' medians are
    rarely the same index, and one panel per index held one run each."""
    rows = []
    for label, trace in labelled:
        rows += _split(label, PREFILL, trace.prefill)
        k = median_decode_index(trace)
        if k is not None:
            rows += _split(label, MEDIAN_DECODE, trace.passes[k])
    return pd.DataFrame(rows)


def split_chart(frame: pd.DataFrame) -> alt.Chart:
    """Two panels, prefill above the median decode pass, each with one bar per run; panel titles above their panel,
    run names and the legend whole (one legend row per part, below the plot)."""
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("ms:Q", title="time (ms): modelled parts + measured overhead"),
            y=alt.Y("run:N", title=None, axis=alt.Axis(labelLimit=0)),
            row=alt.Row(
                "phase:N",
                title=None,
                sort=PHASES,
                header=alt.Header(labelOrient="top", labelAnchor="start", labelAngle=0, labelLimit=0),
            ),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=SEGMENT_LABELS, range=SEGMENT_RANGE),
                title=None,
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0),
            ),
            order="order:Q",
            tooltip=["run", "phase", "pass index", "part", alt.Tooltip("ms:Q", format=".3f")],
        )
        .properties(height=alt.Step(34))
    )
