"""Without a KV cache: the same request through the cached loop and a naive loop that recomputes everything."""

import streamlit as st

from explorer import ui
from explorer.charts import serving as charts
from explorer.ui import labs

result = ui.lab_page(
    "Without a KV cache",
    "Without a cache, predicting each next token re-runs every earlier token through every layer: the work per step "
    "grows with the sequence. The KV cache keeps each token's K and V, so a step computes one token. Both loops run "
    "here on the real model, greedy, and must produce the same tokens.",
    labs.nocache_inputs,
    labs.NOCACHE_RESULT,
    "Press **Run both loops**: the naive loop's time estimate is checked against the budget before it starts.",
    "nocache",  # the bundled result shown until Run replaces it (recordings/labs/)
)

ui.metrics(
    [
        ("Same tokens both ways", "yes" if result.same_tokens else "NO", "measured: greedy token ids compared"),
        ("Cached loop", f"{sum(s.wall_s for s in result.cached):.2f} s", "measured: all passes"),
        ("Naive loop", f"{sum(s.wall_s for s in result.uncached):.2f} s", "measured: all steps"),
        ("Naive loop, estimated", f"{result.estimate_s:.1f} s", "modelled before the run at the device's figures"),
        ("Prompt tokens", str(result.prompt_len), "the naive loop's first step processes these"),
    ]
)
st.markdown(charts.growth_plain(result))  # numbers and fixed words only
with st.expander("How this is measured, precisely"):
    st.markdown(charts.growth_sentence(result))
    st.caption(charts.estimate_sentence(result))
labs.figures_used(result.cached_trace.device, labs.NOCACHE_RESULT, result)
frame = charts.nocache_frame(result)
ui.chart(
    charts.step_time_chart(frame),
    frame,
    "nocache-step-time",
    "Per step: with the cache one token goes through the layers, without it the whole sequence so far; whether this "
    "run's times show the difference is measured in the sentence above.",
    "measured wall time per step",
)
ui.chart(
    charts.cumulative_time_chart(frame),
    frame,
    "nocache-cumulative-time",
    "Total time so far. By the model, linear with the cache and bending upwards (quadratic) without; a short or noisy "
    "run need not show it.",
    "measured, summed",
)
ui.chart(
    charts.cumulative_flops_chart(frame),
    frame,
    "nocache-cumulative-flops",
    "Total work: the naive loop's FLOPs grow with the square of the length.",
    "modelled FLOPs (matmuls + attention) per step, summed",
)
memory = charts.cache_memory_frame(result)
ui.chart(
    charts.cache_memory_chart(memory),
    memory,
    "nocache-cache-memory",
    "What the cache bought that speed with: memory that grows by one position's K and V per token.",
    "measured: bytes of the real cache tensors",
)
ui.table(
    charts.projection_frame(result), charts.projection_plain(result), "modelled, scaled by this run's measured rate"
)
with st.expander("How the projection is made, precisely"):
    st.caption(charts.projection_caption(result))
with ui.secondary("Every step, both loops"):
    ui.table(
        frame,
        "Per step: tokens processed, time, FLOPs and bytes moved (weights read, plus the cache's traffic when there "
        "is one), with running totals.",
        "time measured · FLOPs and bytes modelled",
    )
