"""Tables as a person reads them: a frame's snake_case columns get human labels with their units (`ttft_s` becomes
"TTFT (ms)" in milliseconds, or stays in seconds where its values run past 10 s), floats are rounded to four
significant digits, yes/no stand for booleans and a dash for an empty cell. The frames themselves (and their CSV
downloads) keep the raw names and full values; only what a page shows is relabelled. A chart's tooltip names its raw
fields the same way (`human_name`). A talk's text has every figure rounded to 3 significant digits
(`readable_figures`: "209.63 ms" reads "210 ms" from the back of a room)."""

from __future__ import annotations

import math
import numbers
import re

import pandas as pd

SIGNIFICANT = 4
READABLE_DIGITS = 3  # presenter mode: figures in a slide's text to what a room can read ("209.63 ms" -> "210 ms")
# A decimal figure in running text ("209.63", "1,234.5"), not part of a word, a link ("2403.02310" in an arXiv
# address) or a version ("3.12.1").
DECIMAL_FIGURE = re.compile(r"(?<![\w.,/:])(\d{1,3}(?:,\d{3})+|\d+)\.(\d+)(?!\.?\d|\w)")
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
SECONDS_SHOWN_AS_MS_BELOW_S = 10.0  # a column of seconds reads in ms up to this; past it, 6696000 ms says nothing
EMPTY = "—"  # an empty cell, as a person writes it (a grid would print "None")
YES_NO = {True: "yes", False: "no"}


def human_label(name: str, seconds_as_ms: bool = True) -> tuple[str, float]:
    """('ITL p50 (ms)', 1000.0) for 'itl_p50_s': the label and the factor its values are multiplied by; with
    `seconds_as_ms` False a column of seconds keeps them: ('ITL p50 (s)', 1.0)."""
    if not SNAKE.match(name):
        return name, 1.0
    words = name.split("_")
    unit, factor = "", 1.0
    if words[-2:] == ["per", "s"]:
        words, unit = words[:-2], "/s"
    elif words[-1] == "s":
        words, unit, factor = words[:-1], *(("ms", 1e3) if seconds_as_ms else ("s", 1.0))
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


def human_name(name: str) -> str:
    """A raw field's name as a person reads it, its values unchanged: 'cache_len' → 'cache len', 'wall_ms' → 'wall
    (ms)', 'cumulative_s' → 'cumulative (s)' (a chart's tooltip, whose values stay as they are)."""
    return human_label(name, seconds_as_ms=False)[0]


def _large_seconds(values: pd.Series) -> bool:
    numbers = pd.to_numeric(values, errors="coerce").abs()
    return bool(numbers.max() >= SECONDS_SHOWN_AS_MS_BELOW_S) if numbers.notna().any() else False


def grouped(value: object) -> object:
    """A number as text grouped in thousands (6,696,000 and 1,234.5, not 6696000.0); anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return value
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def _empty(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def human_column(name: str, values: pd.Series) -> tuple[str, pd.Series]:
    """One column as shown: its label with its unit, its values scaled, rounded, yes/no or a dash where empty (a
    number column with an empty cell becomes text, its numbers grouped: a grid prints an empty number as "None")."""
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    label, factor = human_label(name, seconds_as_ms=not (numeric and _large_seconds(values)))
    if pd.api.types.is_bool_dtype(values) or (values.map(type).isin([bool]).all() and len(values)):
        return label, values.map(YES_NO)
    if pd.api.types.is_float_dtype(values) or (factor != 1.0 and numeric):
        values = (values.astype(float) * factor).map(rounded)
    if numeric and values.isna().any():
        return label, values.astype(object).map(lambda v: EMPTY if _empty(v) else grouped(v))
    if not numeric:
        values = values.map(lambda v: EMPTY if _empty(v) else YES_NO[v] if isinstance(v, bool) else v)
    return label, values


def human_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as shown: human column labels with units, seconds as milliseconds (or seconds past 10 s), floats
    rounded, booleans as yes/no, empty text cells as a dash."""
    shown = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        label, values = human_column(str(column), frame[column])
        if label in shown.columns:  # two raw names for one label: keep this one's own name
            label, values = str(column), frame[column]
        shown[label] = values
    return shown


def readable_number(value: float, digits: int = READABLE_DIGITS) -> str:
    """`value` to `digits` significant digits, never dropping a digit left of the point, without trailing zeros:
    209.63 -> '210', 86.40 -> '86.4', 0.5012 -> '0.501', 12345.6 -> '12,346'."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - (math.floor(math.log10(abs(value))) + 1))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def readable_figures(text: str, digits: int = READABLE_DIGITS) -> str:
    """Every decimal figure in `text` to `digits` significant digits (`readable_number`); whole numbers, words, links
    and versions unchanged. One helper for every sentence of a slide, so no figure is left at two decimals."""
    return DECIMAL_FIGURE.sub(
        lambda m: readable_number(float(f"{m.group(1).replace(',', '')}.{m.group(2)}"), digits), text
    )
