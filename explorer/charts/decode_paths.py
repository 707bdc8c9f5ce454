"""Eager against static-cache and CUDA-graph decode for the same request: each path's median decode pass split into
its modelled floor and the overhead above it, and the sentence that says what changed."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import altair as alt
import pandas as pd

from explorer.charts.cost import segment_color, segments_folded
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import to_ms

PATH_NAMES = {
    "eager": "eager (DynamicCache)",
    "static": "static cache",
    "graph": "CUDA graph (static cache)",
}


def median_decode(trace: Trace) -> PassRecord:
    """The decode pass with the median measured time (the lower middle one of an even count)."""
    walls = [p.wall_s for p in trace.decodes]
    return trace.decodes[walls.index(statistics.median_low(walls))]


def decode_paths_frame(traces: Sequence[Trace]) -> pd.DataFrame:
    """One row per path: its median decode pass, measured, split into the roofline model's segments and the overhead
    above them, with its weight-read floor and how many times that floor it took."""
    rows = []
    for trace in traces:
        p = median_decode(trace)
        c = p.cost
        rows.append(
            {
                "path": PATH_NAMES[trace.decode_path],
                "decode_path": trace.decode_path,
                "weight_read_ms": to_ms(c.t_weight_read_s),
                "kv_ms": to_ms(c.t_kv_s),
                "compute_not_hidden_ms": to_ms(max(0.0, c.t_compute_s - c.t_memory_s)),
                "overhead_ms": to_ms(p.overhead_s),
                "wall_ms": to_ms(p.wall_s),
                "times_weight_floor": p.wall_s / c.t_weight_read_s if c.t_weight_read_s > 0 else float("nan"),
                "decode_passes": len(trace.decodes),
                "prefill_ms": to_ms(trace.prefill.wall_s),
                "same_tokens_as_first": trace.generated_token_ids == traces[0].generated_token_ids,
            }
        )
    return pd.DataFrame(rows)


def decode_paths_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """One horizontal bar per path: the modelled segments, then the overhead, with a tick at the measured time."""
    base = alt.Chart(frame).encode(y=alt.Y("path:N", title=None, sort=list(frame["path"])))
    bars = (
        segments_folded(base)
        .mark_bar()
        .encode(
            x=alt.X("segment_ms:Q", stack="zero", title="median decode pass (ms)"),
            color=segment_color(),
            order=alt.Order("part_order:Q"),
            tooltip=[
                "path:N",
                alt.Tooltip("part:N", title="segment"),
                alt.Tooltip("segment_ms:Q", title="segment (ms)", format=".3f"),
                alt.Tooltip("wall_ms:Q", title="wall (ms, measured)", format=".3f"),
                alt.Tooltip("times_weight_floor:Q", title="× weight-read floor", format=".2f"),
            ],
        )
    )
    wall = base.mark_tick(color="black", thickness=2, size=28).encode(x="wall_ms:Q")
    return (bars + wall).properties(height=60 * max(1, len(frame)) + 40)


def decode_paths_sentence(frame: pd.DataFrame) -> str:
    """What the comparison shows, computed from its rows: each path's time and its multiple of the weight-read floor,
    and how far the overhead fell from the eager path to the fastest one."""
    parts = [
        f"{row.path}: {row.wall_ms:.2f} ms a token, {row.times_weight_floor:.1f}× its weight-read floor"
        for row in frame.itertuples()
    ]
    eager = frame[frame["decode_path"] == "eager"]
    best = frame.loc[frame["wall_ms"].idxmin()]
    sentence = "Median decode pass (measured) against its weight-read floor (modelled): " + "; ".join(parts) + "."
    if not eager.empty and best["decode_path"] != "eager":
        sentence += (
            f" The overhead above the roofline went from {eager['overhead_ms'].iloc[0]:.2f} ms (eager) to "
            f"{best['overhead_ms']:.2f} ms ({best['path']})."
        )
    elif not eager.empty:
        sentence += " No other path beat eager here."
    if not frame["same_tokens_as_first"].all():
        sentence += " The paths did not all make the same tokens (a near tie rounded differently)."
    return sentence
