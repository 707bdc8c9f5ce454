"""At scale calibrated by this device: the what-if's datasheet floors scaled by how far a real run here landed from its
own floors (measured / modelled floor, for decode and for prefill), the third column beside "modelled" and "measured
here". Carrying a device's efficiency to another GPU is an assumption, and every figure from it says so."""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from explorer.core.device_profile import DeviceProfile
from explorer.core.roofline import Cost, roofline_time
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
    floors_at: str = "this device's figures"  # the peaks the run's floors were taken at: a GPU's datasheet's, if any

    @property
    def decode_efficiency(self) -> float | None:
        return None if self.decode_factor is None else 1 / self.decode_factor

    @property
    def prefill_efficiency(self) -> float:
        return 1 / self.prefill_factor


def datasheet_device(device: DeviceProfile) -> DeviceProfile | None:
    """The device at its datasheet's peaks (a GPU the spec table knows), else None (a CPU has no datasheet). A
    missing figure of the two keeps the one the run was costed with."""
    if not (device.datasheet_flops or device.datasheet_bandwidth_bytes_per_s):
        return None
    bandwidth = device.datasheet_bandwidth_bytes_per_s
    return replace(
        device,
        peak_flops=device.datasheet_flops or device.peak_flops,
        bandwidth_bytes_per_s=bandwidth or device.bandwidth_bytes_per_s,
        read_bandwidth_bytes_per_s=bandwidth or device.effective_read_bandwidth_bytes_per_s,
    )


def efficiency_of(trace: Trace) -> Efficiency:
    """The run's factors over its own floors. The what-if's floors are at its GPU's datasheet peaks, so on a GPU with
    a datasheet the run's floors are taken at the datasheet's peaks too: a factor over the measured peaks' floors
    would drop the gap between the measured and datasheet peaks (~20 % on an H200) and calibrate too optimistically.
    Elsewhere (a CPU) the floors at the figures the run was costed with."""
    sheet = datasheet_device(trace.device)

    def floor_s(cost: Cost) -> float:
        if sheet is None:
            return cost.roofline_time_s
        return roofline_time(cost.flops, cost.bytes_read, sheet, cost.kv_bytes_written)

    decodes = trace.all_decodes
    prefills = [passes[0] for passes in trace.repeats]
    decode_factor = None
    if decodes:
        decode_factor = trace.decode_median_s / median(floor_s(p.cost) for p in decodes)
    prefill_factor = median(p.wall_s for p in prefills) / median(floor_s(p.cost) for p in prefills)
    floors_at = "this device's figures" if sheet is None else "the datasheet's peaks"
    return Efficiency(trace.device.name, trace.model.display_name, decode_factor, prefill_factor, floors_at)


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
        where = f"measured on {e.device} ({e.model}), floors at {e.floors_at}"
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
