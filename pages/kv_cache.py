"""The KV cache: its bytes measured pass by pass and layer by layer, the formula behind them, and a projection."""

import streamlit as st

from explorer import ui
from explorer.charts import kv as charts
from explorer.core.report import cache_holds_text
from explorer.core.units import human_bytes

result, layout = ui.chart_first_page(
    "The KV cache",
    "Every cached position keeps its K and V in every layer: the same bytes per token, in every pass.",
    "Prefill writes the whole prompt at once, each decode pass appends one position.",
)
trace = result.trace
model = trace.model
cache_len = trace.passes[-1].cache_len_after
per_token = model.kv_bytes_per_token_full_layers if model.sliding_layers else model.kv_bytes_per_token
layout.metrics(
    [
        (
            "Bytes per token" + (" (full layers)" if model.sliding_layers else ""),
            f"{per_token:,} B",
            "modelled: the formula below, from the config"
            + ("; sliding layers stop growing at their window" if model.sliding_layers else "")
            + (f"; {cache_holds_text(model)}" if model.kv_cache_key_width else ""),
        ),
        (
            "Cache after the run",
            human_bytes(trace.passes[-1].kv_cache_bytes),
            "measured: the positions the real cache tensors hold"
            + (
                f"; this run's static cache reserved {human_bytes(trace.allocated_kv_cache_bytes)} "
                f"({trace.kv_cache_capacity:,} positions per layer) before its prefill"
                if trace.kv_cache_capacity is not None
                else ""
            ),
        ),
        ("Cached positions", f"{cache_len:,}", "measured: the prompt's tokens plus one per decode pass"),
    ],
    "Bytes per token modelled (the formula, from the model's config) · the cache measured (its real tensors)",
)

with layout.explanation("The formula, with this model's numbers"):
    st.code(charts.formula_text(model, cache_len), language=None, wrap_lines=True)
    ui.table(
        charts.formula_frame(model, cache_len),
        "The cache's two slot widths (read from its tensors) give the bytes per token; times the cached positions, "
        "the cache."
        if model.kv_cache_key_width
        else "Five factors from the model's config give the bytes per token; times the cached positions, the cache.",
        "modelled (from the model's config and the run's cache length)",
    )
    st.markdown(charts.gqa_text(model, cache_len))

growth = charts.growth_frame(trace)
layout.chart(
    charts.growth_chart(growth),
    growth,
    "kv-growth",
    "The points (bytes of the real cache tensors after each pass) sit on the line (the formula): one big step "
    f"for the prefill, then {model.kv_bytes_per_token:,} B more per decode pass"
    + (
        f" until the sliding layers hold their window, {model.kv_bytes_per_token_full_layers:,} B after."
        if model.sliding_layers
        else "."
    ),
    "measured (points) vs modelled (line)",
    "Measured, pass by pass",
)
layout.main.caption(charts.growth_check_text(growth))

if model.sliding_layers:
    with ui.secondary("Full and sliding layers apart"):
        kinds = charts.kinds_frame(trace)
        ui.chart(
            charts.kinds_chart(kinds),
            kinds,
            "kv-kinds",
            f"{model.sliding_layers} sliding-window layers keep at most window - 1 positions: their line goes flat. "
            f"The {model.full_layers} full-attention layers keep every position: theirs keeps climbing.",
            "measured: bytes of the real cache tensors, summed per kind of layer",
        )

with ui.secondary("Layer by layer"):
    pass_index = st.selectbox(
        "Pass",
        list(range(trace.new_tokens)),
        index=trace.new_tokens - 1,
        format_func=lambda k: f"pass {k} ({trace.passes[k].phase}, {trace.passes[k].cache_len_after} positions)",
        key=f"kv-pass-{trace.new_tokens}",
    )
    layers = charts.layers_frame(trace, pass_index)
    ui.chart(
        charts.layers_chart(layers),
        layers,
        "kv-layers",
        "Every layer keeps its own K and V: every position in a full-attention layer, at most window - 1 in a "
        "sliding one. The dash on each bar is that layer's formula.",
        "measured (bars) vs modelled (rule)",
    )

with ui.secondary("Next to the weights"):
    weights = charts.weights_frame(trace)
    ui.chart(
        charts.weights_chart(weights),
        weights,
        "kv-vs-weights",
        "At one short request the cache is small next to the weights; at full context it is not.",
        "measured (weights, cache now) and modelled (full context)",
    )
    st.markdown(charts.weights_ratio_text(trace))

projection_section = ui.secondary("Projection: long contexts and many requests")
left, right = projection_section.columns(2)
context = left.number_input(
    "Context length (tokens)",
    min_value=1,
    max_value=model.max_context,
    value=min(charts.DEFAULT_PROJECTION_CONTEXT, model.max_context),
    step=256,
    key=f"kv-context-{model.max_context}",
    help=f"Up to this model's maximum context, {model.max_context:,} tokens.",
)
batch = right.number_input(
    "Batch size (concurrent requests)",
    min_value=1,
    max_value=4096,
    value=charts.DEFAULT_PROJECTION_BATCH,
    step=1,
    key="kv-batch",
)
with projection_section:
    st.markdown(charts.projection_text(model, int(context), int(batch), trace.device.memory_bytes) + " *(modelled)*")
    projection = charts.projection_frame(model, int(context), int(batch))
    ui.chart(
        charts.projection_chart(projection, charts.references_frame(model)),
        projection,
        "kv-projection",
        "KV bytes grow linearly with context and with batch (sliding layers only up to their window): past some "
        "point the cache, not the weights, fills the memory (dashed: the weights).",
        "modelled",
    )
