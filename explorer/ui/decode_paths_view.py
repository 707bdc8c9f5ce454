"""The Cost page's comparison of decode paths: the same request decoded eagerly, on a static cache and, on CUDA, as a
replayed CUDA graph, each path's median decode pass against its weight-read floor."""

from __future__ import annotations

import streamlit as st

from explorer.charts import decode_paths as charts
from explorer.core.trace import Trace
from explorer.labs import sizes
from explorer.ui.admission import ask_lab
from explorer.ui.recordings import needs_live_run
from explorer.ui.shared import hosting_policy
from explorer.ui.state import DECODE_PATHS, RunResult
from explorer.ui.widgets import chart

RUN_KEY = "decode-paths-run"


def decode_paths_section(result: RunResult) -> None:
    """Decode the run's request on every path on request; kept for the run it was measured for."""
    trace = result.trace
    st.subheader("Eager against CUDA graphs, the same request")
    if not trace.decodes:
        st.info("This run made one token, so it has no decode pass to compare: raise Max new tokens and run again.")
        return
    if needs_live_run(result, "Comparing decode paths"):
        return
    st.caption(
        "Eager decode launches every kernel of a pass from Python, one after another; at batch 1 on a GPU that launch "
        "time, not reading the weights, sets the pace. A static KV cache keeps every tensor at one address, so the "
        "whole decode step can be captured once as a CUDA graph and replayed in one launch: what servers do."
    )
    if trace.device.kind != "cuda":
        st.caption(
            "CUDA graphs need a CUDA GPU: this run is on the CPU, so the comparison is eager against the static cache "
            "(on a CPU every kernel still runs from Python, and the static cache attends over every reserved position)."
        )
    if st.button("Decode this request on each path", key=RUN_KEY, help="Runs the model again, once per path."):
        size = sizes.decode_paths_size(trace, hosting_policy())
        done = ask_lab("Decoding the request on each path", "decode-paths", {"trace": trace.to_dict()}, size)
        if done is not None:  # refused or failed: one line said why, and the previous comparison stays
            DECODE_PATHS.set((result.label, tuple(Trace.from_dict(t) for t in done["traces"])))
    kept = DECODE_PATHS.get()  # (run label, traces): shown only for the run it was measured for
    if kept is None or kept[0] != result.label:
        st.info("Press **Decode this request on each path** to see how much of a decode pass each path leaves over.")
        return
    frame = charts.decode_paths_frame(kept[1])
    chart(
        charts.decode_paths_chart(frame),
        frame,
        "decode-paths",
        charts.decode_paths_sentence(frame),
        "wall measured (each path's median decode pass) · weight read, KV and compute modelled (roofline; a static "
        "cache's attention runs over every reserved position) · overhead = measured − modelled",
    )
