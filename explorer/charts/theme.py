"""The one place chart font sizes come from: a normal theme for a laptop and a presenter theme for the back of a room.

Charts set no font sizes of their own; `apply` lays the theme's sizes over a finished chart, so a page, a PNG and
an SVG of the same chart all carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt

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
    if theme.renderer is not None:  # presenting: a margin too, as the browser's type runs a few px past Vega's estimate
        chart.usermeta = {"embedOptions": {"renderer": theme.renderer}}
        # A padding per side: Streamlit's front end fails on a bare number ("Cannot create property 'bottom'").
        chart.padding = dict.fromkeys(("left", "top", "right", "bottom"), PRESENTER_PADDING_PX)
    return chart
