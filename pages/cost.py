"""Where the time goes: each pass's measured time against the roofline model's weight, KV and compute times."""

import streamlit as st

from explorer import ui
from explorer.charts import cost as charts
from explorer.charts import experts
from explorer.core.figure_trust import figures_line
from explorer.ui import operators_view
from explorer.ui.cost_view import profile_section, utilisation_section

result, layout = ui.chart_first_page(
    "Where the time goes",
    "The roofline model predicts a pass from reading every weight, reading the KV cache, and the maths.",
    "A prefill does maths for every prompt token per read of the weights; a decode for one token. Where each pass "
    "lands is computed below from its own FLOPs and bytes.",
)
trace = result.trace
device = trace.device
layout.run_metrics(trace)

first_pass, last_pass = 0, trace.new_tokens - 1
if trace.new_tokens > 1:
    first_pass, last_pass = layout.controls().slider(
        "Passes shown",
        0,
        trace.new_tokens - 1,
        (0, trace.new_tokens - 1),
        help="0 is the prefill; narrow the range to look at a few decode passes closely.",
    )
split = charts.time_split_frame(trace, first_pass, last_pass)
layout.chart(
    charts.time_split_chart(split),
    split,
    "time-split",
    "Blue is the weight and KV-cache traffic the model predicts, purple the maths it cannot hide, grey everything "
    "it does not explain (the profile below says what that is); the black tick is the measured time"
    + (
        f", the median of {trace.repeat_count} repeats with a whisker from min to max."
        if trace.repeat_count > 1
        else ": one sample on a shared machine (raise Repeats in the sidebar for a median and its spread)."
    ),
    "weight, KV and compute times modelled (roofline; maths overlaps memory, so only compute beyond the reads "
    "shows) · wall measured · overhead = measured − modelled",
    "Predicted against measured, pass by pass",
)
if device.busy_note:
    st.info(ui.escape_markdown(device.busy_note))  # built from numbers, but a recording's is anyone's text
if device.figures_taken_under_load:
    st.warning(ui.escape_markdown(figures_line(device)))  # a recording's figures note is anyone's text too
faster = int(split["faster_than_model"].sum())
if faster:
    st.warning(
        f"{faster} of these passes ran within 10 % under the roofline model's floor (the tick is below the top of the "
        "bar): at the roof within measurement noise; utilisation is shown as at most 100 %."
    )
for sentence in [charts.bound_sentence(trace.prefill, device), charts.prefill_ridge_sentence(trace)]:
    st.markdown(sentence)  # numbers and fixed words only
if trace.decodes:
    st.markdown(charts.bound_sentence(trace.decodes[-1], device))
    st.caption(
        "Each decode pass reads the whole KV cache, and transformers' cache copies itself as it grows, so its traffic "
        "grows with every token — *modelled*"
    )
    with st.expander("The KV traffic of the last pass, precisely"):
        st.caption(charts.kv_traffic_formula(trace, trace.decodes[-1]) + " — *modelled*")
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
        "FLOPs, bytes and every t (time) column modelled from the model's shapes and the device figures · wall "
        "measured",
    )

operators_view.operators_section(trace)
profile_section(result)
operators_view.beside_the_profile(result)

st.subheader("The roofline")
roofline = charts.roofline_frame(trace)
ui.chart(
    charts.roofline_chart(roofline),
    roofline,
    "roofline",
    "Each pass sits at its modelled intensity: left of the dashed ridge a pass can only be memory-bound, right of "
    "it compute-bound. More prompt tokens per read of the weights move a prefill right.",
    f"x modelled (FLOPs / bytes moved) · y = modelled FLOPs / measured time · roof from peak compute "
    f"[{device.peak_flops_source}] and bandwidth [{device.bandwidth_source}]",
)

utilisation_section(trace)

with ui.secondary("The device figures"):
    ui.table(
        charts.device_frame(device),
        "What the roofline divides by, with where each figure came from.",
        "measured: best of 5 fixed-size microbenchmarks, taken when the 'measured at' row says · spec: datasheet · "
        "nvml: the driver's clocks · achieved: raised to what a pass of this run did",
    )
    st.caption(charts.DEVICE_NOTE[device.kind])
