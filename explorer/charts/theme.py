"""The one place chart font sizes come from: a normal theme for a laptop and a presenter theme for the back of a room.

Charts set no font sizes of their own; `apply` lays the theme's sizes over a finished chart, so a page, a PNG and
an SVG of the same chart all carry it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import altair as alt
import pandas as pd

from explorer.charts.common import units

PRESENTER_PADDING_PX = 10  # around a presenter chart: a rotated axis title's glyphs overran the drawing by 3 px


@dataclass(frozen=True)
class Theme:
    name: str
    label_px: int  # axis tick labels, legend labels
    title_px: int  # axis and legend titles, chart titles
    mark_text_px: int  # text drawn inside charts (token labels, values)
    table_rows: int | None  # rows a table shows before it scrolls; None: all
    main_chart_px: int | None = None  # a "One request" page's main chart (axes and legend included); None: its own
    renderer: str | None = None  # how the browser draws it: "svg" when presenting (crisp on a projector, and every
    # drawn text is an element whose box a test can measure); None: Streamlit's choice (canvas for large data)


NORMAL = Theme("normal", label_px=11, title_px=12, mark_text_px=11, table_rows=None)
# 1280 × 720 with the sidebar open: a compact header, the key figures and a main chart of this height fit the screen.
PRESENTER = Theme(
    "presenter", label_px=18, title_px=20, mark_text_px=18, table_rows=8, main_chart_px=320, renderer="svg"
)


LEGEND_CHANNELS = ("color", "fill", "stroke", "shape", "size", "opacity", "strokeDash", "strokeWidth")
COMPOSITE = ("hconcat", "vconcat", "concat", "facet", "spec", "repeat")  # views Vega cannot stretch to a column
GLYPH_EM = 0.5  # a label's width per character, in font sizes (lower-case sans-serif text averages about this)
AXIS_ROOM_PX = 60  # a row legend may reach over the vertical axis's labels: this much past the plot's width
ENTRY_EXTRA_PX = 30  # an entry's symbol, its gap and the space before the next entry
UNKNOWN_LEGEND_PX = 0  # a legend whose labels the chart does not list (a fold, a calculation): left to the others
WRAP_CHARS = 28  # a legend label longer than this is split at a space when the chart is narrower than its legend
WRAP_LINES = 3  # into at most this many lines


def legend_px(labels: list[str], label_px: int, columns: int | None = None, two_line: bool = False) -> int:
    """About how wide a legend's widest row of entries is, at `label_px` type: all of them in one row, or `columns`
    of the widest; a `two_line` label ("what (source)" over two lines, `common.TWO_LINE_LABEL`) by its longer line."""
    widths = [
        round(max(len(line) for line in (label.split(" (") if two_line else [label])) * label_px * GLYPH_EM)
        + ENTRY_EXTRA_PX
        for label in labels
    ]
    if not widths:
        return 0
    return sum(widths) if not columns else min(columns, len(widths)) * max(widths)


def _legend_labels(channel: object, data: object) -> list[str] | None:
    """The entries a channel's legend lists, where the chart says them: its scale's domain, or its field's values."""
    scale = channel._get("scale")
    domain = alt.Undefined if scale in (alt.Undefined, None) else scale._get("domain")
    if isinstance(domain, list):
        return [str(v) for v in domain]
    field = channel._get("field")
    shorthand = channel._get("shorthand")
    if field is alt.Undefined and isinstance(shorthand, str):
        field = shorthand.split(":")[0]
    if isinstance(data, pd.DataFrame) and isinstance(field, str) and field in data.columns:
        return [str(v) for v in data[field].drop_duplicates()]
    return None


def _wrapping(legend: alt.Legend, wide_px: int, long_labels: bool) -> None:
    """A row legend (top or bottom) that its chart's width cannot hold: one entry a row, long labels on two lines,
    decided in the browser from the chart's own width (the `width` signal), so a phone and a projector each get
    theirs. A legend's own columns stay where the chart is wide enough; its own label expression always stays, and
    one is added only where a label is long (a label expression hides a legend's values from tests/rendered_text.py)."""
    columns = legend._get("columns")
    narrow = f"width + {AXIS_ROOM_PX} < {wide_px}"
    if columns is alt.Undefined or (isinstance(columns, int) and columns > 1):
        legend["columns"] = {"expr": f"{narrow} ? 1 : {0 if columns is alt.Undefined else columns}"}
    if long_labels and legend._get("labelExpr") is alt.Undefined:
        legend["labelExpr"] = f"{narrow} ? split({wrapped_expr('datum.label')}, '\\n') : datum.label"


def wrapped_expr(text: str, width_chars: int = WRAP_CHARS, lines: int = WRAP_LINES) -> str:
    """A Vega expression for `text` (an expression) with a newline at a space after about every `width_chars`
    characters, at most `lines` lines (a word longer than that stays whole). `split` on the newline gives the lines
    as an array, which Vega draws one under another (its expressions have no way to join two arrays)."""
    if lines == 1:
        return text
    cut = f"lastindexof(slice({text}, 0, {width_chars}), ' ')"
    rest = wrapped_expr(f"slice({text}, {cut} + 1)", width_chars, lines - 1)
    return f"(length({text}) > {width_chars} && {cut} > 0 ? slice({text}, 0, {cut}) + '\\n' + {rest} : {text})"


def _row_legends(chart: alt.TopLevelMixin) -> Iterator[tuple[alt.Legend, list[str] | None]]:
    """Every legend laid out in a row (top or bottom) in a chart, with the entries it lists where the chart says."""
    for unit, data in units(chart):
        encoding = getattr(unit, "encoding", alt.Undefined)
        if encoding is alt.Undefined:
            continue
        for name in LEGEND_CHANNELS:
            channel = getattr(encoding, name, alt.Undefined)
            if not isinstance(channel, alt.SchemaBase):
                continue
            legend = channel._get("legend")
            if isinstance(legend, dict):  # Altair's `.legend(orient=...)` keeps a plain dict
                legend = channel["legend"] = alt.Legend(**legend)
            if not isinstance(legend, alt.Legend):  # None: no legend; unset: a column on the right, beside the plot
                continue
            if legend._get("orient") in ("top", "bottom") and legend._get("direction") != "vertical":
                yield legend, _legend_labels(channel, data)


def fit_legends(chart: alt.TopLevelMixin, theme: Theme) -> alt.TopLevelMixin:
    """Every row legend of a chart that stretches to its column wraps when the column is narrower than the chart's
    row legends together (they sit side by side; issue 42: "KV cache read + w…" clipped on a phone), in place.
    Composite charts (facets, concatenations) are left alone: Vega gives them no width to stretch to, and they
    scroll inside their box instead (`explorer.ui.presenter.CHART_FIT_CSS`)."""
    if any(chart._get(key) is not alt.Undefined for key in COMPOSITE):  # `chart.facet` is a method: `_get`
        return chart
    legends = list(_row_legends(chart))
    wide_px = sum(
        UNKNOWN_LEGEND_PX
        if labels is None
        else legend_px(
            labels,
            theme.label_px,
            legend._get("columns") if isinstance(legend._get("columns"), int) else None,
            legend._get("labelExpr") is not alt.Undefined,
        )
        for legend, labels in legends
    )
    for legend, labels in legends:
        _wrapping(legend, wide_px, labels is not None and any(len(label) > WRAP_CHARS for label in labels))
    return chart


def apply(chart: alt.TopLevelMixin, theme: Theme) -> alt.TopLevelMixin:
    """The theme's sizes over a finished chart, in place (returns it). Legend entries and titles are never cut short
    (Vega's default cuts a legend label at 160 px, "read from the KV c…" at presenter sizes): a chart whose legend
    would not fit lays it out in rows or columns of its own instead.

    The spec is the one Altair's `configure_axis(...).configure_legend(...)...` chain gives, set once: each step of
    that chain copies the chart, and a layered chart's copy runs its constructor again, which deep-copies every layer
    (most of the time a Step click spent building its charts)."""
    config = alt.Config() if chart.config is alt.Undefined else chart.config.copy(deep=False)
    config["axis"] = alt.AxisConfig(labelFontSize=theme.label_px, titleFontSize=theme.title_px)
    config["legend"] = alt.LegendConfig(
        labelFontSize=theme.label_px, titleFontSize=theme.title_px, labelLimit=0, titleLimit=0
    )
    config["title"] = alt.TitleConfig(fontSize=theme.title_px)
    config["text"] = alt.MarkConfig(fontSize=theme.mark_text_px)
    config["header"] = alt.HeaderConfig(labelFontSize=theme.label_px, titleFontSize=theme.title_px, labelLimit=0)
    chart.config = config
    fit_legends(chart, theme)
    if theme.renderer is not None:  # presenting: a margin too, as the browser's type runs a few px past Vega's estimate
        chart.usermeta = {"embedOptions": {"renderer": theme.renderer}}
        # A padding per side: Streamlit's front end fails on a bare number ("Cannot create property 'bottom'").
        chart.padding = dict.fromkeys(("left", "top", "right", "bottom"), PRESENTER_PADDING_PX)
    return chart
