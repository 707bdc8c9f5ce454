"""What every chart shares: phase colours, token labels fit for axes, and the measured/modelled/spec vocabulary."""

from __future__ import annotations

import altair as alt

PHASE_DOMAIN = ["prefill", "decode"]
PHASE_RANGE = ["#d95f02", "#1b9e77"]  # prefill orange, decode green: the same in every chart
PHASE_COLOR = alt.Scale(domain=PHASE_DOMAIN, range=PHASE_RANGE)

MEASURED, MODELLED = "measured", "modelled"


def display_token(text: str) -> str:
    """A token as a visible label: newlines and tabs shown as symbols, a leading space as '␣'."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥").replace("\r", "")
    if shown.startswith(" "):
        shown = "␣" + shown[1:]
    return shown or "∅"


def position_label(position: int, text: str) -> str:
    """Unique axis labels: the same token at two positions must stay two rows."""
    return f"{position}:{display_token(text)}"
