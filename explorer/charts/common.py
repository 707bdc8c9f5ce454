"""What every chart shares: phase colours, token labels fit for axes, the measured/modelled/spec vocabulary, and
tooltips that name a raw field as a person would."""

from __future__ import annotations

from collections.abc import Iterator

import altair as alt
import pandas as pd
from altair.utils import parse_shorthand

from explorer.charts.tables import human_name

PHASE_DOMAIN = ["prefill", "decode"]
PHASE_RANGE = ["#d95f02", "#1b9e77"]  # prefill orange, decode green: the same in every chart
PHASE_COLOR = alt.Scale(domain=PHASE_DOMAIN, range=PHASE_RANGE)

MEASURED, MODELLED = "measured", "modelled"
# A long legend entry "what (source)" on two lines, "what" over "(source)": whole, and narrow enough for a slide.
TWO_LINE_LABEL = (
    "indexof(datum.label, ' (') > 0 ? [slice(datum.label, 0, indexof(datum.label, ' (')), "
    "slice(datum.label, indexof(datum.label, ' (') + 1)] : datum.label"
)


def two_lines(title: str) -> list[str] | str:
    """An axis title "what (unit, source)" as two lines, so a long one fits along a short axis."""
    head, sep, tail = title.partition(" (")
    return [head, f"({tail}"] if sep else title


def phase_color(title: str = "phase", legend_orient: str = "top") -> alt.Color:
    """Colour by phase, the same two colours in every chart, legend on top (or where a narrow chart needs it)."""
    # Under a narrow plot the entries stack, so none is cut at the chart's edge ("prefill ● de").
    direction = "vertical" if legend_orient == "bottom" else "horizontal"
    return alt.Color(
        "phase:N", scale=PHASE_COLOR, title=title, legend=alt.Legend(orient=legend_orient, direction=direction)
    )


def display_token(text: str) -> str:
    """A token as a visible label: newlines and tabs shown as symbols, a leading space as '␣'."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥").replace("\r", "")
    if shown.startswith(" "):
        shown = "␣" + shown[1:]
    return shown or "∅"


def position_label(position: int, text: str) -> str:
    """Unique axis labels: the same token at two positions must stay two rows."""
    return f"{position}:{display_token(text)}"


def phase_points(
    chart: alt.Chart, size: int, legend_title: str = "phase", legend_orient: str = "top", **encodings: object
) -> alt.Chart:
    """Filled points coloured by phase: one per pass, in any chart that plots passes."""
    color = phase_color(legend_title, legend_orient)
    return chart.mark_point(filled=True, size=size, opacity=0.85).encode(color=color, **encodings)


def _units(chart: object, data: object = None) -> Iterator[tuple[object, object]]:
    """A chart and every chart inside it (layers, concatenations, a facet's or repeat's inner spec), each with the data
    it draws (its own, else its parent's)."""
    own = getattr(chart, "data", alt.Undefined)
    data = data if own is alt.Undefined else own
    yield chart, data
    for attr in ("layer", "hconcat", "vconcat", "concat"):
        children = getattr(chart, attr, alt.Undefined)
        if children is not alt.Undefined:
            for child in children:
                yield from _units(child, data)
    inner = getattr(chart, "spec", alt.Undefined)
    if inner is not alt.Undefined and not isinstance(inner, dict):
        yield from _units(inner, data)


def units(chart: object) -> Iterator[tuple[object, object]]:
    """A chart and every chart inside it, each with the data it draws (`_units`)."""
    return _units(chart)


def _tip_field(tip: object) -> str | None:
    """The field a tooltip entry shows, or None (a constant, or not a field at all)."""
    # A channel's properties are read with `_get`: an attribute of the same name is Altair's chained setter.
    if not isinstance(tip, alt.Tooltip):
        return None
    field = tip._get("field")
    shorthand = tip._get("shorthand")
    if field is alt.Undefined and isinstance(shorthand, str):
        field = parse_shorthand(shorthand).get("field", alt.Undefined)
    return field if isinstance(field, str) else None


def _named(tip: alt.Tooltip, field: str, data: object) -> tuple[alt.Tooltip, dict[str, str]]:
    """The entry as a person reads it, and the calculation it needs: a person's name for a raw field's (when the chart
    gives none), and yes/no for a true/false column (a tooltip prints a boolean as "true")."""
    title = tip._get("title")
    if title is alt.Undefined and human_name(field) != field:
        tip["title"] = title = human_name(field)
    if not (isinstance(data, pd.DataFrame) and field in data.columns and pd.api.types.is_bool_dtype(data[field])):
        return tip, {}
    shown = f"{field}__yes_no"
    return alt.Tooltip(shown, type="nominal", title=field if title is alt.Undefined else title), {
        shown: f"datum['{field}'] ? 'yes' : 'no'"
    }


def name_tooltips(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    """Every tooltip entry as a person reads it, in place: a raw field's name ("cache_len: 42", Vega-Lite's title when
    a chart gives none) becomes a person's ("cache len"), and a true/false column's values read yes/no (through a
    calculation added to the chart that shows them). Returns the chart."""
    for unit, data in _units(chart):
        encoding = getattr(unit, "encoding", alt.Undefined)
        tips = alt.Undefined if encoding is alt.Undefined else getattr(encoding, "tooltip", alt.Undefined)
        listed = tips if isinstance(tips, list) else [tips]
        named, calculations = [], {}
        for tip in listed:
            field = _tip_field(tip)
            if field is None:
                named.append(tip)
                continue
            tip, needed = _named(tip, field, data)
            named.append(tip)
            calculations.update(needed)
        if calculations:
            encoding["tooltip"] = named
            transforms = getattr(unit, "transform", alt.Undefined)
            added = [alt.CalculateTransform(calculate=expr, **{"as": shown}) for shown, expr in calculations.items()]
            unit["transform"] = ([] if transforms is alt.Undefined else list(transforms)) + added
    return chart
