"""Latency as a user feels it: the time to the first token, the gaps between later ones, both against SLOs."""

import streamlit as st

from explorer import ui
from explorer.charts import latency as charts
from explorer.ui import latency_view

result, layout = ui.chart_first_page(
    "Latency: TTFT and ITL",
    "TTFT is the wait for the first token, mostly the prefill; ITL the gap to each next one, one decode pass.",
    "TTFT is what you notice when you press Enter; ITL is the speed of the streaming text. A service promises both "
    "as SLOs, e.g. p99 ITL < 50 ms.",
)
trace = result.trace
measured = "recorded" if result.recorded is not None else "measured"  # a recording's times were measured then
layout.run_metrics(trace)

with layout.explanation("Against your SLOs"):
    ttft_slo_s, itl_slo_s = latency_view.slo_section(trace)

itl = charts.itl_frame(trace, itl_slo_s)
if itl.empty:
    with layout.main:
        st.subheader("Inter-token latency, token by token")
        st.info("This run made one token, so there is no inter-token latency: raise Max new tokens and run again.")
else:
    over = int(itl["over_slo"].sum())
    layout.chart(
        charts.itl_chart(itl, itl_slo_s),
        itl,
        "itl-per-token",
        f"{over} of {len(itl)} gaps at or over the ITL SLO (red). {charts.decode_gap_sentence(trace, measured)}: a "
        f"pass re-reads every weight and the KV cache. {charts.decode_bytes_sentence(trace)}",
        "measured: the time between consecutive sampled tokens",
        "Inter-token latency, token by token",
    )
    latency_view.floor_share_line(trace)  # how close the gaps' decode passes came to the floor
    everything = charts.itl_distribution_frame(trace)
    pooled = charts.pooled_percentiles_frame(trace)
    ui.chart(
        charts.itl_histogram_chart(everything, pooled, itl_slo_s),
        everything,
        "itl-distribution",
        f"All {len(everything)} gaps of {trace.repeat_count} repeat(s) pooled: the grey rules are the pooled "
        "percentiles (with repeats they can differ from the per-repeat medians above), the ITL SLO is the red dashed "
        "line. A tail, not the median, breaks an SLO.",
        "measured · pooled percentiles, interpolated linearly (numpy's default)",
    )

st.subheader("Each repeat's TTFT")
if trace.repeat_count == 1:
    st.info("One run is one sample on a shared machine: raise Repeats in the sidebar to see how much TTFT moves.")
else:
    repeats = charts.repeats_ttft_frame(trace, ttft_slo_s)
    ui.chart(
        charts.repeats_ttft_chart(repeats, ttft_slo_s),
        repeats,
        "ttft-by-repeat",
        f"The same request {trace.repeat_count} times in a row: the spread is the machine's noise. The dark bar is "
        "the repeat (median end-to-end) that the pass-by-pass charts show.",
        "measured, per repeat",
    )

with ui.secondary("Against earlier runs in this session"):
    earlier = ui.history()
    if not earlier:
        st.info("No earlier run in this session yet: run again to compare (another prompt, or the same one for noise).")
    else:
        # Labels go only into Altair (drawn as text) and dataframes: a prompt preview must never be read as markdown.
        runs = [charts.LabelledTrace(r.label, r.trace) for r in earlier] + [charts.LabelledTrace(result.label, trace)]
        labels = [run.label for run in runs]
        runs_itl = charts.runs_itl_frame(runs)
        ui.chart(
            charts.runs_itl_chart(runs_itl, labels, itl_slo_s),
            runs_itl,
            "itl-by-run",
            "The darkest, thickest line is this run. Every decode reads the same weights; the prompt adds KV cache to "
            f"each one. {charts.decode_bytes_sentence(trace)}",
            "measured, per run",
        )
        runs_ttft = charts.runs_ttft_frame(runs, ttft_slo_s)
        ui.chart(
            charts.runs_ttft_chart(runs_ttft, ttft_slo_s),
            runs_ttft,
            "ttft-by-run",
            "By the model TTFT grows with the prompt (the prefill computes every prompt token); the bars are measured, "
            "on a shared machine: hover one for its prompt length.",
            "measured, per run",
        )
