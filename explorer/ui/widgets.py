"""Page building blocks: headline metrics, window sliders, charts and tables with their captions and downloads, and
one-line errors."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from explorer.charts import export, theme
from explorer.charts.common import name_tooltips
from explorer.charts.tables import grouped, human_table
from explorer.core.errors import BadInput, one_line
from explorer.core.trace import Spread, Trace
from explorer.core.units import short_time
from explorer.hosting.settings import HostedPolicy
from explorer.ui.presenter import PRESENTER_KEY, current_theme, presenter_toggle, presenting  # noqa: F401 - re-exported

LOG = logging.getLogger(__name__)
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$])")
# What GFM links with no markup at all (a bare URL, www., an e-mail address), backslash escapes or not: a zero-width
# space after the scheme, "www" or "@" breaks the match and reads the same.
AUTOLINK_STARTS = re.compile(r"(?i)(\b(?:https?|ftp|mailto)(?=:)|\bwww(?=\.)|@)")
ZERO_WIDTH_SPACE = "\u200b"


def escape_markdown(text: str) -> str:
    """Backslash-escape what Streamlit's markdown would interpret, and break what it would link bare, for messages
    that quote user input or anyone's file (a recording's name, a note: a browser fetched an image from one)."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", AUTOLINK_STARTS.sub(r"\1" + ZERO_WIDTH_SPACE, text))


def show_error(message: str) -> None:
    st.error(escape_markdown(message))  # messages quote the model name the user typed


def failure_line(what: str, exc: BaseException) -> str:
    """One line for an unexpected failure: "The run failed: …". A hosted server names only the exception's type, as
    its text can quote a server path (an OSError's filename); the whole of it goes to the server's log."""
    LOG.error("%s failed", what, exc_info=exc)
    return failed_line(what, type(exc).__name__, one_line(exc))


def failed_line(what: str, type_name: str, text: str) -> str:
    """`what` failed, in one line: with `text` (the error's own words) locally, by `type_name` alone on a hosted
    server."""
    try:
        hosted = HostedPolicy.from_env().hosted
    except BadInput:  # a malformed setting: say as little as a hosted server would
        hosted = True
    if hosted:
        return f"{what} failed ({type_name}): an unexpected error on the server. Try again in a moment."
    return f"{what} failed: {text}"


# Key hints ("→ = next token") mean nothing on a touch screen: the browser itself hides them there, through a media
# query for a device whose main pointer is coarse and cannot hover (a phone, a tablet), so no script decides it and a
# laptop with a touch screen keeps them. Hidden too: the key badge Streamlit draws inside a button with a `shortcut`.
KEY_HINT_PREFIX = "key-hint"  # a hint's container key: Streamlit gives it the CSS class st-key-key-hint-NAME
TOUCH_HIDES_KEY_HINTS_CSS = """<style>
@media (hover: none) and (pointer: coarse) {
  [class*="st-key-key-hint-"], [data-testid="stMain"] [data-testid="stButton"] kbd { display: none; }
}
</style>"""


def hide_key_hints_on_touch() -> None:
    """On a touch screen, no key hint and no key badge in a button (`TOUCH_HIDES_KEY_HINTS_CSS`: style only, so it
    takes no room on the page)."""
    st.html(TOUCH_HIDES_KEY_HINTS_CSS)


def key_hint(text: str, name: str) -> None:
    """A caption naming keyboard shortcuts, drawn where the caller is (a row of buttons, say); not on a touch screen."""
    hide_key_hints_on_touch()
    with st.container(key=f"{KEY_HINT_PREFIX}-{name}", width="content"):
        st.caption(text)


def short_rate(per_s: float | None) -> str:
    return "n/a" if per_s is None else f"{per_s:.1f}"


# The request's figures that repeats give a spread: (label, field of core.trace.RepeatSpreads, format, meaning).
SPREAD_METRICS: list[tuple[str, str, Callable[[float | None], str], str]] = [
    ("TTFT", "ttft_s", short_time, "request start (before tokenizing) to first token"),
    ("E2E", "e2e_s", short_time, "request start to the last token"),
    ("ITL p50", "itl_p50_s", short_time, "median gap between consecutive tokens"),
    ("ITL p90", "itl_p90_s", short_time, "90th percentile of the gaps between consecutive tokens"),
    ("ITL p99", "itl_p99_s", short_time, "99th percentile of the gaps between consecutive tokens"),
    ("Decode tok/s", "decode_tokens_per_s", short_rate, "decode tokens / sum of ITLs"),
]


KEY_FIGURES = ("Prompt tokens", "New tokens", "TTFT", "ITL p50")  # the one row a presenter's first screen holds


def run_metrics(trace: Trace, below: st.delta_generator.DeltaGenerator | None = None) -> None:
    """The request's headline numbers, all measured: medians over repeats with their min–max under each, or one
    sample said as such. Each figure is taken per repeat, then its median (`Trace.spreads`), as the CLI prints it.
    On a laptop two rows of four; when presenting, the `KEY_FIGURES` in one row and the rest (with the model and the
    note on samples) in `below`, a slot under the page's main chart (`ChartFirst.below`)."""
    figures: list[tuple[str, Spread | None | int, Callable[[Any], str] | None, str]] = [
        ("Prompt tokens", trace.prompt_len, None, ""),
        ("New tokens", trace.new_tokens, None, f"stopped by {trace.stop_reason}"),
        *[(label, getattr(trace.spreads, field), fmt, meaning) for label, field, fmt, meaning in SPREAD_METRICS],
    ]
    compact = presenting() and below is not None
    if compact:  # the figures of the two phases first: prefill's TTFT and decode's ITL
        rows = [[f for f in figures if f[0] in KEY_FIGURES], [f for f in figures if f[0] not in KEY_FIGURES]]
    else:
        rows = [figures[:4], figures[4:]]
    for place, row in zip([st, below if compact else st], rows):
        for column, (label, value, fmt, meaning) in zip(place.columns(4), row):
            if fmt is None:
                column.metric(label, value, help=meaning or None)
            else:
                spread_metric(column, label, value, fmt, meaning)
    samples = (
        f"medians of {trace.repeat_count} repeats, each with its min–max"
        if trace.repeat_count > 1
        else "one sample on a shared machine: raise Repeats for a median and its spread"
    )
    where = f"{trace.model.display_name} · {trace.model.dtype} on {trace.device.name}"
    start_up = "" if trace.warmup_ran else " · no warm-up: the first pass includes one-off start-up costs"
    # text, not markdown: the model name is whatever the user typed
    if compact:
        st.text(f"All measured · {trace.model.dtype} on {trace.device.name}")
        below.text(f"{trace.model.display_name} · {samples}{start_up}")
    else:
        st.text(f"{where} · all figures measured, {samples}{start_up}")


def spread_metric(
    column: st.delta_generator.DeltaGenerator,
    label: str,
    spread: Spread | None,
    fmt: Callable[[float | None], str],
    meaning: str,
) -> None:
    """A median with its min–max in plain sight (the delta line, grey and arrowless: a range, not a change)."""
    ranged = spread is not None and spread.samples > 1
    column.metric(
        label,
        fmt(spread.median if spread else None),
        f"{fmt(spread.low)} – {fmt(spread.high)}" if ranged else None,
        delta_color="off",
        delta_arrow="off",
        # When presenting, the range alone: its words were cut to "m." beside large figures; the note under the
        # figures says they are medians with their min–max.
        delta_description=f"min–max of {spread.samples}" if ranged and not presenting() else None,
        help=f"measured: {meaning}; " + (f"median of {spread.samples} repeats" if ranged else "one sample"),
    )


def chart(chart_obj: alt.TopLevelMixin, data: pd.DataFrame, name: str, caption: str, source: str) -> None:
    """A chart in the session's theme, its one-line caption with where its numbers come from, and downloads of the
    data behind it (CSV) and of the chart itself (PNG, SVG: the same theme)."""
    chart_obj = theme.apply(name_tooltips(chart_obj), current_theme())
    st.altair_chart(chart_obj, width="stretch")
    st.caption(f"{caption} — *{source}*")
    with st.container(horizontal=True, gap="small"):
        st.download_button(  # made when clicked, as the renders below: a Next token redraws every chart
            f"Download data: {name}.csv",
            lambda: data.to_csv(index=False),
            file_name=f"{name}.csv",
            mime="text/csv",
            key=f"download-{name}",
            on_click="ignore",
        )
        # A callable runs only when its button is clicked: no page pays for renders nobody asked for.
        for kind, render, mime, what in (
            ("png", export.chart_png, "image/png", "an image at twice its size, rendered offline"),
            ("svg", export.chart_svg, "image/svg+xml", "a vector drawing, for slides"),
        ):
            st.download_button(
                kind.upper(),
                lambda render=render: render(chart_obj),
                file_name=f"{name}.{kind}",
                mime=mime,
                key=f"download-{name}-{kind}",
                on_click="ignore",
                help=f"The chart as {what}",
            )


def table(data: pd.DataFrame, caption: str, source: str) -> None:
    """A table with its caption: the scrollable data grid on a laptop; in presenter mode a static table of the theme's
    first rows, in the large type. Why not the grid for both: it draws its cells on a canvas that no stylesheet
    reaches, so its type stays small on a projector; a static table is HTML, which `PRESENTER_CSS` enlarges. Either
    way its columns get human labels with units and its floats are rounded (`charts.tables.human_table`), and its
    numbers are grouped in thousands (the grid's own format prints 6696000)."""
    data = human_table(data)
    if not presenting():
        grouped = {
            column: st.column_config.NumberColumn(format="localized")
            for column in data.columns
            if pd.api.types.is_numeric_dtype(data[column]) and not pd.api.types.is_bool_dtype(data[column])
        }
        st.dataframe(data, hide_index=True, width="stretch", column_config=grouped)
        st.caption(f"{caption} — *{source}*")
        return
    rows = current_theme().table_rows
    shown = data if rows is None else data.head(rows)
    st.table(as_text(shown), hide_index=True)
    more = (
        f" · the first {len(shown)} of {len(data)} rows (presenter mode off shows all)"
        if len(shown) < len(data)
        else ""
    )
    st.caption(f"{caption} — *{source}*{more}")


def as_text(data: pd.DataFrame) -> pd.DataFrame:
    """A static table's text cells escaped (st.table renders Markdown in cells, and a cell can hold anyone's text: a
    server's error line, an uploaded file's strings) and its numbers grouped in thousands."""
    escaped = data.copy()
    for column in escaped.columns:
        if pd.api.types.is_bool_dtype(escaped[column]):
            continue
        if pd.api.types.is_numeric_dtype(escaped[column]):
            escaped[column] = escaped[column].map(grouped)
        escaped[column] = escaped[column].map(lambda v: escape_markdown(v) if isinstance(v, str) else v)
    return escaped


def window_slider(label: str, total: int, window: int, key: str, help_text: str | None = None) -> int:
    """The first position of a window of `window` out of `total`; 0 without a slider when everything fits."""
    if total <= window:
        return 0
    return st.slider(label, 0, total - window, 0, key=f"{key}-{total}", help=help_text)


def metrics(items: list[tuple[str, str, str]], columns: int | None = None) -> None:
    """A row of (label, value, help) metrics, or a column of them when `columns` is 1."""
    if columns == 1:
        for label, value, help_text in items:
            st.metric(label, value, help=help_text)
        return
    for column, (label, value, help_text) in zip(st.columns(columns or len(items)), items):
        column.metric(label, value, help=help_text)


def secondary(title: str) -> st.delta_generator.DeltaGenerator:
    """A section that matters less than the page's one idea: open on a laptop, collapsed in presenter mode."""
    return st.expander(title, expanded=not presenting())
