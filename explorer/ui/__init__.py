"""The one bridge to Streamlit, split by idea: what a session keeps (`state`), its turn on the shared device
(`queue`), runs on that device (`runner`), recordings opened instead of a run (`recordings`), step mode (`stepper`),
the shared sidebar (`sidebar`) and page building blocks (`widgets`, `sections`). Pages call these and the pure
builders in `explorer.charts`; nothing outside this package in `explorer` imports streamlit."""

from explorer.ui import sections
from explorer.ui.guard import one_line_errors
from explorer.ui.recordings import open_from_link, recordings_sidebar
from explorer.ui.runner import execute_run
from explorer.ui.sidebar import remeasure_button, sidebar, sidebar_downloads
from explorer.ui.state import current_run, history
from explorer.ui.widgets import (
    chart,
    chart_first_page,
    current_slos_s,
    escape_markdown,
    lab_page,
    metrics,
    page_with_run,
    presenter_toggle,
    require_run,
    run_metrics,
    secondary,
    table,
)

# What pages and app.py use, and nothing else: tests and the other modules of this package import from the module
# that owns a name (`explorer.ui.state`, `explorer.ui.queue`, ...).
__all__ = [
    "chart",
    "chart_first_page",
    "current_run",
    "current_slos_s",
    "escape_markdown",
    "execute_run",
    "history",
    "lab_page",
    "metrics",
    "one_line_errors",
    "open_from_link",
    "page_with_run",
    "presenter_toggle",
    "recordings_sidebar",
    "remeasure_button",
    "require_run",
    "run_metrics",
    "secondary",
    "sections",
    "sidebar",
    "sidebar_downloads",
    "table",
]
