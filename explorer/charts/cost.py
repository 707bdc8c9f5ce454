"""The Cost page's time split: where each pass's time goes (the roofline's weight, KV and compute times against the
measured time, the rest overhead), the page's takeaway computed from it, and the KV-traffic term written out.

The roofline chart and utilisation are in `explorer.charts.roofline`, the device table in `explorer.charts.device`.
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from explorer.charts.common import PHASE_COLOR, TWO_LINE_LABEL
from explorer.charts.kv import kv_traffic_text
from explorer.core.floor_share import peak_words
from explorer.core.roofline import LAYOUT_WORDS
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import human_bandwidth, human_bytes, human_flops, ms, short_time, to_ms

if TYPE_CHECKING:  # the takeaway reads a profile's fields; it never needs torch
    from explorer.core.pass_profile import PassProfile

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
PROFILE_GROUPS_SAID = 3  # the takeaway names the profiled pass's largest groups, this many


def _vega_list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def segments_folded(base: alt.Chart) -> alt.Chart:
    """A pass's time split, one row per segment (`segment_ms`), named (`part`) and ordered (`part_order`) as drawn."""
    return base.transform_fold(SEGMENT_COLUMNS, as_=["segment", "segment_ms"]).transform_calculate(
        part=f"{_vega_list(SEGMENT_LABELS)}[indexof({_vega_list(SEGMENT_COLUMNS)}, datum.segment)]",
        part_order=f"indexof({_vega_list(SEGMENT_COLUMNS)}, datum.segment)",
    )


def segment_color() -> alt.Color:
    """The segments' colours and their legend, the same on every chart that splits a pass's time."""
    return alt.Color(
        "part:N",
        scale=alt.Scale(domain=SEGMENT_LABELS, range=SEGMENT_RANGE),
        title=None,
        legend=alt.Legend(orient="top", columns=2, labelLimit=0, labelExpr=TWO_LINE_LABEL),
    )


NARROW_LABEL_CHARS = 20  # a segment's name per legend line beside another chart: two columns in 430 px at 18 px type


def narrow_segment_color() -> alt.Color:
    """The segments' colours for a time split beside another chart (Cost's, next to the roofline): each name without
    its "(modelled)", which the chart's source line says, wrapped to lines of NARROW_LABEL_CHARS, so the legend's two
    columns fit two thirds of the page with the sidebar open (the full names, two lines each, need about 560 px)."""
    names = [label.rsplit(" (", 1)[0] for label in SEGMENT_LABELS]
    wrapped = {label: textwrap.wrap(name, NARROW_LABEL_CHARS) for label, name in zip(SEGMENT_LABELS, names)}
    return alt.Color(
        "part:N",
        scale=alt.Scale(domain=SEGMENT_LABELS, range=SEGMENT_RANGE),
        title=None,
        legend=alt.Legend(orient="top", columns=2, labelLimit=0, labelExpr=f"{json.dumps(wrapped)}[datum.label]"),
    )


def median_decode_index(trace: Trace) -> int | None:
    """The page's one default decode pass, for every section that shows one: the decode with the median wall time (the
    lower middle for an even count), None if none."""
    decodes = sorted(trace.decodes, key=lambda p: (p.wall_s, p.index))
    return decodes[(len(decodes) - 1) // 2].index if decodes else None


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


def time_split_chart(frame: pd.DataFrame, narrow: bool = False) -> alt.LayerChart:
    """Stacked modelled segments plus overhead per pass, outlined in the phase colour, with a tick at the wall time.
    `narrow`: beside another chart, with the shorter legend of `narrow_segment_color`."""
    base = alt.Chart(frame).encode(x=alt.X("pass:O", title="pass (0 = prefill)", axis=alt.Axis(labelAngle=0)))
    bars = (
        segments_folded(base)
        .mark_bar(strokeWidth=1.5)
        .encode(
            y=alt.Y("segment_ms:Q", stack="zero", title="time (ms)"),
            color=narrow_segment_color() if narrow else segment_color(),
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


# --- the takeaway: computed from the run, true whatever the overhead ----------------------------------------------
def brief_time(seconds: float) -> str:
    """Three significant figures in ms (127 ms, 3.18 ms, 0.0912 ms), in s from a second up: a first line stays short."""
    return short_time(seconds) if seconds >= 1 else f"{to_ms(seconds):,.3g} ms"


def decode_median_text(trace: Trace, measured: str = "measured") -> str | None:
    """The decode median as every page writes it: '86.4 ms (measured, median of 14)' (`Trace.decode_median_s` over
    every repeat's decode passes, three significant figures; `measured`: "recorded" for a recording); None without a
    decode pass. One wording and one rounding, so Cost, Latency and At scale show the same figure for one run; short,
    so Cost's first line stays one line when presenting."""
    median_s = trace.decode_median_s
    if median_s is None:
        return None
    return f"{brief_time(median_s)} ({measured}, median of {len(trace.all_decodes):,})"


def per_token_sentence(trace: Trace, measured: str = "measured") -> str:
    """Each phase's measured time per token it processed, the decode's as the decode median: the lesson that holds
    whatever the overhead, short enough to be the page's first line. `measured` names the times ("recorded": a
    recording)."""
    prompt, prefill_s = trace.prompt_len, trace.pass_wall_spread(0).median
    sentence = f"A prefill: {prompt} tokens in {brief_time(prefill_s)}, {brief_time(prefill_s / prompt)} a token"
    decode = decode_median_text(trace, measured)
    if decode is None:
        return sentence + f" ({measured}); this run made one token: no decode pass to set beside it."
    return sentence + f"; a decode pass: {decode}."


def overhead_sentence(trace: Trace, decode_index: int | None, profile: PassProfile | None) -> str:
    """Overhead's share of each phase's measured time, and where the profiler (when it has run) says it goes."""
    shares = []
    for index in (0, decode_index):
        if index is None:
            continue
        # The decode's time is the decode median, as the first line says it (its pass's floor: every decode's is
        # near the same); the prefill's its median over repeats.
        p = trace.passes[index]
        wall_s = trace.pass_wall_spread(0).median if p.is_prefill else trace.decode_median_s
        overhead_s = max(0.0, wall_s - p.cost.roofline_time_s)
        shares.append(f"{overhead_s / wall_s:.0%} of the {p.phase} ({brief_time(overhead_s)} of {brief_time(wall_s)})")
    sentence = "Overhead, the measured time the roofline does not explain, is " + " and ".join(shares) + "."
    if profile is None:
        return sentence + " The profiler below replays a pass and says where that time goes."
    parts = sorted([(g.self_s, g.name) for g in profile.groups] + [(profile.remainder_s, profile.remainder_name)])
    top = [f"{name} {s / profile.wall_s_profiled:.0%}" for s, name in reversed(parts[-PROFILE_GROUPS_SAID:])]
    return sentence + f" Profiled, pass {profile.pass_index}'s time went to " + ", ".join(top) + " (measured)."


def ridge_line(trace: Trace) -> str:
    """The page's clinching line, beside its time split: the decode's modelled FLOP per byte against this device's
    ridge, and so its bound ("Decode (pass 25): 0.50 FLOP per byte against a ridge of 10.8: memory-bound
    (modelled)."), short enough for one line when presenting; the prefill's in a one-token run."""
    index = median_decode_index(trace)
    p = trace.passes[0 if index is None else index]
    ridge = trace.device.ridge_point_flops_per_byte
    return (
        f"{p.phase.capitalize()} (pass {p.index}): {p.cost.arithmetic_intensity:,.2f} FLOP per byte against a ridge "
        f"of {ridge:,.1f}: {p.cost.bound}-bound (modelled)."
    )


def floor_sentence(trace: Trace, decode_index: int | None) -> str:
    """ "Memory-bound" said as what it is: the model's floor, not what this device's measured time is made of."""
    p = trace.passes[0 if decode_index is None else decode_index]
    c, device = p.cost, trace.device
    if c.bound == "memory":
        made_of = (
            f"reading {human_bytes(c.weight_bytes_read)} of weights and moving "
            f"{kv_traffic_text(c.kv_bytes_moved, p.kv_cache_bytes)} at "
            f"{human_bandwidth(device.effective_read_bandwidth_bytes_per_s)}"
        )
    else:
        made_of = f"its {human_flops(c.flops)} at {human_flops(device.peak_flops)}/s"
    wall_s = trace.pass_wall_spread(0).median if p.is_prefill else trace.decode_median_s  # the decode median
    ratio = wall_s / c.roofline_time_s
    return (
        f"By the roofline model the {p.phase} (pass {p.index}) is {c.bound}-bound: its floor, "
        f"{ms(c.roofline_time_s)}, is {made_of} (modelled). That is the model's floor, the least the pass could "
        f"take; measured, it took {ratio:,.1f}× that ({peak_words(device)})."
    )


def takeaway(trace: Trace, profile: PassProfile | None = None) -> list[str]:
    """What the Cost page says under its first line (`per_token_sentence`), computed from the run: the two phases' time
    per token compared, overhead's share and where it goes (the profile's groups, when `profile` is this run's), and
    "memory-bound" as the model's floor."""
    index = median_decode_index(trace)
    shared = f"Both read every weight once; the prefill shares that read among its {trace.prompt_len} tokens."
    if index is not None:
        per_prefill_token_s = trace.pass_wall_spread(0).median / trace.prompt_len
        ratio = trace.decode_median_s / per_prefill_token_s
        shared = f"Per token, a decode pass (the decode median) took {ratio:,.0f}× a prefill's. " + shared
    return [shared, overhead_sentence(trace, index, profile), floor_sentence(trace, index)]


MAIN_CHART_NOTICE = (
    "What to notice: the prefill's bar stands beside one-token decode bars; grey is what the model does not explain, "
    "blue the weight and KV reads it predicts, purple the maths it cannot hide behind them; the black tick is the "
    "measured time."
)


# --- the KV term, written out -----------------------------------------------------------------------------------------
def kv_traffic_formula(trace: Trace, p: PassRecord) -> str:
    """The KV term of pass `p`, written out with its numbers, for the cache layout it was costed with."""
    if p.cost.cache_layout != "concatenating":
        return (
            f"Costed for {LAYOUT_WORDS[p.cost.cache_layout]}. Pass {p.index}: read "
            f"{human_bytes(p.cost.kv_bytes_read)}, written {human_bytes(p.cost.kv_bytes_written)}."
        )
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
