"""The Step page's view of the request so far: its newest pass, its attention rows (the newest enlarged), its KV cache
and its inter-token latency, with every pass timed while other work ran beside it marked."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.charts import attention as attention_charts
from explorer.charts import cost as charts
from explorer.charts import kv as kv_charts
from explorer.charts import stepping as step_charts
from explorer.core.attention_maps import AttentionMaps
from explorer.core.trace import Trace
from explorer.labs.stepping import SteppedRequest
from explorer.ui.presenter import presenting
from explorer.ui.widgets import chart, current_slos_s, escape_markdown, metrics, table

FIRST_SCREEN_KEY = "step-first-screen"  # presenting: the newest pass, its attention row and the KV growth
NEWEST_ROWS_KEY = "step-newest-rows"  # the strip of the map's newest rows
KV_GROWTH_KEY = "step-kv-growth"
# Their plot height when presenting: under the title, caption, folded prompt, buttons and the newest pass's line
# (about 300 px at 1280 x 720), each chart with its axes and legends ends above 720 px (measured in
# tests/test_browser_legibility.py and tests/test_browser_step.py); the whole map and its pickers go below.
FIRST_SCREEN_CHART_PX = 220
DISTURBED_WHERE = f"each is marked {step_charts.DISTURBED_MARK} over its bar in the inter-token latency chart"


def step_view(current: SteppedRequest) -> None:
    """The stepped request so far: its newest pass in one line, the newest rows of its attention map enlarged and its
    KV cache growing (presenting: side by side, in the first screen), its figures and tokens, the whole map, the
    cache per layer, the gaps between its tokens and each pass's time against the roofline."""
    trace, maps = current.to_trace(), current.attention()
    first = st.container(key=FIRST_SCREEN_KEY)
    first.markdown(step_charts.newest_pass_line(trace, escape_markdown))
    if presenting():
        newest_box, kv_box = first.columns(2)
    else:
        metrics(step_charts.running_figures(trace, current.done))
        st.code(step_charts.tokens_line(trace), language=None, wrap_lines=True)
        newest_box = kv_box = None
    rows = step_attention(maps)
    if newest_box is not None and kv_box is not None:
        with newest_box:
            step_newest_rows(rows, FIRST_SCREEN_CHART_PX)
        with kv_box:
            step_kv_growth(trace, FIRST_SCREEN_CHART_PX, legend_orient="bottom")
        metrics(step_charts.running_figures(trace, current.done))
        st.code(step_charts.tokens_line(trace), language=None, wrap_lines=True)
    else:
        step_newest_rows(rows)
        step_kv_growth(trace)
    last = trace.passes[-1]
    table(step_charts.top5_frame(last), f"Pass {last.index} sampled its token from these five.", "measured")
    step_kv_layers(trace)
    step_itl(trace)
    step_times(trace)


def step_attention(maps: AttentionMaps) -> pd.DataFrame:
    """The prefill's map and the decode rows under it, for the chosen layer and head (pickers under the map); the
    frame it drew, for the strip of its newest rows."""
    drawn_here = st.container()  # filled after the pickers are read, so that the map stands above them
    layer_col, head_col = st.columns(2)
    layer = layer_col.selectbox("Layer", maps.layers, index=len(maps.layers) // 2, key="step-layer")
    head = head_col.selectbox("Head", list(range(maps.heads)), key="step-head")
    frame = step_charts.attention_rows_frame(maps, layer, head)
    with drawn_here:
        chart(
            attention_charts.prefill_chart(frame),
            frame,
            "step-attention",
            f"Layer {layer}, head {head}: the prefill's T × T map with its causal mask, then one row per decode pass "
            "appended below it: one key longer each time, no mask needed. "
            + attention_charts.sink_sentence(maps, layer, head),
            "measured (captured attention probabilities, untimed eager shadow)",
        )
    return frame


def step_newest_rows(rows: pd.DataFrame, height_px: int | None = None) -> None:
    """The map's newest rows, enlarged: the row the last pass computed at the bottom."""
    newest = step_charts.newest_rows_frame(rows)
    with st.container(key=NEWEST_ROWS_KEY):
        chart(
            step_charts.newest_rows_chart(newest, height_px or 220),
            newest,
            "step-newest-rows",
            "The newest rows of the map above, enlarged: the bottom row is the last pass's query attending to every "
            "position in the cache (brighter = more attention, √ scale; grey = masked).",
            "measured (captured attention probabilities, untimed eager shadow)",
        )


def step_kv_growth(trace: Trace, height_px: int | None = None, legend_orient: str = "top") -> None:
    """The cache as it grew pass by pass."""
    growth = kv_charts.growth_frame(trace)
    with st.container(key=KV_GROWTH_KEY):
        chart(
            kv_charts.growth_chart(growth, height_px or 380, legend_orient),
            growth,
            "step-kv",
            f"Each decode pass adds exactly one position: {trace.model.kv_bytes_per_token:,} B across all layers"
            + (
                f" until the sliding layers hold their window, then {trace.model.kv_bytes_per_token_full_layers:,} B."
                if trace.model.sliding_layers
                else "."
            ),
            "measured: bytes of the real cache tensors",
        )


def step_kv_layers(trace: Trace) -> None:
    """What the last pass left in each layer (the prefill: what it wrote)."""
    last = trace.passes[-1]
    layers = kv_charts.layers_frame(trace, last.index)
    written = (
        f"What the prefill wrote: {last.cache_len_after} positions in every layer"
        if last.is_prefill
        else f"After pass {last.index}: the prefill's positions plus one per decode, {last.cache_len_after} in all"
    )
    chart(
        kv_charts.layers_chart(layers),
        layers,
        "step-kv-layers",
        f"{written}, each layer the same size (the dashed line is the formula's per-layer bytes).",
        "bars measured: bytes of each layer's K and V tensors · line modelled",
    )


def step_itl(trace: Trace) -> None:
    """The gaps between the tokens so far, against the session's ITL SLO (set on the Latency page), each disturbed
    pass marked."""
    disturbed = step_charts.disturbed_sentence(trace.passes, DISTURBED_WHERE)
    if disturbed:
        st.warning(disturbed)
    if not trace.itl_s:
        st.info("One token so far, so no inter-token latency yet: press **Next token** for the first decode pass.")
        return
    itl_slo_s = current_slos_s()[1]
    itl = step_charts.step_itl_frame(trace, itl_slo_s)
    chart(
        step_charts.step_itl_chart(itl, itl_slo_s),
        itl,
        "step-itl",
        "Each decode pass's gap since the previous token, against the ITL SLO of the Latency page: the pause between "
        f"clicks is not counted (the request's clock stops between passes); {step_charts.DISTURBED_MARK} marks a "
        "pass timed while other work ran beside it.",
        "measured: the time between consecutive sampled tokens, and the CPU other work used beside each pass",
    )


def step_times(trace: Trace) -> None:
    """Each pass's time against the roofline, as on the Cost page."""
    timing = charts.time_split_frame(trace)
    disturbed = len(trace.disturbed_passes)
    chart(
        charts.time_split_chart(timing),
        timing,
        "step-times",
        "Each pass's measured time (black tick) against the roofline model's weight, KV and compute times, as on the "
        "Cost page" + (f" ({disturbed} of these passes were disturbed: see the warning above)." if disturbed else "."),
        "wall measured · weight, KV and compute modelled · overhead = measured − modelled",
    )
