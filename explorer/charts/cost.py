"""The Cost page's builders: where each pass's time goes, the roofline, utilisation, the device profile."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import altair as alt
import pandas as pd

from explorer.charts.common import (
    MEASURED,
    MODELLED,
    PHASE_COLOR,
    PHASE_DOMAIN,
    TWO_LINE_LABEL,
    phase_color,
    phase_points,
)
from explorer.core.figure_trust import UNDER_LOAD, caveat, marked_bound
from explorer.core.profiles import READ_BANDWIDTH_COUNTS
from explorer.core.roofline import attainable_flops, pass_bandwidth_bytes_per_s, prefill_ridge_tokens
from explorer.core.trace import DeviceProfile, PassRecord, Trace
from explorer.core.units import human_bandwidth, human_bytes, human_flops, to_ms

# The four stacked segments of a pass, bottom to top: they sum to the measured wall time whenever the pass is at
# least as slow as the roofline model predicts (wall >= max(compute, weight + KV)).
SEGMENT_COLUMNS = ["weight_read_ms", "kv_ms", "compute_not_hidden_ms", "overhead_ms"]
SEGMENT_LABELS = [
    "weight read (modelled)",
    "KV cache read + write (modelled)",
    "compute not hidden behind memory (modelled)",
    "overhead = wall − roofline (measured − modelled)",
]
SEGMENT_RANGE = ["#3182bd", "#9ecae1", "#756bb1", "#bdbdbd"]  # blues, purple, grey: never the phase colours
ROOF_POINTS_PER_DECADE = 8
DEVICE_NOTE = {
    "cpu": "A CPU has no datasheet here: its 'peaks' are the best that a large matmul, a large copy and a large "
    "read-only sum achieved on this machine with the same threads, so a pass can approach the roof but a real kernel "
    "rarely reaches it.",
    "cuda": "On a GPU the peaks come from the datasheet or the driver; the microbenchmark rows show what is "
    "achievable in practice, usually somewhat below.",
}


def _vega_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


# --- where the time goes ---------------------------------------------------------------------------------------------
def time_split_frame(trace: Trace, first_pass: int = 0, last_pass: int | None = None) -> pd.DataFrame:
    """One row per pass in [first_pass, last_pass]: the modelled segments, the measured wall time (the median over
    repeats, with their min and max as a whisker), and the roofline time."""
    last = trace.new_tokens - 1 if last_pass is None else last_pass
    rows = []
    for p in trace.passes[first_pass : last + 1]:
        c = p.cost
        wall = trace.pass_wall_spread(p.index)
        rows.append(
            {
                "pass": p.index,
                "phase": p.phase,
                "weight_read_ms": to_ms(c.t_weight_read_s),
                "kv_ms": to_ms(c.t_kv_s),
                # The roofline model overlaps maths with memory traffic: only compute beyond the memory time shows.
                "compute_not_hidden_ms": to_ms(max(0.0, c.t_compute_s - c.t_memory_s)),
                "overhead_ms": to_ms(max(0.0, wall.median - c.roofline_time_s)),
                "wall_ms": to_ms(wall.median),
                "wall_min_ms": to_ms(wall.low),
                "wall_max_ms": to_ms(wall.high),
                "repeats": wall.samples,
                "roofline_ms": to_ms(c.roofline_time_s),
                "bound": c.bound,
                # A pass faster than the model's lower bound means the device figures are too pessimistic: shown,
                # not hidden (the run re-measures them when it is by more than 10 %).
                "faster_than_model": wall.median < c.roofline_time_s,
            }
        )
    return pd.DataFrame(rows)


def time_split_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Stacked modelled segments plus overhead per pass, outlined in the phase colour, with a tick at the wall time."""
    base = alt.Chart(frame).encode(x=alt.X("pass:O", title="pass (0 = prefill)", axis=alt.Axis(labelAngle=0)))
    bars = (
        base.transform_fold(SEGMENT_COLUMNS, as_=["segment", "segment_ms"])
        .transform_calculate(
            part=f"{_vega_list(SEGMENT_LABELS)}[indexof({_vega_list(SEGMENT_COLUMNS)}, datum.segment)]",
            part_order=f"indexof({_vega_list(SEGMENT_COLUMNS)}, datum.segment)",
        )
        .mark_bar(strokeWidth=1.5)
        .encode(
            y=alt.Y("segment_ms:Q", stack="zero", title="time (ms)"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=SEGMENT_LABELS, range=SEGMENT_RANGE),
                title=None,
                legend=alt.Legend(orient="top", columns=2, labelLimit=0, labelExpr=TWO_LINE_LABEL),
            ),
            stroke=alt.Stroke(
                "phase:N",
                scale=PHASE_COLOR,
                title="outline: pass",
                legend=alt.Legend(orient="right", symbolFillColor="white", symbolStrokeWidth=2),
            ),
            order=alt.Order("part_order:Q"),
            tooltip=[
                "pass:O",
                "phase:N",
                alt.Tooltip("part:N", title="segment"),
                alt.Tooltip("segment_ms:Q", title="segment (ms)", format=".3f"),
                alt.Tooltip("wall_ms:Q", title="wall (ms, measured)", format=".3f"),
                alt.Tooltip("roofline_ms:Q", title="roofline (ms, modelled)", format=".3f"),
            ],
        )
    )
    wall_tooltip = [
        "pass:O",
        "phase:N",
        alt.Tooltip("wall_ms:Q", title="wall (ms, measured median)", format=".3f"),
        alt.Tooltip("wall_min_ms:Q", title="min over repeats (ms)", format=".3f"),
        alt.Tooltip("wall_max_ms:Q", title="max over repeats (ms)", format=".3f"),
        "repeats:Q",
        "faster_than_model:N",
    ]
    wall = base.mark_tick(color="black", thickness=2).encode(y="wall_ms:Q", tooltip=wall_tooltip)
    whisker = base.mark_rule(color="black").encode(y="wall_min_ms:Q", y2="wall_max_ms:Q", tooltip=wall_tooltip)
    return (bars + whisker + wall).properties(height=320)


def predicted_frame(trace: Trace) -> pd.DataFrame:
    """The raw roofline predictions per pass, next to the measured time."""
    return pd.DataFrame(
        {
            "pass": p.index,
            "phase": p.phase,
            "tokens_in": p.tokens_in,
            "cache_len_after": p.cache_len_after,
            "flops": p.cost.flops,
            "weight_bytes_read": p.cost.weight_bytes_read,
            "kv_bytes_read": p.cost.kv_bytes_read,
            "kv_bytes_written": p.cost.kv_bytes_written,
            "intensity_flops_per_byte": p.cost.arithmetic_intensity,
            "t_weight_read_ms": to_ms(p.cost.t_weight_read_s),
            "t_kv_ms": to_ms(p.cost.t_kv_s),
            "t_compute_ms": to_ms(p.cost.t_compute_s),
            "roofline_ms": to_ms(p.cost.roofline_time_s),
            "bound": p.cost.bound,
            "wall_ms": to_ms(p.wall_s),
            "overhead_ms": to_ms(p.overhead_s),
            "wall_over_roofline": p.wall_s / p.cost.roofline_time_s if p.cost.roofline_time_s > 0 else math.nan,
        }
        for p in trace.passes
    )


# --- the roofline ----------------------------------------------------------------------------------------------------
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


def roofline_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Log-log: the roof min(peak, intensity x bandwidth), its ridge, and each pass coloured by phase."""
    x = alt.X(
        "intensity_flops_per_byte:Q",
        scale=alt.Scale(type="log", nice=False),  # the roof spans the whole axis: it was drawn a decade past the data
        title="arithmetic intensity (FLOP/byte, modelled)",
    )
    y = alt.Y(
        "flops_per_s:Q",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(format="~s"),
        title="FLOP/s (modelled FLOPs / measured time)",
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
    return (roof + ridge_rule + ridge_dot + ridge_label + points).properties(height=360)


# --- utilisation -----------------------------------------------------------------------------------------------------
def median_decode_index(trace: Trace) -> int | None:
    """The pass index of the decode with the median wall time (the lower middle for an even count), None if none."""
    decodes = sorted(trace.decodes, key=lambda p: (p.wall_s, p.index))
    return decodes[(len(decodes) - 1) // 2].index if decodes else None


def utilisation_frame(passes: Sequence[PassRecord], device: DeviceProfile) -> pd.DataFrame:
    """Per pass: achieved FLOP/s against the peak, achieved bandwidth (bytes moved: read + written) against the
    device's bandwidth for that pass's mix (reads at the read-only figure, writes at the copy figure)."""
    return pd.DataFrame(
        {
            "pass": p.index,
            "phase": p.phase,
            "label": f"{p.phase} (pass {p.index})",
            "flops": p.cost.flops,
            "bytes_moved": p.cost.bytes_moved,  # weights read + KV read and written
            "wall_s": p.wall_s,
            "achieved_flops_per_s": p.achieved_flops_per_s,
            # A pass within 10 % under its floor is noise at the roof, not a device beaten: shown as 100 %, flagged.
            "compute_utilisation": min(1.0, p.achieved_flops_per_s / device.peak_flops),
            "achieved_bandwidth_bytes_per_s": p.achieved_bandwidth_bytes_per_s,
            "device_bandwidth_bytes_per_s": pass_bandwidth_bytes_per_s(p.cost, device),
            "bandwidth_utilisation": min(
                1.0, p.achieved_bandwidth_bytes_per_s / pass_bandwidth_bytes_per_s(p.cost, device)
            ),
            "at_the_roof": p.wall_s <= p.cost.roofline_time_s,
            "tokens_per_s": p.tokens_in / p.wall_s if p.wall_s > 0 else 0.0,
        }
        for p in passes
    )


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
            x=alt.X("fraction:Q", axis=alt.Axis(format="%"), title="achieved / device figure (peak FLOP/s, bandwidth)"),
            y=alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=260)),
        )
    )
    bars = base.mark_bar().encode(
        color=phase_color("phase"),
        tooltip=["label:N", "figure:N", alt.Tooltip("fraction:Q", format=".3~p")],
    )
    values = base.mark_text(align="left", dx=4).encode(text=alt.Text("fraction:Q", format=".3~p"))
    return (bars + values).properties(height=alt.Step(28))


# --- the device ------------------------------------------------------------------------------------------------------
def device_frame(device: DeviceProfile) -> pd.DataFrame:
    """The figures the roofline divides by, each with its source, and the microbenchmarks with their spread."""

    def spread(samples: tuple[float, ...], fmt: Callable[[float], str]) -> str:
        return f"best of {len(samples)}; spread {fmt(min(samples))} – {fmt(max(samples))}" if samples else ""

    matmul = f"{device.matmul_n}×{device.matmul_n} {device.dtype} matmul" if device.matmul_n else "matmul"
    copy = f"copy of {human_bytes(device.copy_bytes)}" if device.copy_bytes else "copy"
    read = f"sum over {human_bytes(device.read_bytes)}" if device.read_bytes else "sum"
    rows = [
        ("device", f"{device.name} ({device.kind})", "the run's device"),
        ("dtype", device.dtype, "every FLOP/s figure here is for this dtype"),
        ("peak compute", human_flops(device.peak_flops) + "/s", device.peak_flops_source),
        read_bandwidth_row(device),
        (
            "copy bandwidth (KV cache writes)",
            f"{human_bandwidth(device.bandwidth_bytes_per_s)} ({device.bandwidth_counts})",
            device.bandwidth_source,
        ),
        (
            "ridge point",
            f"{device.ridge_point_flops_per_byte:.1f} FLOP/byte{caveat(device)}",
            f"{MODELLED}: peak compute / read bandwidth (a pass's bytes are mostly reads)",
        ),
        (
            f"achievable compute ({matmul})",
            _rate_or_na(device.measured_flops, lambda v: human_flops(v) + "/s"),
            f"{MEASURED}; {spread(device.flops_samples, lambda v: human_flops(v) + '/s')}",
        ),
        (
            f"achievable bandwidth ({copy}, {device.bandwidth_counts})",
            _rate_or_na(device.measured_bandwidth_bytes_per_s, human_bandwidth),
            f"{MEASURED}; {spread(device.bandwidth_samples, human_bandwidth)}",
        ),
        (
            f"achievable bandwidth ({read}, {READ_BANDWIDTH_COUNTS})",
            _rate_or_na(device.measured_read_bandwidth_bytes_per_s, human_bandwidth),
            f"{MEASURED}; {spread(device.read_bandwidth_samples, human_bandwidth)}",
        ),
        ("measured at", device.measured_at or "n/a", measured_when(device)),
        ("memory", human_bytes(device.memory_bytes) if device.memory_bytes else "n/a", "reported by the system"),
    ]
    if device.busy_note:
        rows.append(("re-measured", device.busy_note, MEASURED))
    rows += trust_rows(device)
    if device.notes:
        rows.append(("notes", device.notes, ""))
    return pd.DataFrame(rows, columns=["figure", "value", "source"])


def trust_rows(device: DeviceProfile) -> list[tuple[str, str, str]]:
    """How busy the machine was while the figures were taken, and whether they can be trusted."""
    rows = []
    if device.benchmark_core_share is not None:
        share = f"{device.benchmark_core_share:.0%} of their cores"
        rows.append(("cores the benchmarks had", share, f"{MEASURED}: process CPU time / (wall × threads)"))
    if device.figures_taken_under_load:
        rows.append(("reliability", UNDER_LOAD, device.figures_note))
    elif device.figures_note:
        rows.append(("reliability", "sound", device.figures_note))
    return rows


def read_bandwidth_row(device: DeviceProfile) -> tuple[str, str, str]:
    """The figure weight and KV reads are divided by; a trace from before it was measured says it uses the copy's."""
    figure = "read bandwidth (weights, KV cache reads)"
    if device.read_bandwidth_from_copy:
        value = f"{human_bandwidth(device.bandwidth_bytes_per_s)} ({device.bandwidth_counts})"
        return figure, value, "the copy figure: this trace was taken before read-only bandwidth was measured"
    value = f"{human_bandwidth(device.effective_read_bandwidth_bytes_per_s)} ({READ_BANDWIDTH_COUNTS})"
    return figure, value, str(device.read_bandwidth_source)


def measured_when(device: DeviceProfile) -> str:
    """When and why the microbenchmarks last ran: the figures are reused across runs, so "before this run" may be
    false."""
    if device.busy_note:
        return (
            "re-measured after this run: a pass ran faster than the figures predicted (they may have been taken busy)"
        )
    return (
        "the latest microbenchmarks in this server process: the first run's after its warm-up, or a re-measure; "
        "reused by later runs while no pass beats them"
    )


def _rate_or_na(value: float | None, fmt: Callable[[float], str]) -> str:
    return "n/a" if value is None else fmt(value)


# --- sentences that state a bound: computed, never asserted -------------------------------------------------------
def bound_sentence(p: PassRecord, device: DeviceProfile) -> str:
    """Which side of the ridge a pass sits on, from its modelled intensity against this device's ridge point."""
    intensity, ridge = p.cost.arithmetic_intensity, device.ridge_point_flops_per_byte
    side = "right" if intensity >= ridge else "left"
    return (
        f"The {p.phase} (pass {p.index}) does {intensity:,.2f} FLOP per byte moved; this device's ridge is "
        f"{ridge:,.1f} FLOP/B, so it sits {side} of the ridge: {marked_bound(p.cost.bound, device)} by the model."
    )


def prefill_ridge_sentence(trace: Trace) -> str:
    """The prompt length from which a prefill is compute-bound: from the same cost model as each pass's bound, so
    this sentence and the prefill's bound sentence never disagree."""
    tokens = prefill_ridge_tokens(trace.model, trace.device)
    device = (
        f"on this device in {trace.device.dtype} (ridge {trace.device.ridge_point_flops_per_byte:,.1f} FLOP/B)"
        + caveat(trace.device)
    )
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


def kv_traffic_formula(trace: Trace, p: PassRecord) -> str:
    """The KV term of pass `p`, written out with its numbers."""
    if trace.model.sliding_layers:
        return sliding_kv_traffic_formula(trace, p)
    per_token = trace.model.kv_bytes_per_token
    before, new, after = p.cache_len_before, p.tokens_in, p.cache_len_after
    return (
        f"transformers' DynamicCache grows by concatenation, so every pass rewrites each layer's whole cache. "
        f"Pass {p.index}: read = (old {before} + new {new}) positions by the update + {after} by attention = "
        f"{before + new + after} × {per_token:,} B = {human_bytes(p.cost.kv_bytes_read)}; written = {after} × "
        f"{per_token:,} B = {human_bytes(p.cost.kv_bytes_written)} (a pre-allocated cache would write only {new})."
    ) + (
        " Here the cache holds MLA's compressed latent: attention's read is kv_b_proj's, which expands every cached "
        "position into per-head K and V each pass (the expanded K and V are activations, not counted)."
        if trace.model.latent_cache
        else ""
    )


def sliding_kv_traffic_formula(trace: Trace, p: PassRecord) -> str:
    """The KV term of a pass on a model with sliding-window layers: each layer's concatenation and attention see what
    it kept (at most window - 1 positions in a sliding layer) plus the new positions."""
    m = trace.model
    seen = p.cost.kv_bytes_written // max(1, m.kv_bytes_per_token_per_layer * p.batch)
    return (
        f"transformers' DynamicCache grows by concatenation; a sliding-window layer keeps only its last window - 1 "
        f"positions. Pass {p.index}: the layers together see {seen:,} positions (every position in the "
        f"{m.full_layers} full layers, at most window - 1 kept + {p.tokens_in} new in the {m.sliding_layers} sliding "
        f"ones) × {m.kv_bytes_per_token_per_layer:,} B per layer and position: read twice (the update, then "
        f"attention) = {human_bytes(p.cost.kv_bytes_read)}, written once = {human_bytes(p.cost.kv_bytes_written)}."
    )
