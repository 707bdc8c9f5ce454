"""The Cost page's roofline: each pass at its modelled intensity under the device's roof, which side of the ridge it
sits on, the prompt length from which a prefill is compute-bound, and each pass's utilisation of the device."""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import pandas as pd

from explorer.charts.common import PHASE_COLOR, PHASE_DOMAIN, phase_color, phase_points, two_lines
from explorer.core.roofline import attainable_flops, prefill_ridge_tokens, utilisation
from explorer.core.trace import DeviceProfile, PassRecord, Trace
from explorer.core.units import to_ms

ROOF_POINTS_PER_DECADE = 8


def _roof_intensities(low: float, high: float, ridge: float) -> list[float]:
    """A geometric grid from low to high with the ridge point on it, so the drawn roof has its true corner."""
    decades = math.log10(high / low)
    count = max(2, math.ceil(decades * ROOF_POINTS_PER_DECADE) + 1)
    grid = [low * (high / low) ** (i / (count - 1)) for i in range(count)]
    return sorted({*grid, ridge})


def roofline_frame(trace: Trace) -> pd.DataFrame:
    """Rows of three kinds: 'pass' (one per pass), 'roof' (the roof line) and 'ridge' (its corner)."""
    device = trace.device
    ridge = device.ridge_point_flops_per_byte
    passes = [
        {
            "kind": "pass",
            "pass": p.index,
            "phase": p.phase,
            "intensity_flops_per_byte": p.cost.arithmetic_intensity,
            "flops_per_s": p.achieved_flops_per_s,
            "bound": p.cost.bound,
            "wall_ms": to_ms(p.wall_s),
        }
        for p in trace.passes
    ]
    intensities = [row["intensity_flops_per_byte"] for row in passes if row["intensity_flops_per_byte"] > 0]
    # A decade of margin either side of the passes and the ridge, so every point sits under a drawn roof.
    low = min([*intensities, ridge]) / 10
    high = max([*intensities, ridge]) * 10
    roof = [
        {"kind": "roof", "intensity_flops_per_byte": x, "flops_per_s": attainable_flops(x, device)}
        for x in _roof_intensities(low, high, ridge)
    ]
    corner = {"kind": "ridge", "intensity_flops_per_byte": ridge, "flops_per_s": device.peak_flops}
    frame = pd.DataFrame([*passes, *roof, corner])
    return frame.astype({"pass": "Int64"})


INTENSITY_TITLE = "arithmetic intensity (FLOP/byte, modelled)"
ACHIEVED_TITLE = "FLOP/s (modelled FLOPs / measured time)"


def roofline_chart(frame: pd.DataFrame, narrow: bool = False) -> alt.LayerChart:
    """Log-log: the roof min(peak, intensity x bandwidth), its ridge, and each pass coloured by phase. `narrow`: beside
    another chart whose legend already names the phase colours (Cost's time split), so without a legend of its own,
    and with short axis titles (its source line says how each is taken)."""
    x = alt.X(
        "intensity_flops_per_byte:Q",
        scale=alt.Scale(type="log", nice=False),  # the roof spans the whole axis: it was drawn a decade past the data
        title="FLOP/byte (modelled)" if narrow else INTENSITY_TITLE,
    )
    y = alt.Y(
        "flops_per_s:Q",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(format="~s"),
        title="FLOP/s" if narrow else ACHIEVED_TITLE,  # narrow: its source line says how it is taken
    )
    base = alt.Chart(frame).encode(x=x, y=y)
    roof = base.transform_filter("datum.kind == 'roof'").mark_line(color="#444444", strokeWidth=2)
    ridge = base.transform_filter("datum.kind == 'ridge'")
    # A full-height dashed rule: left of it passes are memory-bound, right of it compute-bound.
    ridge_rule = (
        alt.Chart(frame)
        .transform_filter("datum.kind == 'ridge'")
        .mark_rule(color="#444444", strokeDash=[4, 4])
        .encode(x=x)
    )
    ridge_label = ridge.mark_text(align="left", dx=6, dy=-8, color="#444444").encode(
        text=alt.Text("intensity_flops_per_byte:Q", format=".1f")
    )
    ridge_dot = ridge.mark_point(shape="diamond", size=90, filled=True, color="#444444").encode(
        tooltip=[alt.Tooltip("intensity_flops_per_byte:Q", title="ridge point (FLOP/byte)", format=".2f")]
    )
    tooltip = [
        "pass:Q",
        "phase:N",
        "bound:N",
        alt.Tooltip("intensity_flops_per_byte:Q", title="FLOP/byte", format=".2f"),
        alt.Tooltip("flops_per_s:Q", title="FLOP/s", format=".3~s"),
        alt.Tooltip("wall_ms:Q", title="wall (ms)", format=".3f"),
    ]
    shape = alt.Shape("phase:N", scale=alt.Scale(domain=PHASE_DOMAIN, range=["square", "circle"]), legend=None)
    points = phase_points(base.transform_filter("datum.kind == 'pass'"), 70, shape=shape, tooltip=tooltip)
    if narrow:
        points = points.encode(color=alt.Color("phase:N", scale=PHASE_COLOR, legend=None))
    return (roof + ridge_rule + ridge_dot + ridge_label + points).properties(height=360)


# --- utilisation -----------------------------------------------------------------------------------------------------
def utilisation_frame(passes: Sequence[PassRecord], device: DeviceProfile) -> pd.DataFrame:
    """Per pass: achieved FLOP/s against the peak, achieved bandwidth (bytes moved: read + written) against the
    device's bandwidth for that pass's mix (reads at the read-only figure, writes at the copy figure), by
    `explorer.core.roofline.utilisation`."""
    rows = []
    for p in passes:
        used = utilisation(p.cost, p.wall_s, device)
        rows.append(
            {
                "pass": p.index,
                "phase": p.phase,
                "label": f"{p.phase} (pass {p.index})",
                "flops": p.cost.flops,
                "bytes_moved": p.cost.bytes_moved,  # weights read + KV read and written
                "wall_s": p.wall_s,
                "achieved_flops_per_s": p.achieved_flops_per_s,
                "compute_utilisation": used.compute,
                "achieved_bandwidth_bytes_per_s": p.achieved_bandwidth_bytes_per_s,
                "device_bandwidth_bytes_per_s": used.device_bandwidth_bytes_per_s,
                "bandwidth_utilisation": used.bandwidth,
                "at_the_roof": p.wall_s <= p.cost.roofline_time_s,
                "tokens_per_s": p.tokens_in / p.wall_s if p.wall_s > 0 else 0.0,
            }
        )
    return pd.DataFrame(rows)


def utilisation_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """One bar per (figure, pass) in the pass's phase colour: compute as % of peak, bandwidth as % of the device's."""
    order = [f"{figure} · {label}" for figure in ("compute", "bandwidth") for label in frame["label"]]
    base = (
        alt.Chart(frame)
        .transform_fold(["compute_utilisation", "bandwidth_utilisation"], as_=["figure", "fraction"])
        .transform_calculate(
            row="(datum.figure == 'compute_utilisation' ? 'compute' : 'bandwidth') + ' · ' + datum.label"
        )
        .encode(
            x=alt.X(
                "fraction:Q",
                axis=alt.Axis(format="%"),
                title=two_lines("achieved / device figure (peak FLOP/s, bandwidth)"),  # fits a phone's plot
            ),
            y=alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=260)),
        )
    )
    bars = base.mark_bar().encode(
        color=phase_color("phase"),
        tooltip=["label:N", "figure:N", alt.Tooltip("fraction:Q", format=".3~p")],
    )
    values = base.mark_text(align="left", dx=4).encode(text=alt.Text("fraction:Q", format=".3~p"))
    return (bars + values).properties(height=alt.Step(28))


# --- sentences that state a bound: computed, never asserted -------------------------------------------------------
def bound_sentence(p: PassRecord, device: DeviceProfile) -> str:
    """Which side of the ridge a pass sits on, from its modelled intensity against this device's ridge point."""
    intensity, ridge = p.cost.arithmetic_intensity, device.ridge_point_flops_per_byte
    side = "right" if intensity >= ridge else "left"
    return (
        f"The {p.phase} (pass {p.index}) does {intensity:,.2f} FLOP per byte moved; this device's ridge is "
        f"{ridge:,.1f} FLOP/B, so it sits {side} of the ridge: {p.cost.bound}-bound by the model."
    )


def prefill_ridge_sentence(trace: Trace) -> str:
    """The prompt length from which a prefill is compute-bound: from the same cost model as each pass's bound, so
    this sentence and the prefill's bound sentence never disagree."""
    tokens = prefill_ridge_tokens(trace.model, trace.device, **trace.cache_options)
    device = f"on this device in {trace.device.dtype} (ridge {trace.device.ridge_point_flops_per_byte:,.1f} FLOP/B)"
    why = (
        f"A prefill does about 2 FLOPs per weight per prompt token but reads each weight "
        f"({trace.model.bytes_per_element} B in {trace.model.dtype}) once per pass, so its intensity grows with the "
        "prompt; counting every byte the model moves (embedding table and KV traffic included), "
    )
    if tokens is None:
        return (
            why + f"no prompt within the model's context of {trace.model.max_context:,} tokens makes a prefill "
            f"compute-bound {device}. This prompt has {trace.prompt_len} tokens."
        )
    now = "at or above" if trace.prompt_len >= tokens else "below"
    return (
        why + f"a prefill is compute-bound from {tokens:,} prompt tokens {device}. This prompt has "
        f"{trace.prompt_len} tokens, {now} that."
    )
