"""This machine's last run beside the what-if: how far its measured decode passes were from their own memory floor
(median wall over median floor, every repeat's decode passes). Applying that factor to a GPU is an assumption, and
everything that shows it says so."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from explorer.core.trace import Trace


@dataclass(frozen=True)
class LocalGap:
    """Measured decode time against the roofline's memory floor on the machine that ran it."""

    model: str  # the run's model, as displayed
    device: str  # the run's device, as displayed
    dtype: str
    figures_taken_under_load: bool  # the bandwidth figure the floor divides by looked unreliable (the page warns)
    decode_passes: int  # over every repeat
    median_wall_s: float  # measured
    median_memory_floor_s: float  # modelled: weights + KV traffic over the device's bandwidth figure

    @property
    def factor(self) -> float:
        """How many times its memory floor a decode pass took here: 1 would be a pass at the bandwidth's limit."""
        return self.median_wall_s / self.median_memory_floor_s

    @property
    def sentence(self) -> str:
        return f"decode ran at {self.factor:.1f}x its memory floor here"


def local_gap(trace: Trace) -> LocalGap | None:
    """None when the run has no decode pass (one new token) or no floor to divide by."""
    decodes = trace.all_decodes
    floors = [p.cost.t_memory_s for p in decodes]
    if not decodes or median(floors) <= 0:
        return None
    return LocalGap(
        model=trace.model.display_name,
        device=trace.device.name,
        dtype=trace.model.dtype,
        figures_taken_under_load=trace.device.figures_taken_under_load,
        decode_passes=len(decodes),
        median_wall_s=trace.decode_median_s,  # the decode median every page shows
        median_memory_floor_s=median(floors),
    )
