"""Legends that wrap instead of clipping (issue 42), decided in the browser from the chart's own width: the estimate
of a legend's widest row, and what `theme.apply` leaves alone. The browser walk is tests/test_browser_chart_fit.py."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts import theme
from explorer.charts.common import TWO_LINE_LABEL

LABELS = ["weight read (modelled)", "KV cache read + write (modelled)"]
FRAME = pd.DataFrame({"x": [1, 2], "y": [1, 2], "part": LABELS})


def legend_of(chart: alt.TopLevelMixin) -> dict:
    return theme.apply(chart, theme.NORMAL).to_dict()["encoding"]["color"]["legend"]


def test_a_legends_widest_row_by_hand() -> None:
    # 11 px type, half an em a character, 30 px an entry: 22 and 32 characters.
    assert theme.legend_px(LABELS, 11) == (round(22 * 5.5) + 30) + (round(32 * 5.5) + 30)
    assert theme.legend_px(LABELS, 11, columns=1) == round(32 * 5.5) + 30  # one a row: the widest
    assert theme.legend_px(LABELS, 11, two_line=True) == (round(11 * 5.5) + 30) + (round(21 * 5.5) + 30)


def test_a_row_legend_goes_one_a_row_and_wraps_long_labels_below_its_width() -> None:
    chart = alt.Chart(FRAME).mark_bar().encode(x="x", y="y", color=alt.Color("part:N").legend(orient="top"))
    legend = legend_of(chart)
    wide = theme.legend_px(LABELS, theme.NORMAL.label_px)
    assert legend["columns"] == {"expr": f"width + {theme.AXIS_ROOM_PX} < {wide} ? 1 : 0"}
    assert legend["labelExpr"].startswith(f"width + {theme.AXIS_ROOM_PX} < {wide} ? split(")  # 32 characters
    short = FRAME.assign(part=["prefill", "decode"])
    legend = legend_of(alt.Chart(short).mark_bar().encode(x="x", y="y", color=alt.Color("part:N").legend(orient="top")))
    assert "columns" in legend and "labelExpr" not in legend  # short labels stay plain values (tests/rendered_text.py)


def test_a_legends_own_columns_and_labels_stay_where_the_chart_is_wide_enough() -> None:
    own = alt.Legend(orient="top", columns=2, labelExpr=TWO_LINE_LABEL)
    legend = legend_of(alt.Chart(FRAME).mark_bar().encode(x="x", y="y", color=alt.Color("part:N", legend=own)))
    assert legend["columns"]["expr"].endswith("? 1 : 2") and legend["labelExpr"] == TWO_LINE_LABEL


def test_a_column_legend_and_a_composite_chart_are_left_alone() -> None:
    right = alt.Chart(FRAME).mark_bar().encode(x="x", y="y", color=alt.Color("part:N", legend=alt.Legend()))
    assert "columns" not in legend_of(right)  # a column beside the plot: the plot makes room for it
    top = alt.Chart(FRAME).mark_bar().encode(x="x", y="y", color=alt.Color("part:N").legend(orient="top"))
    spec = theme.apply(alt.hconcat(top, top), theme.NORMAL).to_dict()  # no width to stretch: it scrolls instead
    assert "columns" not in spec["hconcat"][0]["encoding"]["color"]["legend"]


def test_the_wrap_expression_splits_at_spaces_into_at_most_three_lines() -> None:
    expr = theme.wrapped_expr("datum.label", width_chars=10, lines=2)
    assert expr.count("'\\n'") == 1 and "lastindexof(slice(datum.label, 0, 10), ' ')" in expr
    assert theme.wrapped_expr("datum.label", lines=1) == "datum.label"
    assert theme.wrapped_expr("datum.label").count("'\\n'") == theme.WRAP_LINES - 1
