"""Step by step: one real pass per click, so a room can watch prefill and then decode happen."""

import streamlit as st

from explorer import ui
from explorer.charts import attention as attention_charts
from explorer.charts import cost as cost_charts
from explorer.charts import kv as kv_charts
from explorer.charts import stepping as charts
from explorer.ui import stepper

st.title("Step by step")
st.caption(
    "Press Prefill: ONE pass computes every prompt token at once and writes the KV cache. Then each Next token runs "
    "ONE decode pass: one new token, reading the cache. Keys: → or space = next token, R = reset."
)
current = stepper.stepped()
active = current is not None
with st.form("step-form", border=False):
    prompt = st.text_input("Prompt", value="What is the capital of France?", disabled=active)
    left, right = st.columns(2)
    new_tokens = left.number_input("Max new tokens", 1, 256, 16, disabled=active)
    template = right.toggle("Use the chat template", value=True, disabled=active)
    if st.form_submit_button("Prefill", type="primary", disabled=active):
        stepper.start_stepping(prompt, int(new_tokens), template)
        if stepper.stepped() is not None:  # else a one-line error is on screen: keep it there
            stepper.step_once()
            st.rerun()

buttons = st.columns(4)
if buttons[0].button("Next token", key="step-next", disabled=not active or current.done):
    stepper.step_once()
if buttons[1].button("Run to end", key="step-end", disabled=not active or current.done):
    while not stepper.stepped().done:
        stepper.step_once()
autoplay = buttons[2].toggle("Autoplay", key="step-autoplay", disabled=not active or current.done)
if buttons[3].button("Reset", key="step-reset", disabled=not active):
    stepper.reset_stepping()
    st.rerun()
pace_s = st.select_slider("Autoplay pace (s per pass)", [0.5, 1.0, 2.0, 3.0], value=1.0, disabled=not autoplay)

current = stepper.stepped()
if current is None or not current.passes:
    st.info("Type a prompt and press **Prefill**: one real pass on the model, then one decode pass per click.")
    st.stop()


@st.fragment(run_every=pace_s if autoplay and not current.done else None)
def live_view() -> None:
    if autoplay and not current.done:
        stepper.step_once()
    trace = current.to_trace()
    ui.metrics(charts.running_figures(trace, current.done))
    st.code(charts.tokens_line(trace), language=None, wrap_lines=True)
    last = trace.passes[-1]
    ui.table(charts.top5_frame(last), f"Pass {last.index} sampled its token from these five.", "measured")
    maps = current.attention()
    layer_col, head_col = st.columns(2)
    layer = layer_col.selectbox("Layer", maps.layers, index=len(maps.layers) // 2, key="step-layer")
    head = head_col.selectbox("Head", list(range(maps.heads)), key="step-head")
    frame = charts.attention_rows_frame(maps, layer, head)
    ui.chart(
        attention_charts.prefill_chart(frame),
        frame,
        "step-attention",
        "The prefill's T × T map with its causal mask (grey), then one row per decode pass appended below it: one "
        "key longer each time, no mask needed.",
        "measured (captured attention probabilities, untimed eager shadow)",
    )
    kv = kv_charts.growth_frame(trace)
    ui.chart(
        kv_charts.growth_chart(kv),
        kv,
        "step-kv",
        f"Each decode pass adds exactly one position: {trace.model.kv_bytes_per_token:,} B across all layers.",
        "measured: bytes of the real cache tensors",
    )
    timing = cost_charts.time_split_frame(trace)
    ui.chart(
        cost_charts.time_split_chart(timing),
        timing,
        "step-times",
        "Each pass's measured time (black tick) against the roofline model's weight, KV and compute times, as on the "
        "Cost page.",
        "wall measured · weight, KV and compute modelled · overhead = measured − modelled",
    )


live_view()
