"""Compare two runs of this session side by side: their latency, cache and where their passes' time goes."""

import streamlit as st

from explorer import ui
from explorer.charts import compare as charts
from explorer.ui.recordings import COMPARE_QUERY, compared_indices

current, layout = ui.chart_first_page(
    "Compare two runs",
    "Any two runs of this session side by side, each one's prefill and median decode split the same way.",
    "E.g. float32 against bfloat16, a short prompt against a long one: the same figures side by side.",
)
runs = {r.label: r.trace for r in ui.history()} | {current.label: current.trace}
if len(runs) < 2:
    ui.run_here(
        "compare",
        "Only one run so far: run a second one here (another prompt, or the same one to see the noise), change a "
        "setting in the sidebar, or open a second recording there, then compare. A link can open two recordings at "
        f"once: `?recording=A&{COMPARE_QUERY}=B`.",
    )
    st.stop()
labels = list(runs)
first_index, second_index = compared_indices(labels)  # a ?recording=A&compare=B link's pair, else the last two
picked = layout.controls()  # the two runs, and their figures: above the chart on a laptop, below it when presenting
left, right = picked.columns(2)
first = left.selectbox("First run", labels, index=first_index)
second = right.selectbox("Second run", labels, index=second_index)
chosen = [(first, runs[first]), (second, runs[second])]
with picked:
    ui.table(
        charts.figures_frame(chosen),
        "Seconds and tokens/s are medians over each run's repeats.",
        "measured · bytes measured from the cache tensors",
    )
split = charts.split_frame(chosen)
layout.chart(
    charts.split_chart(split),
    split,
    "compare-split",
    "Same colours as the Cost page: weight read, KV traffic, compute beyond memory (modelled), overhead (measured "
    "minus modelled).",
    "modelled parts from each run's own device figures · overhead from measured time",
    "Prefill and median decode, split the same way",
)
