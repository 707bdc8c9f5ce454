"""At scale calibrated by this device: the what-if's datasheet floors scaled by how far a real run here landed from its
own floors (measured / modelled floor, for decode and for prefill), the third column beside "modelled" and "measured
here". Carrying a device's efficiency to another GPU is an assumption, and every figure from it says so."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from explorer.core.trace import Trace
from explorer.core.units import ms, short_time
from explorer.scale.whatif import WhatIf

CALIBRATED = "calibrated"  # the label: a modelled floor x a measured factor, not a measurement


@dataclass(frozen=True)
class Efficiency:
    """How far a run's passes landed from their modelled floors on the device that ran them: measured / floor, the
    median of each over every repeat (1 would be a pass at its floor; its efficiency, floor / measured, is 1 / it)."""

    device: str  # the run's device, as displayed
    model: str
    decode_factor: float | None  # median decode time / median decode floor; None without a decode pass
    prefill_factor: float  # median prefill time / its floor

    @property
    def decode_efficiency(self) -> float | None:
        return None if self.decode_factor is None else 1 / self.decode_factor

    @property
    def prefill_efficiency(self) -> float:
        return 1 / self.prefill_factor


def efficiency_of(trace: Trace) -> Efficiency:
    """The run's factors over its own floors (roofline floors at the device's figures the run was costed with)."""
    decodes = trace.all_decodes
    prefills = [passes[0] for passes in trace.repeats]
    decode_factor = None
    if decodes:
        decode_factor = trace.decode_median_s / median(p.cost.roofline_time_s for p in decodes)
    prefill_factor = median(p.wall_s for p in prefills) / median(p.cost.roofline_time_s for p in prefills)
    return Efficiency(trace.device.name, trace.model.display_name, decode_factor, prefill_factor)


@dataclass(frozen=True)
class CalibratedRow:
    """One what-if figure: as modelled at the datasheet's peaks, and calibrated by this device's factor."""

    figure: str
    modelled: str  # the what-if at its GPU's datasheet figures
    calibrated: str  # the same x this device's factor over its floor (an assumption)
    factor: str  # the factor applied, with where it was measured


@dataclass(frozen=True)
class Calibrated:
    """The what-if's decode step, tokens/s ceiling and prefill, calibrated by `efficiency`."""

    what_if: WhatIf
    efficiency: Efficiency
    decode_step_s: float | None  # the what-if's decode floor x the decode factor; None without a decode pass here
    prefill_s: float  # the what-if's prefill floor x the prefill factor

    @property
    def decode_tokens_per_s(self) -> float | None:
        return None if self.decode_step_s is None else self.what_if.scenario.batch / self.decode_step_s

    @property
    def rows(self) -> tuple[CalibratedRow, ...]:
        r, e = self.what_if, self.efficiency
        where = f"measured on {e.device} ({e.model})"
        rows = []
        if self.decode_step_s is not None and e.decode_factor is not None:
            decode = f"x {e.decode_factor:,.2f}: decode median / its floor, {where}"
            rows += [
                CalibratedRow("decode step", ms(r.decode.floor_s), ms(self.decode_step_s), decode),
                CalibratedRow(
                    "tokens/s ceiling",
                    f"{r.decode_tokens_per_s_ceiling:,.0f}",
                    f"{self.decode_tokens_per_s:,.0f}",
                    decode,
                ),
            ]
        prefill = f"x {e.prefill_factor:,.2f}: prefill / its floor, {where}"
        rows.append(
            CalibratedRow(
                f"prefill of {r.scenario.prompt_tokens:,} tokens",
                short_time(r.prefill.floor_s),
                short_time(self.prefill_s),
                prefill,
            )
        )
        return tuple(rows)


def calibrate(result: WhatIf, efficiency: Efficiency) -> Calibrated:
    """The what-if's floors scaled by the factors this device reached over its own floors."""
    decode = None if efficiency.decode_factor is None else result.decode.floor_s * efficiency.decode_factor
    return Calibrated(result, efficiency, decode, result.prefill.floor_s * efficiency.prefill_factor)
