"""Figures over many values: linear-interpolated percentiles, a figure's spread over repeats, and the ITL
percentiles of anything with inter-token gaps (a trace, a scheduled request, a remote request)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def percentile(values: list[float] | tuple[float, ...], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


class ItlPercentiles:
    """p50/p90/p99 of a request's inter-token latencies, for anything with an `itl_s` tuple (a trace, a scheduled
    request, a remote request): one definition, so every page reads the same percentiles the same way."""

    itl_s: tuple[float, ...]

    @property
    def itl_p50_s(self) -> float | None:
        return percentile(self.itl_s, 50)

    @property
    def itl_p90_s(self) -> float | None:
        return percentile(self.itl_s, 90)

    @property
    def itl_p99_s(self) -> float | None:
        return percentile(self.itl_s, 99)


@dataclass(frozen=True)
class Spread:
    """A figure over repeats: the median, with the smallest and largest seen."""

    median: float
    low: float
    high: float
    samples: int

    @classmethod
    def of(cls, values: list[float]) -> Spread | None:
        return cls(float(np.median(values)), min(values), max(values), len(values)) if values else None
