"""The Cost page's operator tables: one pass's modelled cost by operator kind, by layer, and beside the profiler's
measured time for the same pass, group by group. Pure: operator costs (and a profile) in, frames and a chart out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from explorer.charts.common import MEASURED, MODELLED
from explorer.core.operators import KINDS, Operator, summed
from explorer.core.roofline import Cost
from explorer.core.units import to_ms

if TYPE_CHECKING:  # the builders read a profile's fields; they never need torch
    from explorer.core.pass_profile import PassProfile

FLOPS = "FLOPs"
READ = "bytes read"
WRITTEN = "bytes written"
INTENSITY = "intensity (FLOP/B)"
BOUND = "bound"
COMPUTE_MS = "compute ms"
WEIGHT_MS = "weight read ms"
KV_MS = "KV ms"
FLOOR_MS = "floor ms (max of compute, memory)"
NUMBERS = [FLOPS, READ, WRITTEN, INTENSITY, BOUND, COMPUTE_MS, WEIGHT_MS, KV_MS, FLOOR_MS]
# The model's own module names, as a table a person reads shows them; the CSV keeps the names the model code uses.
SHOWN_NAMES = {
    "q_proj": "Q projection",
    "k_proj": "K projection",
    "v_proj": "V projection",
    "o_proj": "output projection",
    "kv_b_proj": "latent expansion",
}


def _figures(cost: Cost) -> dict[str, object]:
    """The columns every row shares, read off one `Cost` (an operator's, several added up, or the pass's own)."""
    return {
        FLOPS: cost.flops,
        READ: cost.bytes_read,
        WRITTEN: cost.kv_bytes_written,
        INTENSITY: cost.arithmetic_intensity,
        BOUND: cost.bound,
        COMPUTE_MS: to_ms(cost.t_compute_s),
        WEIGHT_MS: to_ms(cost.t_weight_read_s),
        KV_MS: to_ms(cost.t_kv_s),
        FLOOR_MS: to_ms(cost.roofline_time_s),
    }


def operators_frame(ops: Sequence[Operator]) -> pd.DataFrame:
    """Every operator of the pass, layer by layer: the data behind the download."""
    rows = [{"layer": op.layer, "operator": op.name, "kind": op.kind, **_figures(op.cost)} for op in ops]
    frame = pd.DataFrame(rows, columns=["layer", "operator", "kind", *NUMBERS])
    return frame.astype({"layer": "Int64"})  # empty outside the decoder layers (embedding, LM head, other weights)


def kinds_frame(ops: Sequence[Operator]) -> pd.DataFrame:
    """One row per operator kind, summed over the layers, in the order a layer runs them; kinds the model lacks are
    left out. A kind's floor is its operators' floors added, each op bounded on its own."""
    rows = []
    for kind in KINDS:
        of_kind = [op for op in ops if op.kind == kind]
        if not of_kind:
            continue
        layers = {op.layer for op in of_kind if op.layer is not None}
        row = _figures(summed(of_kind))
        row[FLOOR_MS] = to_ms(sum(op.cost.roofline_time_s for op in of_kind))
        rows.append({"operator kind": kind, "layers": len(layers) or None, **row})
    frame = pd.DataFrame(rows, columns=["operator kind", "layers", *NUMBERS])
    return frame.astype({"layers": "Int64"})  # empty for what runs outside the layers


def shown_name(name: str) -> str:
    """An operator's name as a table shows it: 'Q projection' for the model's `q_proj`."""
    for module, shown in SHOWN_NAMES.items():
        name = re.sub(rf"\b{module}\b", shown, name)
    return name


def layer_frame(ops: Sequence[Operator], layer: int) -> pd.DataFrame:
    """One decoder layer's operators, under the names a person reads."""
    frame = operators_frame([op for op in ops if op.layer == layer])
    frame["operator"] = frame["operator"].map(shown_name)
    return frame.drop(columns=["layer"])


def totals_frame(ops: Sequence[Operator], cost: Cost) -> pd.DataFrame:
    """The operators added up beside the pass's own modelled totals (the time split's): the two rows are equal."""
    rows = [
        {"": "every operator, added up", **_figures(summed(ops))},
        {"": "the pass (its roofline cost)", **_figures(cost)},
    ]
    return pd.DataFrame(rows, columns=["", *NUMBERS])


# --- modelled beside measured ----------------------------------------------------------------------------------------
MODELLED_BAR = f"floor ({MODELLED}): its operators' roofline times"
MEASURED_BAR = f"profiled ({MEASURED}): op self time"


def side_by_side_frame(
    ops: Sequence[Operator], profile: PassProfile, kinds_of_group: Mapping[str, Sequence[str]]
) -> pd.DataFrame:
    """Per profiler group: the modelled floor of the operator kinds that run in it and the measured self time, with
    how many times slower than its floor the group ran. `kinds_of_group` maps a profiler group to operator kinds."""
    rows = []
    for group in profile.groups:
        kinds = kinds_of_group.get(group.name, ())
        floor_s = sum(op.cost.roofline_time_s for op in ops if op.kind in kinds)
        rows.append(
            {
                "group": group.name,
                "modelled operators": ", ".join(kinds) or "none modelled",
                "modelled_ms": to_ms(floor_s),
                "measured_ms": to_ms(group.self_s),
                "measured_over_modelled": group.self_s / floor_s if floor_s > 0 else None,
            }
        )
    columns = ["group", "modelled operators", "modelled_ms", "measured_ms", "measured_over_modelled"]
    return pd.DataFrame(rows, columns=columns)


def side_by_side_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Per profiler group, a dot for its operators' modelled floor and one for its measured time, joined by a line
    whose length is the gap (log x: they differ by orders of magnitude on a CPU; a log axis has no zero for bars)."""
    long = frame.melt(
        id_vars=["group", "modelled operators"],
        value_vars=["modelled_ms", "measured_ms"],
        var_name="what",
        value_name="ms",
    )
    long["what"] = long["what"].map({"modelled_ms": MODELLED_BAR, "measured_ms": MEASURED_BAR})
    long = long[long["ms"] > 0]  # a group with nothing modelled shows its measured dot alone
    y = alt.Y("group:N", sort=frame["group"].tolist(), title=None, axis=alt.Axis(labelLimit=320))
    x = alt.X("ms:Q", scale=alt.Scale(type="log"), title="time (ms, log scale)")
    gaps = frame[(frame["modelled_ms"] > 0) & (frame["measured_ms"] > 0)]
    lines = (
        alt.Chart(gaps)
        .mark_rule(color="#969696", strokeWidth=2)
        .encode(x=alt.X("modelled_ms:Q", scale=alt.Scale(type="log")), x2="measured_ms:Q", y=y)
    )
    dots = (
        alt.Chart(long)
        .mark_point(filled=True, size=140, opacity=1)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "what:N",
                scale=alt.Scale(domain=[MODELLED_BAR, MEASURED_BAR], range=["#3182bd", "#e6550d"]),
                title=None,
                legend=alt.Legend(orient="top", labelLimit=360),
            ),
            tooltip=["group:N", "what:N", "modelled operators:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    return (lines + dots).properties(height=alt.Step(36))


def furthest_sentence(frame: pd.DataFrame) -> str:
    """Which group ran furthest above its operators' floor, and the one closest to it (numbers and fixed words)."""
    rated = frame.dropna(subset=["measured_over_modelled"])
    if rated.empty:
        return "No group of this profile has a modelled floor to compare with."
    rated = rated.sort_values("measured_over_modelled", ascending=False)
    far, near = rated.iloc[0], rated.iloc[-1]
    sentence = (
        f"Furthest from its floor: **{far['group']}**, {far['measured_over_modelled']:,.0f}× its operators' modelled "
        f"time ({far['measured_ms']:.3g} ms measured against {far['modelled_ms']:.3g} ms modelled)"
    )
    if len(rated) > 1:
        sentence += f"; closest: **{near['group']}**, {near['measured_over_modelled']:,.0f}×"
    return sentence + ". Small matrices, dispatch and unfused elementwise ops are what a floor leaves out."
