"""The one bridge to Streamlit, split by idea: what a session keeps (`state`), runs on the shared device (`runner`),
the shared sidebar (`sidebar`) and page building blocks (`widgets`). Pages call these and the pure builders in
`explorer.charts`; nothing outside this package in `explorer` imports streamlit."""

from explorer.ui.runner import (
    ALLOWED_MODELS_ENV,
    check_model_allowed,
    device_lock,
    device_turn,
    execute_run,
    get_model,
    model_store,
)
from explorer.ui.sidebar import remeasure_button, sidebar, sidebar_downloads
from explorer.ui.state import (
    DEFAULT_PROMPT,
    HISTORY,
    RUN,
    RunInputs,
    RunResult,
    current_run,
    history,
)
from explorer.ui.widgets import (
    chart,
    current_slos_s,
    escape_markdown,
    metrics,
    page_with_run,
    require_run,
    run_metrics,
    show_error,
    slo_inputs,
    table,
    window_slider,
)

__all__ = [
    "ALLOWED_MODELS_ENV",
    "DEFAULT_PROMPT",
    "HISTORY",
    "RUN",
    "RunInputs",
    "RunResult",
    "chart",
    "check_model_allowed",
    "current_run",
    "current_slos_s",
    "device_lock",
    "device_turn",
    "escape_markdown",
    "execute_run",
    "get_model",
    "history",
    "metrics",
    "model_store",
    "page_with_run",
    "remeasure_button",
    "require_run",
    "run_metrics",
    "show_error",
    "sidebar",
    "sidebar_downloads",
    "slo_inputs",
    "table",
    "window_slider",
]
