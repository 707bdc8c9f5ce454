"""The one bridge to Streamlit, split by idea: what a session keeps (`state`), what every session shares (`shared`:
the one `ServerSession`), the one way onto the device (`admission`), a turn on it (`device_turn`), runs, labs and
re-measuring (`runner`), recordings opened instead of a run (`recordings`), step mode (`step_mode`), the shared sidebar
(`sidebar`), how a page starts (`page_start`: its title, the run and Run where the visitor looks), page building
blocks (`widgets`), the session's SLOs (`slo_state`), the chart-first layout (`chart_first`) and one `*_view` module
per page that needs more than a few lines.
Pages call these and the pure builders in `explorer.charts`; nothing outside this package in `explorer` imports
streamlit."""

from explorer.ui.guard import one_line_errors
from explorer.ui.links import route_every_link_through_the_app
from explorer.ui.page_start import (
    ask_for_run,
    chart_first_page,
    lab_page,
    page_title,
    page_with_run,
    require_run,
    run_here,
    run_left_over,
)
from explorer.ui.recordings import open_from_link, recordings_sidebar
from explorer.ui.sidebar import remeasure_button, sidebar
from explorer.ui.slo_state import current_slos_s
from explorer.ui.state import current_run, history
from explorer.ui.widgets import chart, escape_markdown, metrics, presenter_toggle, run_metrics, secondary, table

# What pages and app.py use, and nothing else: tests and the other modules of this package import from the module
# that owns a name (`explorer.ui.state`, `explorer.ui.device_turn`, ...).
__all__ = [
    "ask_for_run",
    "chart",
    "chart_first_page",
    "current_run",
    "current_slos_s",
    "escape_markdown",
    "history",
    "lab_page",
    "metrics",
    "one_line_errors",
    "open_from_link",
    "page_title",
    "page_with_run",
    "presenter_toggle",
    "recordings_sidebar",
    "remeasure_button",
    "require_run",
    "route_every_link_through_the_app",
    "run_here",
    "run_left_over",
    "run_metrics",
    "secondary",
    "sidebar",
    "table",
]
