"""Presenter mode: the sidebar switch, its link (`?presenter=1` on any page), the folded sidebar and the stylesheet
for large type it brings, the chart theme it picks, and the stylesheet that keeps every chart inside its column."""

from __future__ import annotations

import streamlit as st

from explorer.charts import theme

PRESENTER_KEY = "explorer_presenter_toggle"  # the toggle's own key: written only before the toggle is drawn
# Whether presenter mode is on, in a plain session key: the one truth, which the toggle is set from before each draw.
# Only two things change it: the switch's own callback (a click on it) and a `?presenter=` link. Why not the toggle's
# key: on a page switch Streamlit can drop the state of a widget the browser did not report with the click (a click
# while the page is still drawing), or bring it back at its default (off), and the switch would turn off half-way
# through a talk (CI's presenter walk lost it both ways, while the session's recording, in plain keys, stayed).
PRESENTER_ON = "explorer_presenter_on"
PRESENTER_PARAM = "presenter"  # ?presenter=1 turns presenter mode on from a link, ?presenter=0 off
PARAM_SEEN = "explorer_presenter_param_seen"  # the ?presenter value last applied: a stale one never undoes the switch
JUST_SWITCHED = "explorer_presenter_switched"  # set by the switch's callback: the next draw gives the page the keys
ON_VALUES = {"1", "true", "on", "yes"}
# Larger type for text, metrics, code, plain text and static tables, from one fixed stylesheet (no user text, no
# script); charts take their sizes from the presenter chart theme instead. A data grid (st.dataframe) draws on a
# canvas that no stylesheet reaches: pages show tables through `table`, a static table when presenting. The header
# (less space above and under the title) and notes (a recording's banner) are compact, so that a "One request" page's
# main chart fits the first 1280 × 720 screen (`ChartFirst`). A metric's value and label are each a markdown paragraph:
# the paragraph rule would make both 1.4rem, so each is named (the value larger than its label). The compact header
# leaves the title under Streamlit's own header bar, which turns opaque white once the sidebar is collapsed, as a
# speaker has it: the bar stays transparent (its buttons sit at the screen's edges, clear of the title).
PRESENTER_CSS = """<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p, [data-testid="stMain"] li { font-size: 1.4rem; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] { font-size: 1.15rem; }
[data-testid="stMain"] [data-testid="stMetricValue"],
[data-testid="stMain"] [data-testid="stMetricValue"] [data-testid="stMarkdownContainer"] p { font-size: 2.8rem; }
[data-testid="stMain"] [data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"] p { font-size: 1.3rem; }
[data-testid="stHeader"] { background: transparent; }
[data-testid="stMain"] h1 { font-size: 2.6rem; padding: 0 0 0.25rem 0; }
[data-testid="stMainBlockContainer"] { padding-top: 2.5rem; }
[data-testid="stMain"] [data-testid="stAlert"] p { font-size: 1.15rem; }
[data-testid="stMain"] [data-testid="stAlertContainer"] { padding: 0.5rem 1rem; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.1rem; }
[data-testid="stMain"] [data-testid="stCode"] pre,
[data-testid="stMain"] [data-testid="stCode"] code,
[data-testid="stMain"] [data-testid="stText"],
[data-testid="stMain"] [data-testid="stTable"] th,
[data-testid="stMain"] [data-testid="stTable"] td { font-size: 1.3rem; }
</style>"""
# Every page, in any mode: a chart Vega cannot fit to its column (a facet or a concatenation of fixed-width panels, as
# the Attention page's heads) scrolls inside its own box instead of running past the column's edge (issue 42: "wide
# charts fit their column, or scroll inside it"); the charts that can stretch do (`st.altair_chart(width="stretch")`,
# legends laid out by the width, `charts.theme.apply`). A fixed stylesheet: no user text.
CHART_FIT_CSS = """<style>
[data-testid="stVegaLiteChart"] { max-width: 100%; overflow-x: auto; overflow-y: hidden; }
</style>"""
# Streamlit's key shortcuts (the Tour's ← and →) ignore keys while focus is in an <input>, and the switch is one: after
# a click on it the arrows did nothing until the page was clicked. A fixed script (no user text) hands focus back.
GIVE_KEYS_TO_PAGE_JS = """<script>
setTimeout(() => { const el = document.activeElement; if (el && el.tagName === "INPUT") el.blur(); }, 0);
</script>"""


def apply_link() -> None:
    """`?presenter=1` (or 0) sets the switch, once per new value: a link opens a talk in presenter mode."""
    raw = st.query_params.get(PRESENTER_PARAM)
    if raw is None or raw == st.session_state.get(PARAM_SEEN):
        return
    st.session_state[PARAM_SEEN] = raw
    st.session_state[PRESENTER_ON] = raw.strip().lower() in ON_VALUES


def keep_switch() -> None:
    """Before the toggle is drawn: it shows the mode, whatever state Streamlit kept for it (none, or its default)."""
    st.session_state[PRESENTER_KEY] = presenting()


def keep_in_link() -> None:
    """The address bar says presenter mode while it is on (a page switch drops query parameters), so a link copied
    from any page opens the same way; off, the parameter goes."""
    on = presenting()
    if on and st.query_params.get(PRESENTER_PARAM) != "1":
        st.query_params[PRESENTER_PARAM] = "1"
    elif not on and PRESENTER_PARAM in st.query_params:
        del st.query_params[PRESENTER_PARAM]
    st.session_state[PARAM_SEEN] = st.query_params.get(PRESENTER_PARAM)


def switched() -> None:
    """The switch's callback, run only when the person flips it: the one place the switch changes the mode."""
    st.session_state[PRESENTER_ON] = bool(st.session_state.get(PRESENTER_KEY, False))
    st.session_state[JUST_SWITCHED] = True


def presenter_toggle() -> None:
    """A sidebar switch that makes every page readable from the back of a room; it persists across pages, and a link
    with `?presenter=1` turns it on."""
    apply_link()
    keep_switch()
    on = st.sidebar.toggle(
        "Presenter mode",
        key=PRESENTER_KEY,
        on_change=switched,
        help="Larger type and chart labels (at least 18 px), fewer table rows, secondary sections collapsed. "
        "A link with ?presenter=1 opens any page in presenter mode.",
    )
    keep_in_link()
    # The slides get the whole width: the sidebar folds away when presenting (and opens again when not). Streamlit
    # applies a new initial state as it arrives; once a person opens or closes the sidebar by hand, the browser keeps
    # their choice (its local storage) over this one.
    st.set_page_config(initial_sidebar_state="collapsed" if on else "auto")
    st.html(CHART_FIT_CSS)
    if on:
        st.html(PRESENTER_CSS)
    if st.session_state.pop(JUST_SWITCHED, False):
        st.sidebar.html(GIVE_KEYS_TO_PAGE_JS, unsafe_allow_javascript=True)


def presenting() -> bool:
    return bool(st.session_state.get(PRESENTER_ON, False))


def current_theme() -> theme.Theme:
    return theme.PRESENTER if presenting() else theme.NORMAL
