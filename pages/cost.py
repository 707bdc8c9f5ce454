"""Where the time goes: each pass's measured time against the roofline model's weight, KV and compute times."""

import streamlit as st

from explorer import ui
from explorer.charts import cost as charts
from explorer.charts import experts
from explorer.charts import roofline as roofline_charts
from explorer.ui import cost_view, decode_paths_view, operators_view

result, layout = ui.chart_first_page(
    "Where the time goes",
    cost_view.lead_line(),  # each phase's time per token, computed from the run
    "The roofline model predicts a pass from reading every weight, moving the KV cache, and the maths; what it does "
    "not explain is overhead.",
)
trace = result.trace
device = trace.device
layout.run_metrics(trace)
cost_view.takeaway_section(result, layout)

first_pass, last_pass = 0, trace.new_tokens - 1
if trace.new_tokens > 1:
    first_pass, last_pass = layout.controls().slider(
        "Passes shown",
        0,
        trace.new_tokens - 1,
        (0, trace.new_tokens - 1),
        help="0 is the prefill; narrow the range to look at a few decode passes closely.",
    )
beside = layout.beside()  # the split; beside it, the clinching line and the roofline
split = charts.time_split_frame(trace, first_pass, last_pass)
layout.chart(
    charts.time_split_chart(split, narrow=True),  # beside the roofline
    split,
    "time-split",
    charts.MAIN_CHART_NOTICE
    + (
        f" The tick is the median of {trace.repeat_count} repeats, with a whisker from min to max."
        if trace.repeat_count > 1
        else " One sample on a shared machine (raise Repeats in the sidebar for a median and its spread)."
    ),
    "weight, KV and compute times modelled (roofline; maths overlaps memory, so only compute beyond the reads "
    "shows) · wall measured · overhead = measured − modelled",
    "Predicted against measured, pass by pass",
)
cost_view.ridge_beside(beside, trace, layout.presenting, layout.main_chart_px)
if device.busy_note:
    st.info(ui.escape_markdown(device.busy_note))  # built from numbers, but a recording's is anyone's text
faster = int(split["faster_than_model"].sum())
if faster:
    st.warning(
        f"{faster} of these passes ran within 10 % under the roofline model's floor (the tick is below the top of the "
        "bar): at the roof within measurement noise; utilisation is shown as at most 100 %."
    )
decode_index = charts.median_decode_index(trace)
for sentence in [roofline_charts.bound_sentence(trace.prefill, device), roofline_charts.prefill_ridge_sentence(trace)]:
    st.markdown(sentence)  # numbers and fixed words only
if decode_index is not None:  # its bound: the clinching line beside the split
    st.caption(
        "Each decode pass reads the whole KV cache, and transformers' cache copies itself as it grows, so its traffic "
        "grows with every token — *modelled*"
    )
    with st.expander("The KV traffic of this pass, precisely"):
        st.caption(charts.kv_traffic_formula(trace, trace.passes[decode_index]) + " — *modelled*")
if trace.model.experts is not None:
    with ui.secondary("Experts routed to, pass by pass"):
        st.markdown(experts.experts_sentence(trace))  # numbers and fixed words only
        ui.table(
            experts.experts_frame(trace),
            "Distinct experts each MoE layer's router chose for the pass's tokens: k for a one-token decode, more for "
            "a prefill or a batch. Only those experts' weights are read.",
            "experts measured (the routers' own outputs) · expert bytes and active params modelled from them",
        )
with ui.secondary("The raw predictions, pass by pass"):
    ui.table(
        charts.predicted_frame(trace),
        'The raw predictions: roofline = max(compute, weight + KV reads); "wall over roofline" is how many times '
        "slower than the model the pass really ran.",
        "FLOPs, bytes and every t (time) column modelled from the model's shapes and the device figures (attention: "
        "its useful causal pairs, which a fused kernel computes, skipping the masked tiles; an untied input table: the "
        "rows gathered) · wall measured",
    )

operators_view.operators_section(trace)
cost_view.profile_section(result)
operators_view.beside_the_profile(result)
decode_paths_view.decode_paths_section(result)

cost_view.floor_share_section(trace)
cost_view.utilisation_section(trace)
cost_view.device_section(trace)
