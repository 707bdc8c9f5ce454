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
)

ui.metrics(
    [
        ("Same tokens both ways", "yes" if result.same_tokens else "NO", "measured: greedy token ids compared"),
        ("Cached loop", f"{sum(s.wall_s for s in result.cached):.2f} s", "measured: all passes"),
        ("Naive loop", f"{sum(s.wall_s for s in result.uncached):.2f} s", "measured: all steps"),
        ("Naive loop, estimated", f"{result.estimate_s:.1f} s", "modelled before the run, checked against the budget"),
        ("Prompt tokens", str(result.prompt_len), "the naive loop's first step processes these"),
    ]
)
st.markdown(charts.growth_sentence(result))  # numbers and fixed words only
frame = charts.nocache_frame(result)
ui.chart(
    charts.step_time_chart(frame),
    frame,
    "nocache-step-time",
    "Per step: flat-ish with the cache (one token through the layers), rising without (the whole sequence).",
    "measured wall time per step",
)
ui.chart(
    charts.cumulative_time_chart(frame),
    frame,
    "nocache-cumulative-time",
    "Total time so far: linear with the cache, bending upwards (quadratic) without.",
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
    charts.projection_frame(result),
    "At this rate: a straight-line fit of each loop's measured step times against the position, summed.",
    "modelled from measured steps",
)
with ui.secondary("Every step, both loops"):
    ui.table(
        frame,
        "Per step: tokens processed, time, FLOPs and bytes moved (weights read, plus the cache's traffic when there "
        "is one), with running totals.",
        "time measured · FLOPs and bytes modelled",
    )
