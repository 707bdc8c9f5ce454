"""The Step page's view of the request so far: its newest pass, its attention rows (the newest enlarged), its KV cache
and its inter-token latency, with every pass timed while other work ran beside it marked."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.charts import attention as attention_charts
from explorer.charts import cost as charts
from explorer.charts import kv as kv_charts
from explorer.charts import step_mode as step_charts
from explorer.core.attention_maps import AttentionMaps
from explorer.core.trace import Trace
from explorer.labs.stepped_view import SteppedView
from explorer.ui.presenter import presenting
from explorer.ui.slo_state import current_slos_s
from explorer.ui.widgets import chart, escape_markdown, metrics, table

BUTTONS_KEY = "step-buttons"  # the row of Next token, Run to end, Autoplay and Reset
FIRST_SCREEN_KEY = "step-first-screen"  # presenting: the newest pass, its attention row and the KV growth
NEWEST_ROWS_KEY = "step-newest-rows"  # the strip of the map's newest rows
KV_GROWTH_KEY = "step-kv-growth"
ITL_KEY = "step-itl-chart"
TIMES_KEY = "step-times-chart"
WHOLE_REQUEST_KEY = "step-whole-request"  # presenting: the expander of what lies below the fold
WHOLE_REQUEST = "The whole request: attention map, top five, cache per layer, pass times"
# Their plots' height when presenting (axes and legends add to it): under the title, caption, folded prompt, buttons and
# the newest pass's line (about 320 px at 1280 x 720), each chart with its axes and legends ends above 720 px
# (measured in tests/test_browser_legibility.py and tests/test_browser_step.py); the figures, the pickers, the gaps and
# the folded rest go below. Four rows of the strip in 170 px (`ROW_PX_PRESENTING` each), where a row of the whole map
# is a few pixels.
FIRST_SCREEN_CHART_PX = 170
ROW_PX_PRESENTING = 40  # a strip row's height for the presenter theme's 18 px labels, with room for any glyph
DISTURBED_WHERE = f"each is marked {step_charts.DISTURBED_MARK} over its bar in the inter-token latency chart"


def step_view(current: SteppedView) -> None:
    """The stepped request so far: its newest pass in one line, the newest rows of its attention map enlarged and its
    KV cache growing (presenting: side by side, in the first screen, and sent first), its figures and tokens, the
    whole map, the cache per layer, the gaps between its tokens and each pass's time against the roofline.

    Presenting, the whole map, the top five, the cache per layer and the pass times fold into one expander that
    draws only while open: a Next token then redraws the first screen, the figures and the gaps, not four charts
    below the fold that a room does not see: with them drawn, 8/8, 6/8 and 3/8 presses landed within the pass +
    0.3 s in three runs of benchmarks/step_latency.py; folded (with the owner client's fix), 8/8 in each of three
    (docs/measurements.md, 2026-11-29)."""
    trace, maps = current.trace, current.maps
    first = st.container(key=FIRST_SCREEN_KEY)
    first.markdown(step_charts.newest_pass_line(trace, escape_markdown))
    presenting_now = presenting()
    newest_box, kv_box = first.columns(2) if presenting_now else (None, None)
    figures_box = st.container()
    map_box = None if presenting_now else st.container()  # presenting, the map is folded under the gaps
    layer, head = step_pickers(maps)  # drawn under the map (presenting: above the fold), read before it is drawn
    rows = step_charts.attention_rows_frame(maps, layer, head)
    with newest_box or st.container():
        step_newest_rows(rows, FIRST_SCREEN_CHART_PX if presenting_now else None)
    with kv_box or st.container():
        step_kv_growth(trace, FIRST_SCREEN_CHART_PX if presenting_now else None, "bottom" if presenting_now else "top")
    with figures_box:
        metrics(step_charts.running_figures(trace, current.done))
        st.code(step_charts.tokens_line(trace), language=None, wrap_lines=True)
    if presenting_now:
        step_itl(trace)  # the gaps stay drawn when presenting (issue 31): the rest waits for the expander
        whole = st.expander(WHOLE_REQUEST, key=WHOLE_REQUEST_KEY, on_change="rerun")
        if not whole.open:
            return
        map_box = details_box = whole
    else:
        details_box = st.container()
    with map_box:  # presenting, the fold (set above)
        step_attention(maps, rows, layer, head)
    with details_box:
        last = trace.passes[-1]
        table(step_charts.top5_frame(last), f"Pass {last.index} sampled its token from these five.", "measured")
        step_kv_layers(trace)
        if not presenting_now:
            step_itl(trace)
        step_times(trace)


def step_pickers(maps: AttentionMaps) -> tuple[int, int]:
    """The layer and head the map and its newest rows show."""
    layer_col, head_col = st.columns(2)
    layer = layer_col.selectbox("Layer", maps.layers, index=len(maps.layers) // 2, key="step-layer")
    head = head_col.selectbox("Head", list(range(maps.heads)), key="step-head")
    return layer, head


def step_attention(maps: AttentionMaps, frame: pd.DataFrame, layer: int, head: int) -> None:
    """The prefill's map and the decode rows under it, for the chosen layer and head."""
    chart(
        attention_charts.prefill_chart(frame),
        frame,
        "step-attention",
        f"Layer {layer}, head {head}: the prefill's T × T map with its causal mask, then one row per decode pass "
        "appended below it: one key longer each time, no mask needed. "
        + attention_charts.sink_sentence(maps, layer, head),
        "measured (captured attention probabilities, untimed eager shadow)",
    )


def step_newest_rows(rows: pd.DataFrame, height_px: int | None = None) -> None:
    """The map's newest rows, enlarged: the row the last pass computed at the bottom. Fitted into `height_px` (the
    presenter's first screen), as many rows as its large labels have room for: six in 170 px made a fallback font's
    glyphs (⏎) overlap their neighbours' labels."""
    count = step_charts.NEWEST_ROWS if height_px is None else max(2, height_px // ROW_PX_PRESENTING)
    newest = step_charts.newest_rows_frame(rows, min(count, step_charts.NEWEST_ROWS))
    with st.container(key=NEWEST_ROWS_KEY):
        chart(
            step_charts.newest_rows_chart(newest, height_px or 180),
            newest,
            "step-newest-rows",
            "The newest rows of the attention map, enlarged: the bottom row is the last pass's query attending to "
            "every position in the cache (brighter = more attention, √ scale; grey = masked).",
            "measured (captured attention probabilities, untimed eager shadow)",
        )


def step_kv_growth(trace: Trace, height_px: int | None = None, legend_orient: str = "top") -> None:
    """The cache as it grew pass by pass."""
    growth = kv_charts.growth_frame(trace)
    drawn = kv_charts.growth_chart(growth, height_px or 380, legend_orient)
    with st.container(key=KV_GROWTH_KEY):
        chart(
            drawn if height_px is None else drawn.properties(autosize=step_charts.FIT_WIDTH),
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
    with st.container(key=ITL_KEY):
        chart(
            step_charts.step_itl_chart(itl, itl_slo_s),
            itl,
            "step-itl",
            "Each decode pass's gap since the previous token, against the ITL SLO of the Latency page: the pause "
            "between clicks is not counted (the request's clock stops between passes); "
            f"{step_charts.DISTURBED_MARK} marks a pass timed while other work ran beside it.",
            "measured: the time between consecutive sampled tokens, and the CPU other work used beside each pass",
        )


def step_times(trace: Trace) -> None:
    """Each pass's time against the roofline, as on the Cost page."""
    timing = charts.time_split_frame(trace)
    disturbed = len(trace.disturbed_passes)
    with st.container(key=TIMES_KEY):
        chart(
            step_charts.step_times_chart(timing),
            timing,
            "step-times",
            "Each pass's measured time (black tick) against the roofline model's weight, KV and compute times, as on "
            "the Cost page"
            + (f" ({disturbed} of these passes were disturbed: see the warning above)." if disturbed else "."),
            "wall measured · weight, KV and compute modelled · overhead = measured − modelled",
        )
