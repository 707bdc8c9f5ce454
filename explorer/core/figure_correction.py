"""Device figures corrected by the run they priced: a pass that beats its modelled floor re-takes the figures, and a
pass that still beats them raises a figure to what it achieved, so no page shows a utilisation above 100 %.

A pass that beats the roofline floor by more than 10 % ran faster than the device figures predict (the figures may have
been taken while the device was busy): they are re-measured (peaks are maxima, so the higher of old and new is kept)
and the trace is re-costed; if a pass still beats them, the figure is raised to what that pass achieved, and the trace
says so.
"""

from __future__ import annotations

from dataclasses import replace

from explorer.core.device import FiguresStore
from explorer.core.trace import PLAUSIBLE_SLACK, DeviceProfile, PassRecord, Trace


def recost(trace: Trace, device: DeviceProfile) -> Trace:
    """The same measurements, divided by other device figures (each pass with the cache layout it was costed for)."""
    return trace.recosted(device)


def beaten_passes(trace: Trace) -> list[PassRecord]:
    return [p for passes in trace.repeats for p in passes if p.beats_model]


FLOPS_FIELDS = ("peak_flops", "peak_flops_source", "measured_flops", "flops_samples")
BANDWIDTH_FIELDS = ("bandwidth_bytes_per_s", "bandwidth_source", "measured_bandwidth_bytes_per_s", "bandwidth_samples")
READ_BANDWIDTH_FIELDS = (
    "read_bandwidth_bytes_per_s",
    "read_bandwidth_source",
    "measured_read_bandwidth_bytes_per_s",
    "read_bandwidth_samples",
)

TRUST_FIELDS = ("figures_taken_under_load", "figures_note", "figures_retaken", "benchmark_core_share")


def higher_figures(old: DeviceProfile, new: DeviceProfile) -> DeviceProfile:
    """Each peak is the best ever seen in this process: a busy moment can only lower a measurement. The copy and the
    read-only figures are kept apart: each comes from whichever measurement of it was higher."""
    flops_from = new if new.peak_flops >= old.peak_flops else old
    bandwidth_from = new if new.bandwidth_bytes_per_s >= old.bandwidth_bytes_per_s else old
    # A trace from before the read-only figure (None) takes the new one.
    read_from = new if (new.read_bandwidth_bytes_per_s or 0.0) >= (old.read_bandwidth_bytes_per_s or 0.0) else old
    kept = {name: getattr(flops_from, name) for name in FLOPS_FIELDS}
    kept |= {name: getattr(bandwidth_from, name) for name in BANDWIDTH_FIELDS}
    kept |= {name: getattr(read_from, name) for name in READ_BANDWIDTH_FIELDS}
    return replace(new, **kept)


def achieved_memory_figures(p: PassRecord, device: DeviceProfile) -> tuple[float, float]:
    """(read, copy) bandwidths under which pass `p`'s modelled memory time is its measured time. A pass's bytes are
    mostly reads, so the read figure is raised: the reads get the time the writes leave at the copy figure. Where the
    writes alone would outlast the pass, the copy figure was too low as well, and both rise by the same factor."""
    read_bytes = p.cost.weight_bytes_read + p.cost.kv_bytes_read
    read_s = p.wall_s - p.cost.kv_bytes_written / device.bandwidth_bytes_per_s
    if read_s > 0 and read_bytes > 0:  # beaten: read_bytes / read figure > read_s, so this raises the read figure
        return read_bytes / read_s, device.bandwidth_bytes_per_s
    factor = p.cost.t_memory_s / p.wall_s
    return device.effective_read_bandwidth_bytes_per_s * factor, device.bandwidth_bytes_per_s * factor


def raised_to_achieved(device: DeviceProfile, beaten: list[PassRecord]) -> DeviceProfile:
    """A device can do at least what a pass of the run did: raise whichever figure a pass exceeded."""
    flops = max(
        [device.peak_flops]
        + [p.achieved_flops_per_s for p in beaten if p.cost.t_compute_s > PLAUSIBLE_SLACK * p.wall_s]
    )
    memory = [achieved_memory_figures(p, device) for p in beaten if p.cost.t_memory_s > PLAUSIBLE_SLACK * p.wall_s]
    read = max([device.effective_read_bandwidth_bytes_per_s] + [r for r, _ in memory])
    bandwidth = max([device.bandwidth_bytes_per_s] + [c for _, c in memory])
    read_raised = read > device.effective_read_bandwidth_bytes_per_s
    return replace(
        device,
        peak_flops=flops,
        peak_flops_source="achieved" if flops > device.peak_flops else device.peak_flops_source,
        bandwidth_bytes_per_s=bandwidth,
        bandwidth_source="achieved" if bandwidth > device.bandwidth_bytes_per_s else device.bandwidth_source,
        read_bandwidth_bytes_per_s=read if read_raised else device.read_bandwidth_bytes_per_s,
        read_bandwidth_source="achieved" if read_raised else device.read_bandwidth_source,
    )


def keep_figures_honest(trace: Trace, figures: FiguresStore | None = None) -> Trace:
    """`trace` re-costed if a pass beat its floor (see the module's docstring); `figures` (None: a store of this call's
    own) is where the fresh figures are taken and the better ones kept."""
    figures = FiguresStore() if figures is None else figures
    beaten = beaten_passes(trace)
    if not beaten:
        return trace
    kind, dtype = trace.device.kind, trace.device.dtype
    fastest = min(beaten, key=lambda p: p.wall_s / p.cost.roofline_time_s)
    note = (
        f"Pass {fastest.index} ran in {fastest.wall_s * 1e3:.2f} ms, under the modelled floor of "
        f"{fastest.cost.roofline_time_s * 1e3:.2f} ms, faster than the device figures predict: the figures may "
        "have been taken while the device was busy, so they were measured again"
    )
    fresh = figures.get(kind, dtype, fresh=True)
    # Each figure kept is the higher of the two sets, so if either set looked sound, what is kept is at least as good.
    sound = fresh if not fresh.figures_taken_under_load else trace.device
    device = replace(higher_figures(trace.device, fresh), **{name: getattr(sound, name) for name in TRUST_FIELDS})
    trace = recost(trace, device)
    still = beaten_passes(trace)
    if still:
        device = raised_to_achieved(device, still)
        note += f"; {len(still)} passes still beat them, so the figures were raised to what those passes achieved"
        trace = recost(trace, device)
    figures.keep(device)  # later runs of the figures' owner start from the better figures
    return replace(trace, device=replace(device, busy_note=note + "."))
