"""The Cost page's profile builders: one profiled pass's time by what ran, stacked beside its roofline bar."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from explorer.charts.common import MEASURED, MODELLED
from explorer.charts.cost import SEGMENT_COLUMNS, SEGMENT_LABELS, SEGMENT_RANGE
from explorer.core.units import to_ms

if TYPE_CHECKING:  # the builders read a profile's fields; they never need torch
    from explorer.core.pass_profile import PassProfile

PROFILE_BAR = f"profiled ({MEASURED})"
ROOFLINE_BAR = f"roofline ({MODELLED}) + overhead"
BARS = [ROOFLINE_BAR, PROFILE_BAR]  # top to bottom
# Warm colours for what runs, so they never read as the roofline's blues; the remainder is grey like the overhead it
# explains. Neither the phase orange nor the phase green.
GROUP_RANGE = ["#e7ba52", "#d6616b", "#ce6dbd", "#8ca252", "#843c39", "#7b4173"]
REMAINDER_COLOR = "#737373"
PROFILED_WALL = "profiled wall"
UNPROFILED_WALL = "same pass without the profiler"
RUN_WALL = "the pass in the run (median)"
WALL_DOMAIN = [PROFILED_WALL, UNPROFILED_WALL, RUN_WALL]
WALL_RANGE = ["#000000", "#e31a1c", "#08306b"]  # black, red, navy: apart from every segment
TOP_OPS_SHOWN = 3


@dataclass(frozen=True)
class RooflineParts:
    """The same pass's roofline bar, as the time split draws it, in seconds."""

    weight_read_s: float  # modelled
    kv_s: float  # modelled: the KV cache's reads and writes
    compute_not_hidden_s: float  # modelled: compute beyond the memory time
    overhead_s: float  # measured wall - modelled roofline time, at least 0
    wall_s: float  # measured: the pass in the run (the median over its repeats, as the time split draws it)


def roofline_parts(split: pd.DataFrame, pass_index: int) -> RooflineParts:
    """The pass's bar exactly as the Cost page's time split stacks it (`cost.time_split_frame`), back in seconds."""
    row = split.loc[split["pass"] == pass_index].iloc[0]
    weight_ms, kv_ms, compute_ms, overhead_ms = (float(row[c]) for c in SEGMENT_COLUMNS)
    return RooflineParts(weight_ms / 1e3, kv_ms / 1e3, compute_ms / 1e3, overhead_ms / 1e3, float(row["wall_ms"]) / 1e3)


def profile_frame(profile: PassProfile) -> pd.DataFrame:
    """One row per part of the profiled pass: the op groups in stacking order, then the remainder no op explains."""
    wall_ms = to_ms(profile.wall_s_profiled)
    rows = [
        {
            "part": group.name,
            "part_order": order,
            "kind": f"op self time ({profile.time_kind})",
            "ms": to_ms(group.self_s),
            "share_of_profiled_wall": group.self_s / profile.wall_s_profiled,
            "calls": sum(op.count for op in group.ops),
            "top_ops": ", ".join(f"{op.name} {to_ms(op.self_s):.3f} ms" for op in group.ops[:TOP_OPS_SHOWN]),
        }
        for order, group in enumerate(profile.groups)
    ]
    rows.append(
        {
            "part": profile.remainder_name,
            "part_order": len(rows),
            "kind": "profiled wall − every op's self time",
            "ms": to_ms(profile.remainder_s),
            "share_of_profiled_wall": profile.remainder_s / profile.wall_s_profiled,
            "calls": 0,
            "top_ops": "",
        }
    )
    frame = pd.DataFrame(rows)
    frame.insert(0, "pass", profile.pass_index)
    frame.insert(1, "phase", profile.phase)
    frame["wall_profiled_ms"] = wall_ms
    frame["wall_unprofiled_ms"] = to_ms(profile.wall_s_unprofiled)
    return frame


def ops_frame(profile: PassProfile) -> pd.DataFrame:
    """Every op the profiler reported in the pass, with its group, calls and self time, largest first."""
    rows = [
        {
            "group": group.name,
            "op": op.name,
            "calls": op.count,
            "self_ms": to_ms(op.self_s),
            "share_of_profiled_wall": op.self_s / profile.wall_s_profiled,
        }
        for group in profile.groups
        for op in group.ops
    ]
    columns = ["group", "op", "calls", "self_ms", "share_of_profiled_wall"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["self_ms", "group", "op"], ascending=[False, True, True], ignore_index=True)


def bars_frame(frame: pd.DataFrame, roofline: RooflineParts) -> pd.DataFrame:
    """The two stacked bars' segments: the roofline's four parts, then the profile's parts."""
    roof = pd.DataFrame(
        {
            "bar": ROOFLINE_BAR,
            "part": SEGMENT_LABELS,
            "part_order": range(len(SEGMENT_LABELS)),
            "ms": [
                to_ms(roofline.weight_read_s),
                to_ms(roofline.kv_s),
                to_ms(roofline.compute_not_hidden_s),
                to_ms(roofline.overhead_s),
            ],
        }
    )
    profiled = frame[["part", "part_order", "ms"]].assign(bar=PROFILE_BAR)
    profiled["part_order"] += len(SEGMENT_LABELS)  # stacked after the roofline's parts in the shared order
    return pd.concat([roof, profiled[roof.columns]], ignore_index=True)


def walls_frame(frame: pd.DataFrame, roofline: RooflineParts) -> pd.DataFrame:
    """The measured wall times drawn as ticks: the profiled and unprofiled replay on the profile bar, the run's on the
    roofline bar."""
    return pd.DataFrame(
        {
            "bar": [PROFILE_BAR, PROFILE_BAR, ROOFLINE_BAR],
            "wall": WALL_DOMAIN,
            "ms": [frame["wall_profiled_ms"].iloc[0], frame["wall_unprofiled_ms"].iloc[0], to_ms(roofline.wall_s)],
        }
    )


def profile_chart(frame: pd.DataFrame, roofline: RooflineParts) -> alt.LayerChart:
    """One stacked bar of the profile's groups under the roofline bar of the same pass, wall times as ticks."""
    y = alt.Y("bar:N", sort=BARS, title=None, axis=alt.Axis(labelLimit=320))
    parts = frame["part"].tolist()
    domain = [*SEGMENT_LABELS, *parts]
    colours = [*SEGMENT_RANGE, *GROUP_RANGE[: len(parts) - 1], REMAINDER_COLOR]  # the remainder is the last part
    bars = (
        alt.Chart(bars_frame(frame, roofline))
        .mark_bar()
        .encode(
            x=alt.X("ms:Q", stack="zero", title="time (ms)"),
            y=y,
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=domain, range=colours),
                sort=domain,
                title=None,
                legend=alt.Legend(orient="top", columns=2, labelLimit=0),
            ),
            order=alt.Order("part_order:Q"),
            tooltip=["bar:N", "part:N", alt.Tooltip("ms:Q", title="ms", format=".3f")],
        )
    )
    ticks = (
        alt.Chart(walls_frame(frame, roofline))
        .mark_tick(thickness=3, size=44)
        .encode(
            x="ms:Q",
            y=y,
            color=alt.Color(
                "wall:N",
                scale=alt.Scale(domain=WALL_DOMAIN, range=WALL_RANGE),
                title="measured wall",
                legend=alt.Legend(orient="bottom", labelLimit=0),
            ),
            tooltip=["bar:N", "wall:N", alt.Tooltip("ms:Q", title="ms (measured)", format=".3f")],
        )
    )
    return (bars + ticks).resolve_scale(color="independent").properties(height=alt.Step(60))
