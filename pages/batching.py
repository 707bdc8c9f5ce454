"""Batching: B requests decoded together read the weights once per step for all of them."""

import streamlit as st

from explorer import ui
from explorer.charts import serving as charts
from explorer.core.roofline import RIDGE_BATCH_LIMIT
from explorer.ui import labs

result = ui.lab_page(
    "Batching",
    "A decode step reads every weight to make one token per sequence. With B sequences in one step the weights are "
    "read once for all of them, so tokens/s grows faster than the step's time, until the step crosses the ridge and "
    "becomes compute-bound; each request's ITL is the step time, so it rises with B. The sweep below measures what "
    "this machine does.",
    labs.batch_inputs,
    labs.BATCH_RESULT,
    "Press **Run the sweep**: memory and a modelled time estimate are checked before anything runs.",
    "batch",  # the bundled result shown until Run replaces it (recordings/labs/)
)

itl_slo_s, slo_source = labs.batch_itl_slo_s()
limit = f"searched up to B = {RIDGE_BATCH_LIMIT:,}"
frame = charts.batch_frame(result)
best = charts.largest_batch_within(frame, itl_slo_s * 1e3)
ui.metrics(
    [
        ("Same tokens as solo", "yes" if result.every_request_matches_solo else "NO", "measured: every request"),
        ("Ridge-crossing batch", str(result.ridge_batch or "none"), f"modelled: decode turns compute-bound ({limit})"),
        (f"Largest B with p99 ITL < {itl_slo_s * 1e3:.0f} ms", str(best or "none"), f"measured; SLO: {slo_source}"),
    ]
)
st.markdown(result.step_sentence())  # numbers and fixed words only
labs.figures_used(result.device, labs.BATCH_RESULT, result)
labs.batch_mismatches(result)
ui.table(frame, "One row per batch size.", "step, ITL, tokens/s measured · weight/KV/compute split modelled")
ui.chart(
    charts.step_time_vs_batch_chart(frame),
    frame,
    "batch-step-time",
    "Measured points; the dashed line is the roofline's floor for the same step.",
    "median decode step measured · line modelled",
)
if "distinct_experts_per_step" in frame:
    st.caption(
        "A mixture of experts: B sequences route to more distinct experts than one, so a decode step reads "
        + ", ".join(f"{n} at B={b}" for b, n in zip(frame["batch_size"], frame["distinct_experts_per_step"]))
        + " experts (summed over the MoE layers): its weight read grows with B, unlike a dense model's. "
        "— *experts measured from the routers' outputs (median step); their bytes modelled*"
    )
ui.chart(
    charts.tokens_per_s_vs_batch_chart(frame),
    frame,
    "batch-tokens-per-s",
    "Aggregate decode throughput: B tokens per step.",
    "measured points · modelled line (B / roofline step time)",
)
roof = charts.batch_roofline_frame(result, frame)
ui.chart(
    charts.batch_roofline_chart(roof, result.device.ridge_point_flops_per_byte),
    roof,
    "batch-roofline",
    f"Decode steps move right as B grows; the dashed ridge is where they would turn compute-bound (batch "
    f"{result.ridge_batch or f'none up to {RIDGE_BATCH_LIMIT:,}'} here, {result.device.dtype}, at the ridge of the "
    f"figures named above).",
    "x modelled intensity · y modelled FLOPs / measured step time",
)
ui.chart(
    charts.tradeoff_chart(frame, itl_slo_s * 1e3),
    frame,
    "batch-tradeoff",
    f"Throughput against each request's p99 ITL, one point per B; the red line is the ITL SLO ({slo_source}).",
    "measured",
)
