"""The Step page's view of the request so far: its attention rows, its KV cache and its inter-token latency."""

from __future__ import annotations

import streamlit as st

from explorer.charts import attention as attention_charts
from explorer.charts import cost as charts
from explorer.charts import kv as kv_charts
from explorer.charts import latency as latency_charts
from explorer.charts import stepping as step_charts
from explorer.core.trace import Trace
from explorer.labs.stepping import SteppedRequest
from explorer.ui.presenter import presenting
from explorer.ui.widgets import chart, current_slos_s, metrics, table

FIRST_SCREEN_KEY = "step-first-screen"  # presenting: the attention map and the KV growth, in the first screen
# Their plot height then: under the title, caption, folded prompt and buttons (about 260 px at 1280 x 720), each chart
# with its axes and legends ends above 720 px (measured in tests/test_browser_legibility.py); the pickers go below.
FIRST_SCREEN_CHART_PX = 280


def step_view(current: SteppedRequest) -> None:
    """The stepped request so far: its figures and tokens, the last pass's top five, its attention rows, its KV cache
    (growing, and per layer), the gaps between its tokens and each pass's time against the roofline."""
    trace = current.to_trace()
    if presenting():  # the room first sees the map gain a row and the cache gain a position, side by side
        left, right = st.container(key=FIRST_SCREEN_KEY).columns(2)
        with left:
            step_attention(current, FIRST_SCREEN_CHART_PX)
        with right:
            step_kv_growth(trace, FIRST_SCREEN_CHART_PX, legend_orient="bottom")
    metrics(step_charts.running_figures(trace, current.done))
    st.code(step_charts.tokens_line(trace), language=None, wrap_lines=True)
    last = trace.passes[-1]
    table(step_charts.top5_frame(last), f"Pass {last.index} sampled its token from these five.", "measured")
    if not presenting():
        step_attention(current)
        step_kv_growth(trace)
    step_kv_layers(trace)
    step_itl(trace)
    timing = charts.time_split_frame(trace)
    chart(
        charts.time_split_chart(timing),
        timing,
        "step-times",
        "Each pass's measured time (black tick) against the roofline model's weight, KV and compute times, as on the "
        "Cost page.",
        "wall measured · weight, KV and compute modelled · overhead = measured − modelled",
    )


def step_attention(current: SteppedRequest, height_px: int | None = None) -> None:
    """The prefill's map and the decode rows under it, for the chosen layer and head. With `height_px` (presenting:
    half the first screen) the map is drawn first and compact, its pickers under it."""
    maps = current.attention()
    drawn_here = st.container()  # filled after the pickers are read, so that the map stands above them when compact
    layer_col, head_col = st.columns(2)
    layer = layer_col.selectbox("Layer", maps.layers, index=len(maps.layers) // 2, key="step-layer")
    head = head_col.selectbox("Head", list(range(maps.heads)), key="step-head")
    frame = step_charts.attention_rows_frame(maps, layer, head)
    compact = height_px is not None
    colours = "Brighter = more attention (√ scale), grey = masked. " if compact else ""
    with drawn_here if compact else st.container():
        chart(
            attention_charts.prefill_chart(frame, height_px, compact=compact),
            frame,
            "step-attention",
            f"Layer {layer}, head {head}: the prefill's T × T map with its causal mask, then one row per decode pass "
            f"appended below it: one key longer each time, no mask needed. {colours}"
            + attention_charts.sink_sentence(maps, layer, head),
            "measured (captured attention probabilities, untimed eager shadow)",
        )


def step_kv_growth(trace: Trace, height_px: int | None = None, legend_orient: str = "top") -> None:
    """The cache as it grew pass by pass."""
    growth = kv_charts.growth_frame(trace)
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
    """The gaps between the tokens so far, against the session's ITL SLO (set on the Latency page)."""
    if not trace.itl_s:
        st.info("One token so far, so no inter-token latency yet: press **Next token** for the first decode pass.")
        return
    itl_slo_s = current_slos_s()[1]
    itl = latency_charts.itl_frame(trace, itl_slo_s)
    chart(
        latency_charts.itl_chart(itl, itl_slo_s),
        itl,
        "step-itl",
        "Each decode pass's gap since the previous token, against the ITL SLO of the Latency page: the pause between "
        "clicks is not counted (the request's clock stops between passes).",
        "measured: the time between consecutive sampled tokens",
    )
