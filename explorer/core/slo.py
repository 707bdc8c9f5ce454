"""SLO defaults that fit the device in use: a round figure a little above what the run itself measured, so that a
default view shows met and missed targets where a run has both (a fixed 50 ms ITL is missed by every token on a small
CPU and met by every token on a GPU); the common chat figures stay as a named reference."""

from __future__ import annotations

import math
from dataclasses import dataclass

from explorer.core.stats import percentile
from explorer.core.trace import Trace

REFERENCE_TTFT_SLO_S = 1.0  # a common interactive-chat target, e.g. "TTFT under 1 s"
REFERENCE_ITL_SLO_S = 0.050  # ... and "p99 ITL under 50 ms" (20 tokens/s: faster than reading)
HEADROOM = 1.2  # the default SLO: this much above the measured figure, then rounded


@dataclass(frozen=True)
class SloDefaults:
    """The SLOs a view starts from until the user sets one, and where they were chosen from (said on screen)."""

    ttft_s: float
    itl_s: float
    source: str  # e.g. "1.2 × this run's median TTFT (465 ms) and ITL (58.4 ms), rounded"


REFERENCE = SloDefaults(REFERENCE_TTFT_SLO_S, REFERENCE_ITL_SLO_S, "a common chat target (TTFT 1 s, p99 ITL 50 ms)")


def round_figure_s(value_s: float) -> float:
    """`value_s` to two significant figures in milliseconds (58.37 ms → 58 ms, 559 ms → 560 ms, 6.84 ms → 6.8 ms)."""
    value_ms = value_s * 1e3
    step_ms = 10 ** (math.floor(math.log10(value_ms)) - 1)
    return round(round(value_ms / step_ms) * step_ms, 6) / 1e3


def above_figure_s(value_s: float) -> float:
    """The smallest round figure (two significant figures in ms) strictly above `value_s`: 110.6 ms → 120 ms, 110 ms →
    120 ms, 58.37 ms → 59 ms. An SLO chosen from a percentile this way is met by that percentile ("pass" is strictly
    under), where rounding to the nearest figure (110.6 → 110) would fail it."""
    value_ms = value_s * 1e3
    step_ms = 10 ** (math.floor(math.log10(value_ms)) - 1)
    return round((math.floor(value_ms / step_ms + 1e-9) + 1) * step_ms, 6) / 1e3


def with_headroom(measured_s: float | None, fallback_s: float) -> float:
    if measured_s is None or not measured_s > 0 or not math.isfinite(measured_s):
        return fallback_s
    return round_figure_s(HEADROOM * measured_s)


def figure_ms(value_ms: float) -> str:
    """A figure in ms as people write it: '58', '6.8', '1,000' (never '1e+03')."""
    return f"{value_ms:,.0f}" if value_ms >= 100 else f"{value_ms:.3g}"


def _ms(value_s: float) -> str:
    return f"{figure_ms(value_s * 1e3)} ms"


def chosen_from(ttft_s: float | None, itl_s: float | None, what: str) -> SloDefaults:
    """Defaults `HEADROOM` above a measured TTFT and ITL (`what` names them, e.g. "this run's median"); a figure the
    source lacks (no decode: no ITL) keeps the reference."""
    parts = [f"{name} ({_ms(value)})" for name, value in (("TTFT", ttft_s), ("ITL", itl_s)) if value]
    if not parts:
        return REFERENCE
    return SloDefaults(
        with_headroom(ttft_s, REFERENCE_TTFT_SLO_S),
        with_headroom(itl_s, REFERENCE_ITL_SLO_S),
        f"{HEADROOM:g} × {what} {' and '.join(parts)}, rounded",
    )


def from_trace(trace: Trace) -> SloDefaults:
    """A run's own defaults. TTFT: 1.2 × its median TTFT (over repeats), rounded. ITL: the round figure just above its
    90th-percentile gap (every repeat's gaps pooled), so that its p90 and most gaps meet it and the slowest tenth can
    miss it: a run's gaps often lie within ±10 % of their median, and 1.2 × the median would be met by every one."""
    spreads = trace.spreads
    ttft_s = spreads.ttft_s.median if spreads.ttft_s else None
    gaps_s = trace.all_itl_s
    if not gaps_s:
        return chosen_from(ttft_s, None, "this run's median")
    p90_s = percentile(gaps_s, 90)
    return SloDefaults(
        with_headroom(ttft_s, REFERENCE_TTFT_SLO_S),
        above_figure_s(p90_s),  # met by the run's own p90: the slowest tenth of the gaps can miss it
        f"{HEADROOM:g} × this run's median TTFT ({_ms(ttft_s)}), rounded, and the round figure above its "
        f"90th-percentile gap ({_ms(p90_s)}) for ITL",
    )
