"""The Attention page's sections: a capture that was cut short, run again; the layer and head picker, the prefill map
under its mask, the decode rows, and every head of a layer (a secondary section: collapsed in presenter mode)."""

from __future__ import annotations

import streamlit as st

from explorer.charts import attention as charts
from explorer.core.attention_maps import AttentionMaps
from explorer.core.trace import ModelInfo, Trace
from explorer.ui.chart_first import ChartFirst
from explorer.ui.runner import capture_again
from explorer.ui.state import RunResult, current_run
from explorer.ui.widgets import chart, secondary, window_slider

CUT_SHORT_LINE = "The attention capture was cut short by a click: replaying the run's tokens again now (untimed)."
STILL_REPLAYING_LINE = (
    "The attention capture is still replaying (a click left the page while it ran): its maps follow when it ends."
)
CAPTURE_NOW = "Capture now"
REPLAY_WAIT_S = 120.0  # at most, for a replay a click left running (48 tokens: over 30 s on 2 busy cores)


def captured(result: RunResult) -> RunResult:
    """`result`, or where its capture was cut short (a click during its replay), the same run with its maps. A replay
    the click left running (its script stopped, its thread not yet) is waited for, at most `REPLAY_WAIT_S`; one that
    ended without maps is replayed now. Each is said in one line. Where the replay is refused (one line says why), cut
    short again, or still running after the wait, a "Capture now" button, whose click opens the page again; the page
    stops there, waiting for nothing."""
    if not result.capture_cut_short or result.capture_owed is None:
        return result
    owed = result.capture_owed
    if owed.replaying:
        st.caption(STILL_REPLAYING_LINE)
        with st.spinner("Waiting for the replay to end…"):
            owed.wait(REPLAY_WAIT_S)
        again = current_run() or result  # its maps taken in
    else:
        st.caption(CUT_SHORT_LINE)
        again = capture_again(result) or current_run() or result
    if again.capture_cut_short:
        st.button(CAPTURE_NOW, key="attention-capture-now", help="Replays the run's tokens, untimed")
        st.stop()
    return again


def layer_and_head(maps: AttentionMaps, model: ModelInfo, layout: ChartFirst) -> tuple[int, int]:
    """The layer and query head to show; under grouped-query attention each head names the KV head it reads."""
    group = max(1, model.heads // max(1, model.kv_heads))
    left, right = layout.controls().columns(2)
    layer = left.selectbox("Layer", maps.layers, index=len(maps.layers) // 2, key=f"attention-layer-{len(maps.layers)}")
    head = right.selectbox(
        "Head",
        list(range(maps.heads)),
        format_func=lambda h: f"head {h} (reads KV head {h // group})" if model.is_gqa else f"head {h}",
        key=f"attention-head-{maps.heads}",
    )
    return layer, head


def why_no_mask(maps: AttentionMaps, trace: Trace, layout: ChartFirst) -> None:
    """Why decode needs no mask, and where the maps come from: above the heatmap on a laptop, below it (collapsed)
    when presenting."""
    with layout.explanation("Why decode needs no mask", heading=False):
        st.markdown(charts.NO_MASK_IN_DECODE)
        with st.expander("How the mask is applied, precisely"):
            st.markdown(charts.MASK_PRECISELY)
        same = maps.same_tokens_as(trace)
        if same is not None:
            st.caption(
                "These maps come from an untimed replay of the run's own tokens with eager attention; at every pass "
                f"it picked {'the same tokens as' if same else 'DIFFERENT tokens from'} the timed run — *measured*"
            )


def prefill_section(maps: AttentionMaps, layer: int, head: int, kv_heads: int, layout: ChartFirst) -> None:
    """The page's main chart: the prefill map of one head under its causal mask, a window of a long prompt."""
    T = maps.prompt_len
    with layout.controls():
        # A T x T map of a long prompt is too many rectangles for a browser: a diagonal window at full resolution.
        start = window_slider(
            "Window start (position)",
            T,
            charts.WINDOW_POSITIONS,
            "attention-window",
            "The window is the block of query rows and key columns around the diagonal, where the mask edge is.",
        )
        start, stop = charts.window_bounds(T, start)
        if stop - start < T:
            st.markdown(
                f"Showing query and key positions **{start}–{stop - 1} of {T}** at full resolution "
                "(the whole-prompt view below pools all of them)."
            )
        elif not layout.presenting:
            st.markdown(f"Showing all **{T}** prompt positions.")
    frame = charts.prefill_frame(maps, layer, head, start, stop)
    title = (
        f"Prefill, layer {layer} head {head}: {T} tokens at once, under a causal mask"
        if layout.presenting
        else "Prefill: every prompt token at once, under a causal mask"
    )
    layout.chart(
        charts.prefill_chart(frame, layout.main_chart_px),
        frame,
        f"prefill-layer{layer}-head{head}-{start}",
        "Each row is one query's softmax and sums to 1; the grey upper triangle is the causal mask: "
        "a token may not look at later tokens, so those probabilities are exactly 0. "
        + charts.sink_sentence(maps, layer, head),
        "measured (captured attention probabilities, float16)",
        title,
    )
    facts = charts.mask_facts(maps, layer)
    layout.main.caption(
        f"Layer {layer}, all {maps.heads} heads: {facts.masked_cells:,} masked cells, the largest probability among "
        f"them is {facts.max_masked_prob:g}; every row sums to 1 within {facts.max_row_sum_error:.1e} (float16 "
        "rounding) — *measured*"
    )
    if T > charts.WINDOW_POSITIONS:
        with secondary("The whole prompt, max-pooled"):
            pooled_section(maps, layer, head, kv_heads)


def pooled_section(maps: AttentionMaps, layer: int, head: int, kv_heads: int) -> None:
    pooled = charts.pooled_frame(maps, layer, [head], charts.POOLED_SIDE, kv_heads)
    block = int(pooled["block"].iloc[0])
    st.markdown(f"Each cell is the largest probability in a block of {block} × {block} positions.")
    chart(
        charts.pooled_chart(pooled),
        pooled,
        f"prefill-pooled-layer{layer}-head{head}",
        "The same head over all positions: grey blocks lie entirely in the future; bright columns are keys "
        "that many queries attend to.",
        "measured (captured probabilities, max-pooled)",
    )


def decode_section(maps: AttentionMaps, layer: int, head: int) -> None:
    st.subheader("Decode: one query row per pass, over the cache")
    steps = len(maps.decode[layer])
    if steps == 0:
        st.info("This run generated one token, so there was no decode pass: raise max new tokens and run again.")
        return
    step_start = window_slider("First decode step shown", steps, charts.DECODE_MAX_STEPS, "attention-steps")
    step_stop = min(steps, step_start + charts.DECODE_MAX_STEPS)
    key_bin = charts.decode_key_bin(charts.decode_cache_lens(maps, layer)[step_start:step_stop])
    shown = f"decode steps **{step_start}–{step_stop - 1} of {steps}**"
    if key_bin > 1:
        st.markdown(f"Showing {shown}; each cell is the largest probability among {key_bin} consecutive keys.")
    else:
        st.markdown(f"Showing {shown}, one cell per cached key.")
    frame = charts.decode_frame(maps, layer, head, step_start, step_stop, key_bin)
    chart(
        charts.decode_chart(frame, maps.prompt_len),
        frame,
        f"decode-layer{layer}-head{head}-{step_start}",
        "Each decode pass adds one row, one key longer than the last: a growing staircase. No mask is needed, "
        "because the cache holds only the past.",
        "measured (captured attention probabilities, float16)",
    )


def heads_section(maps: AttentionMaps, model: ModelInfo, layer: int) -> None:
    """Every head of the layer as small multiples, as many as the model has (32 heads get coarser blocks)."""
    with secondary(f"All {maps.heads} heads of layer {layer}"):
        side = charts.head_overview_side(maps.heads)
        frame = charts.pooled_frame(maps, layer, list(range(maps.heads)), side, model.kv_heads)
        block = int(frame["block"].iloc[0])
        if block > 1:
            st.markdown(
                f"Each head's prefill map, **max-pooled** to blocks of {block} × {block} positions "
                "(each cell is the largest probability in its block)."
            )
        else:
            st.markdown("Each head's prefill map at full resolution (no pooling needed at this prompt length).")
        chart(
            charts.heads_chart(frame),
            frame,
            f"heads-layer{layer}",
            charts.heads_caption(model),
            "measured (captured probabilities, max-pooled)",
        )
