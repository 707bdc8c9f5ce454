"""Tables as a person reads them: a frame's snake_case columns get human labels with their units (`ttft_s` becomes
"TTFT (ms)" in milliseconds), and floats are rounded to four significant digits. The frames themselves (and their
CSV downloads) keep the raw names and full values; only what a page shows is relabelled."""

from __future__ import annotations

import math
import re

import pandas as pd

SIGNIFICANT = 4
WORDS = {  # abbreviations a reader knows in capitals, and the words a name spells in short
    "ttft": "TTFT",
    "itl": "ITL",
    "tpot": "TPOT",
    "e2e": "E2E",
    "kv": "KV",
    "slo": "SLO",
    "gpu": "GPU",
    "cpu": "CPU",
    "id": "ID",
    "p50": "p50",
    "p90": "p90",
    "p99": "p99",
}
SNAKE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")


def human_label(name: str) -> tuple[str, float]:
    """('ITL p50 (ms)', 1000.0) for 'itl_p50_s': the label and the factor its values are multiplied by."""
    if not SNAKE.match(name):
        return name, 1.0
    words = name.split("_")
    unit, factor = "", 1.0
    if words[-2:] == ["per", "s"]:
        words, unit = words[:-2], "/s"
    elif words[-1] == "s":
        words, unit, factor = words[:-1], "ms", 1e3
    elif words[-1] in ("ms", "bytes", "mb", "gb", "tokens"):
        words, unit = words[:-1], {"mb": "MB", "gb": "GB"}.get(words[-1], words[-1])
    text = " ".join(WORDS.get(w, w) for w in words)
    if unit == "/s":
        return f"{text}/s", factor
    return (f"{text} ({unit})" if unit else text), factor


def rounded(value: object) -> object:
    """A float to four significant digits (whole floats and non-floats unchanged)."""
    if not isinstance(value, float) or not math.isfinite(value) or value == 0 or value.is_integer():
        return value
    return float(f"{value:.{SIGNIFICANT}g}")


def human_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as shown: human column labels with units, seconds as milliseconds, floats rounded."""
    shown = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        label, factor = human_label(str(column))
        if label in shown.columns:  # two raw names for one label: keep this one's own name
            label, factor = str(column), 1.0
        values = frame[column]
        if pd.api.types.is_float_dtype(values) or (factor != 1.0 and pd.api.types.is_numeric_dtype(values)):
            values = (values.astype(float) * factor).map(rounded)
        shown[label] = values
    return shown
