"""Where the time goes: each pass's measured time against the roofline model's weight, KV and compute times."""

import streamlit as st

from explorer import ui
from explorer.charts import cost as charts
from explorer.units import human_bytes, human_flops, ms

st.title("Where the time goes")
st.caption(
    "The roofline model predicts a pass from three costs: reading every weight, reading the KV cache, and the maths. "
    "Prefill does a lot of maths per weight read; decode does almost none, so it waits on memory."
)
result = ui.require_run()
if result is not None:
    trace = result.trace
    device = trace.device
    ui.run_metrics(trace)

    st.subheader("Predicted against measured, pass by pass")
    first_pass, last_pass = 0, trace.new_tokens - 1
    if trace.new_tokens > 1:
        first_pass, last_pass = st.slider(
            "Passes shown",
            0,
            trace.new_tokens - 1,
            (0, trace.new_tokens - 1),
            help="0 is the prefill; narrow the range to look at a few decode passes closely.",
        )
    split = charts.time_split_frame(trace, first_pass, last_pass)
    ui.chart(
        charts.time_split_chart(split),
        split,
        "time-split",
        "Blue is the weight and KV reads the model predicts, purple the maths the reads cannot hide, grey everything "
        "it does not explain; the black tick is the measured time. Outline: orange prefill, green decode.",
        "weight, KV and compute times modelled (roofline; maths overlaps memory, so only compute beyond the reads "
        "shows) · wall measured · overhead = measured − modelled",
    )
    faster = int(split["faster_than_model"].sum())
    if faster:
        st.warning(
            f"{faster} of these passes ran faster than the roofline model's lower bound (the tick is below the top "
            "of the bar): the device figures are pessimistic for them, e.g. the weights stayed in a cache that is "
            "faster than the measured memory bandwidth."
        )
    ui.table(
        charts.predicted_frame(trace),
        "The raw predictions: roofline = max(compute, weight + KV reads); wall_over_roofline is how many times "
        "slower than the model the pass really ran.",
        "flops, bytes and t_* modelled from the model's shapes and the device figures · wall measured",
    )

    st.subheader("The roofline")
    roofline = charts.roofline_frame(trace)
    ui.chart(
        charts.roofline_chart(roofline),
        roofline,
        "roofline",
        "Prefill sits far right (many tokens share one read of the weights), decode far left (one token per read): "
        "left of the dashed ridge a pass can only be memory-bound.",
        f"x modelled (FLOPs / bytes moved) · y = modelled FLOPs / measured time · roof from peak compute "
        f"[{device.peak_flops_source}] and bandwidth [{device.bandwidth_source}]",
    )

    st.subheader("Utilisation: the prefill against one decode")
    median_index = charts.median_decode_index(trace)
    shown = [trace.prefill]
    if median_index is None:
        st.info("This run made one token, so there is no decode pass: raise Max new tokens and run again.")
    else:
        decode_indices = [p.index for p in trace.decodes]
        decode_index = st.selectbox(
            "Decode pass",
            decode_indices,
            index=decode_indices.index(median_index),
            format_func=lambda k: f"pass {k} ({ms(trace.passes[k].wall_s)})",
            help="Defaults to the decode pass with the median measured time.",
        )
        shown.append(trace.passes[decode_index])
    utilisation = charts.utilisation_frame(shown, device)
    for column, row in zip(st.columns(len(shown)), utilisation.itertuples(index=False)):
        with column:
            st.markdown(f"**{row.label}**")  # built from the phase and the index: no user text
            st.metric(
                "Compute utilisation",
                charts.percent(row.compute_utilisation),
                help=f"achieved FLOP/s / peak compute ({human_flops(device.peak_flops)}/s, {device.peak_flops_source})",
            )
            st.metric(
                "Achieved compute",
                human_flops(row.achieved_flops_per_s) + "/s",
                help=f"modelled {human_flops(row.flops)} / measured {ms(row.wall_s)}",
            )
            st.metric(
                "Achieved bandwidth",
                human_bytes(row.achieved_bandwidth_bytes_per_s) + "/s",
                help=f"modelled {human_bytes(row.bytes_read)} read (weights + KV) / measured {ms(row.wall_s)}",
            )
            st.metric(
                "Of the device bandwidth",
                charts.percent(row.bandwidth_utilisation),
                help=f"device bandwidth {human_bytes(device.bandwidth_bytes_per_s)}/s ({device.bandwidth_source})",
            )
            st.metric("Tokens/s in this pass", f"{row.tokens_per_s:,.0f}", help="tokens computed / measured time")
    ui.chart(
        charts.utilisation_chart(utilisation),
        utilisation,
        "utilisation",
        "Decode uses a sliver of the compute but much of the bandwidth; prefill the other way round: the essay's "
        "widget, measured on this run.",
        "achieved = modelled FLOPs or bytes / measured time · device figures as in the table below",
    )

    st.subheader("The device figures")
    ui.table(
        charts.device_frame(device),
        "What the roofline divides by, with where each figure came from.",
        "measured: microbenchmarks just before the run · spec: datasheet · nvml: the driver's clocks",
    )
    if device.kind == "cpu":
        st.caption(
            "A CPU has no datasheet here: its 'peaks' are what a large matmul and a large copy achieved on this "
            "machine with the same threads, so a pass can approach the roof but a real kernel rarely reaches it."
        )
    else:
        st.caption(
            "On a GPU the peaks come from the datasheet or the driver; the microbenchmark rows show what is "
            "achievable in practice, usually somewhat below."
        )
