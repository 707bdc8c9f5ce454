"""The session's one pair of SLOs: the user's where set, else defaults from the current run, and the inputs that set
them on any page."""

from __future__ import annotations

import streamlit as st

from explorer.core import slo
from explorer.ui.state import ITL_SLO_MS, TTFT_SLO_MS, current_run

# ONE pair of SLOs per session, not one per page: set on the Latency page or the Endpoint's, read by every page. A key
# holds a value only once the user has set it; until then every page uses the same defaults, chosen from the session's
# current run (`explorer.core.slo`: a round figure a little above what the run itself measured), or the chat reference
# before any run, and says so.


def run_slo_defaults() -> slo.SloDefaults:
    """The session's default SLOs: the current run's; the chat reference before any run."""
    run = current_run()
    return slo.REFERENCE if run is None else slo.from_trace(run.trace)


def slos_set_by_user() -> bool:
    return TTFT_SLO_MS in st.session_state or ITL_SLO_MS in st.session_state


def slo_source() -> str:
    """Where the session's SLOs come from, for a caption: "yours", or the defaults' own source."""
    return "yours" if slos_set_by_user() else f"default: {run_slo_defaults().source}"


def keep_slo(key: str) -> None:
    """An SLO input's callback: the user's value, under our own key, which every page reads."""
    st.session_state[key] = st.session_state[f"{key}-input"]


def slo_inputs() -> tuple[float, float]:
    """The session's TTFT and ITL SLO inputs side by side, starting from its defaults (`run_slo_defaults`) until the
    user sets one; returns both in seconds. Changing one only re-reads stored timings, on every page."""
    defaults = run_slo_defaults()
    left, right = st.columns(2)
    fields = [
        # 0.1 ms at least, as ITL: a tiny model's run defaults to a TTFT SLO under 1 ms, which a floor of 1 ms clamped
        (left, "TTFT SLO (ms)", TTFT_SLO_MS, defaults.ttft_s, 0.1, 600_000.0, 100.0, "Checked against TTFT."),
        (right, "ITL SLO (ms)", ITL_SLO_MS, defaults.itl_s, 0.1, 60_000.0, 5.0, "Checked against the p99 ITL."),
    ]
    values = []
    for column, label, key, default_s, low, high, step, meaning in fields:
        # The widget has its own key, set before it is drawn from ours (the user's value) or the default: a value
        # that moves with the run never re-creates the widget, so no edit is lost to a new widget identity.
        st.session_state[f"{key}-input"] = float(st.session_state.get(key, default_s * 1e3))
        value = column.number_input(
            label,
            min_value=low,
            max_value=high,
            step=step,
            key=f"{key}-input",
            on_change=keep_slo,
            args=(key,),
            help=f"{meaning} Changing an SLO only re-reads stored timings: nothing is run again.",
        )
        values.append(value / 1e3)
    if TTFT_SLO_MS not in st.session_state or ITL_SLO_MS not in st.session_state:
        st.caption(
            f"Default SLOs, the same on every page until you set yours (here, on Latency or on Endpoint): "
            f"{defaults.source}. For reference, a common chat target is p99 ITL under "
            f"{slo.REFERENCE_ITL_SLO_S * 1e3:.0f} ms (the grey dotted line where a chart draws it)."
        )
    return values[0], values[1]


def current_slos_s() -> tuple[float, float]:
    """The session's SLOs (seconds) for pages that show them without editing them: the user's where set, else the
    session's defaults (`run_slo_defaults`), the same on every page."""
    defaults = run_slo_defaults()
    return (
        st.session_state.get(TTFT_SLO_MS, defaults.ttft_s * 1e3) / 1e3,
        st.session_state.get(ITL_SLO_MS, defaults.itl_s * 1e3) / 1e3,
    )
