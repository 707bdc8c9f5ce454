"""The chart-first layout of a "One request" page: in presenter mode its title, key figures and main chart fill the
first screen, and what explains or picks comes after the chart."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from explorer.charts import theme
from explorer.core.trace import Trace
from explorer.ui.presenter import presenting
from explorer.ui.widgets import chart, metrics, run_metrics

# A row of key figures and its note, at presenter sizes: what a page without one gives its main chart instead.
FIGURES_ROW_PX = 150
SPREAD_LINE_PX = 40  # the min–max line under each figure of a run with repeats
MAIN_CHART_KEY = "main-chart"  # the main chart's container (class `st-key-main-chart`: what the browser test measures)


class ChartFirst:
    """A "One request" page's order, so that in presenter mode the first 1280 × 720 screen holds the page's title, one
    line of caption, its key figures and its main chart: everything else comes after the chart. What a page explains
    or lets you pick before its main chart stays there on a laptop; when presenting it moves below the chart, the
    explanations collapsed. Slots are made in screen order when the page starts; a page then fills them in any order."""

    def __init__(self) -> None:
        self.presenting = presenting()
        self.figures = st.container()
        before = None if self.presenting else st.container()
        self.main = st.container(key=MAIN_CHART_KEY)
        self.below = st.container() if self.presenting else None  # a slot under the main chart, when presenting
        # Where explanations and pickers go: above the main chart on a laptop, below it when presenting.
        self._aside = self.below if self.presenting else before
        self._has_figures = False
        self._taken_px = 0  # above the chart beyond the usual: the min–max lines of repeated figures

    def run_metrics(self, trace: Trace) -> None:
        with self.figures:
            run_metrics(trace, self.below)
        self._has_figures = True
        if trace.repeat_count > 1:  # each figure has its min–max line under it: a shorter chart
            self._taken_px += SPREAD_LINE_PX

    def metrics(self, items: list[tuple[str, str, str]], note: str) -> None:
        """A row of (label, value, help) key figures above the main chart, and a line saying where they come from."""
        with self.figures:
            metrics(items)
            st.caption(note)
        self._has_figures = True

    @property
    def main_chart_px(self) -> int | None:
        """The main chart's height when presenting (None on a laptop: the chart's own)."""
        if not self.presenting or theme.PRESENTER.main_chart_px is None:
            return None
        return theme.PRESENTER.main_chart_px + (0 if self._has_figures else FIGURES_ROW_PX) - self._taken_px

    def explanation(self, title: str, heading: bool = True) -> st.delta_generator.DeltaGenerator:
        """A section that explains before the main chart: in place on a laptop (under `title` if `heading`); below
        the chart in a collapsed expander titled `title` when presenting."""
        if self.presenting:
            return self._aside.expander(title, expanded=False)
        section = self._aside.container()
        if heading:
            section.subheader(title)
        return section

    def controls(self) -> st.delta_generator.DeltaGenerator:
        """Pickers the main chart reads (a range, a layer): above it on a laptop, right below it when presenting."""
        return self._aside.container()

    def beside(self, widths: tuple[float, float] = (2, 1)) -> st.delta_generator.DeltaGenerator:
        """Splits the main chart's slot in two, in the same first screen: the main chart goes left, and the column
        returned, on its right, holds what the chart is read against (Cost: the roofline beside the time split)."""
        left, right = self.main.columns(list(widths), gap="medium")
        self.main = left
        return right

    def chart(
        self, chart_obj: alt.TopLevelMixin, data: pd.DataFrame, name: str, caption: str, source: str, title: str
    ) -> None:
        """The main chart under its heading. When presenting, the heading leads the caption below the chart instead
        (a line less above it), and the chart takes the theme's main-chart height: taller on a page with no figures
        above it; a chart of facets keeps its own, which is per facet."""
        with self.main:
            if not self.presenting:
                st.subheader(title)
                chart(chart_obj, data, name, caption, source)
                return
            if getattr(getattr(chart_obj, "encoding", None), "row", alt.Undefined) is alt.Undefined:
                chart_obj = chart_obj.properties(height=self.main_chart_px)
            chart(chart_obj, data, name, f"**{title}.** {caption}", source)
