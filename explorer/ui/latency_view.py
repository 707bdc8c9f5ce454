"""The Latency page's sections: the SLO checks of a run."""

from __future__ import annotations

import streamlit as st

from explorer.charts import latency as latency_charts
from explorer.core.floor_share import run_decode_share
from explorer.core.trace import Trace
from explorer.ui.slo_state import slo_inputs
from explorer.ui.widgets import table


def slo_section(trace: Trace) -> tuple[float, float]:
    """The SLO inputs, a badge each for TTFT and p99 ITL, and the table; returns the SLOs (seconds)."""
    ttft_slo_s, itl_slo_s = slo_inputs()
    slos = latency_charts.repeat_slo_frame(trace, ttft_slo_s, itl_slo_s)
    # A badge, not st.error: a missed SLO is a finding about this run, not an error of the app.
    for column, check in zip(st.columns(2), slos[slos["metric"].isin(["TTFT", "ITL p99"])].itertuples(index=False)):
        verdict = latency_charts.slo_verdict(check.metric, check.value_ms, check.slo_ms)  # numbers: safe as markdown
        if check.passes is None:
            column.badge(verdict, icon=":material/remove:", color="gray")
        elif check.passes:
            column.badge(verdict, icon=":material/check_circle:", color="green")
        else:
            column.badge(verdict, icon=":material/cancel:", color="red")
    table(
        slos,
        "TTFT and the ITL percentiles, each against its SLO (pass = strictly under): the same figures as the metrics "
        "above, each taken per repeat, then the median with its min and max.",
        "values measured · SLOs set above",
    )
    return ttft_slo_s, itl_slo_s


def floor_share_line(trace: Trace) -> None:
    """The run's decode passes together against the floor: all their bytes read over all their measured time, as a
    share of this device's measured read bandwidth (the Cost page shows it pass by pass, among published systems)."""
    share = run_decode_share(trace)
    if share is not None:
        said = share.sentence()
        st.markdown(said[:1].upper() + said[1:])  # numbers and fixed words only
