"""Every number a user types, checked before anything loads: finite (NaN and infinity refused, as `float("nan")` slips
past every `<` and `>`), within its range, with an upper bound, refused in one line naming the setting and its range.
Torch-free, so the CLI refuses a bad number in a blink and a page before anything is paid for."""

from __future__ import annotations

import math
import numbers

from explorer.core.errors import BadInput

MAX_BUDGET_S = 24 * 3600.0  # a lab's time guard: a budget past a day guards nothing
MAX_SEED = 2**63 - 1  # torch's manual_seed takes 64 bits; 63 stay exact in every JSON reader's int64
MAX_SHOWN_CHARS = 24  # a refused value is echoed this long at most: the error stays one short line


def number_text(value: object) -> str:
    """An int as typed (1000000, not 1e+06), a float short (0.5, nan, inf), anything else as its repr."""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value) if isinstance(value, numbers.Integral) else repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:MAX_SHOWN_CHARS]}… ({len(text)} characters)"


def is_finite(value: object) -> bool:
    """A real, finite number: not NaN, not infinity, not a bool (which Python counts as an int), not text. A whole
    number is finite however long (math.isfinite would overflow on 10**400)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral) or math.isfinite(value)


def check_range(what: str, value: float, low: float, high: float) -> None:
    """`value` is a finite number from `low` to `high`, both included."""
    if not is_finite(value) or not low <= value <= high:
        raise BadInput(f"{what} must be between {number_text(low)} and {number_text(high)}, not {number_text(value)}.")


def check_above_zero(what: str, value: float, high: float) -> None:
    """`value` is a finite number above 0 and at most `high`: a time or an SLO of 0 would refuse everything."""
    if not is_finite(value) or not 0 < value <= high:
        raise BadInput(f"{what} must be above 0 and at most {number_text(high)}, not {number_text(value)}.")


def check_budget(budget_s: float) -> None:
    """A lab's time budget: with NaN every `estimate > budget` is False, which would switch the guard off."""
    check_above_zero("The time budget (s)", budget_s, MAX_BUDGET_S)
