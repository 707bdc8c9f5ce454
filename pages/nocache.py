"""Without a KV cache: the same request through the cached loop and a naive loop that recomputes everything."""

import streamlit as st

from explorer import ui
from explorer.charts import serving as charts
from explorer.engine import Request
from explorer.hosting import LabSize
from explorer.nocache import DEFAULT_NEW_TOKENS, run_nocache

RESULT = "explorer_nocache_result"

st.title("Without a KV cache")
st.caption(
    "Without a cache, predicting each next token re-runs every earlier token through every layer: the work per step "
    "grows with the sequence. The KV cache keeps each token's K and V, so a step computes one token. Both loops run "
    "here on the real model, greedy, and must produce the same tokens."
)
with st.form("nocache-form"):
    prompt = st.text_input("Prompt (no chat template)", value="The history of the printing press")
    new_tokens = st.number_input("New tokens", min_value=2, max_value=512, value=DEFAULT_NEW_TOKENS)
    most_s = int(ui.hosting_policy().lab_budget_s(1800))  # a hosted server's cap, if lower
    budget_s = st.number_input(
        "Time budget (s)",
        min_value=min(10, most_s),
        max_value=most_s,
        value=min(300, most_s),
        help="refuse a longer run",
    )
    go = st.form_submit_button("Run both loops", type="primary")
if go:
    request = Request(prompt, max_new_tokens=int(new_tokens), use_chat_template=False)
    ui.run_lab(
        RESULT,
        "Running the cached and the naive loop",
        lambda lm, device, progress: run_nocache(lm, device, request, budget_s=float(budget_s), on_progress=progress),
        LabSize(prompt_chars=len(prompt), new_tokens=int(new_tokens), budget_s=float(budget_s)),
    )
result = st.session_state.get(RESULT)
if result is None:
    st.info("Press **Run both loops**: the naive loop's time estimate is checked against the budget before it starts.")
    st.stop()

ui.metrics(
    [
        ("Same tokens both ways", "yes" if result.same_tokens else "NO", "measured: greedy token ids compared"),
        ("Cached loop", f"{sum(s.wall_s for s in result.cached):.2f} s", "measured: all passes"),
        ("Naive loop", f"{sum(s.wall_s for s in result.uncached):.2f} s", "measured: all steps"),
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
