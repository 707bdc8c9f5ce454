"""Each pass as a share of this device's measured peak for its bound (decode: read bandwidth; prefill: matmul peak),
with the published shares of real systems as marked lines: where a pass lands among them."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import phase_color, two_lines
from explorer.core.floor_share import PUBLISHED_SHARES, PassShare, pass_share
from explorer.core.trace import Trace


def share_frame(trace: Trace) -> pd.DataFrame:
    """One row per pass of the shown repeat: what it did (modelled), its time (measured), the device's figure it is a
    share of, and the share (and, on a GPU with a datasheet, the share of the datasheet's figure)."""
    rows = []
    for p in trace.passes:
        s: PassShare = pass_share(p, trace.device)
        rows.append(
            {
                "pass": p.index,
                "phase": p.phase,
                "label": s.label,
                "work": s.work,
                "work_unit": "bytes read (modelled)" if s.phase == "decode" else "FLOPs (modelled)",
                "wall_s": s.wall_s,
                "achieved_per_s": s.achieved_per_s,
                "peak_per_s": s.peak_per_s,
                "peak": s.peak_name,
                "share": s.share,
                "datasheet_per_s": s.datasheet_per_s,
                "datasheet_share": s.datasheet_share,
            }
        )
    return pd.DataFrame(rows)


def references_frame() -> pd.DataFrame:
    """The published shares the chart marks, each with what it was measured on and where it is published."""
    return pd.DataFrame(
        [
            {"label": r.label, "system": r.system, "setting": r.setting, "share": r.share, "how": r.how}
            | {"source": r.source}
            for r in PUBLISHED_SHARES
        ]
    )


def share_chart(frame: pd.DataFrame, references: pd.DataFrame) -> alt.LayerChart:
    """A point per pass at its share (decode green, prefill orange), and a dashed rule per published system."""
    top = max(1.0, float(frame["share"].max()) if not frame.empty else 1.0)
    y = alt.Y(
        "share:Q",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(domain=[0, top]),
        title=two_lines("share (of the measured peak)"),  # which peak: the caption (a presenter's axis is short)
    )
    points = (
        alt.Chart(frame)
        .mark_circle(size=60)
        .encode(
            x=alt.X("pass:Q", title="pass (0 = the prefill)", axis=alt.Axis(tickMinStep=1)),
            y=y,
            color=phase_color(),
            tooltip=[
                "label:N",
                alt.Tooltip("share:Q", format=".1%"),
                alt.Tooltip("wall_s:Q", title="time (s, measured)", format=".4g"),
                alt.Tooltip("work:Q", title="bytes or FLOPs (modelled)", format=".4s"),
                alt.Tooltip("achieved_per_s:Q", title="achieved per s", format=".4s"),
                alt.Tooltip("peak_per_s:Q", title="measured peak per s", format=".4s"),
            ],
        )
    )
    rules = (
        alt.Chart(references)
        .mark_rule(strokeDash=[6, 4], color="#555")
        .encode(
            y="share:Q",
            tooltip=["system:N", "setting:N", alt.Tooltip("share:Q", format=".0%"), "how:N", "source:N"],
        )
    )
    labels = (
        alt.Chart(references)
        .mark_text(align="left", baseline="bottom", dx=4, dy=-2, color="#555")
        .encode(y="share:Q", x=alt.value(0), text="label:N")
    )
    return (rules + labels + points).properties(height=260)
