"""What every chart shares: phase colours, token labels fit for axes, and the measured/modelled/spec vocabulary."""

from __future__ import annotations

import altair as alt

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
