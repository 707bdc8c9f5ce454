"""Whether a device's measured figures can be trusted, and the caveat every bound or ridge stated from them carries.

Measured figures are unreliable (taken under load) when any of these holds, each a stated, checkable test:
- the benchmarks' threads had less than `MIN_CORE_SHARE` of their cores (process CPU time over wall time x threads):
  other work had the rest, so every figure is low by about that much, however steady its repeats look;
- a benchmark's repeats spread wider than `SPREAD_FACTOR` (best over worst): something took the cores mid-way;
- a figure is under 1 / `BELOW_EARLIER_FACTOR` of the same figure this machine measured earlier (where the caller
  knows an earlier one): hardware does not slow down, a busy moment does.
A figure from a datasheet or the driver (a GPU's spec peak) is not judged: load cannot lower it. Pure: no torch.

Where it is said: a page says it once, near its top (`figures_line`, as `explorer.ui.page_start.under_load_warning`
draws it), and its sentences state bounds and ridges plainly; text with no such banner (the CLI's report and sweeps)
marks each bound it states (`caveat`, `marked_bound`).
"""

from __future__ import annotations

from explorer.core.device_profile import DeviceProfile
from explorer.core.units import human_bandwidth, human_flops_per_s

MIN_CORE_SHARE = 0.7  # a stream alone on its cores keeps every thread on CPU (stalls on memory count as CPU time),
# so near 1; one busy process beside a 2-thread benchmark on 2 cores leaves it ~2/3, two ~1/2; on this 2-core machine
# shared with other work it read 5-14 %
SPREAD_FACTOR = 1.5  # best / worst repeat: the 2048² float32 matmul's spread 1.02x on a near-idle 2-core machine
BELOW_EARLIER_FACTOR = 2.0  # under half an earlier figure of the same benchmark on the same machine
UNDER_LOAD = "figures taken under load: unreliable"


def _benchmarks(d: DeviceProfile) -> list[tuple[str, tuple[float, ...], bool, float | None]]:
    """(name, samples, whether the roofline uses the measured figure, its best) of each microbenchmark."""
    return [
        ("matmul", d.flops_samples, d.peak_flops_source == "measured", d.measured_flops),
        ("copy", d.bandwidth_samples, d.bandwidth_source == "measured", d.measured_bandwidth_bytes_per_s),
        (
            "read",
            d.read_bandwidth_samples,
            d.read_bandwidth_source == "measured",
            d.measured_read_bandwidth_bytes_per_s,
        ),
    ]


def spread_reasons(d: DeviceProfile) -> list[str]:
    """'the matmul repeats spread 2.3x' for each used benchmark whose best is over SPREAD_FACTOR times its worst."""
    reasons = []
    for name, samples, used, _ in _benchmarks(d):
        if used and len(samples) >= 2 and min(samples) > 0 and max(samples) / min(samples) > SPREAD_FACTOR:
            reasons.append(
                f"the {name} repeats spread {max(samples) / min(samples):.1f}x (more than {SPREAD_FACTOR:g}x)"
            )
    return reasons


def below_earlier_reasons(new: DeviceProfile, earlier: DeviceProfile | None) -> list[str]:
    """Each used figure under 1 / BELOW_EARLIER_FACTOR of the same benchmark's earlier best on the same device."""
    if earlier is None or (earlier.name, earlier.kind, earlier.dtype) != (new.name, new.kind, new.dtype):
        return []
    reasons = []
    for (name, _, used, best), (_, _, _, before) in zip(_benchmarks(new), _benchmarks(earlier), strict=True):
        same_size = name != "matmul" or new.matmul_n == earlier.matmul_n
        if used and same_size and best and before and best * BELOW_EARLIER_FACTOR < before:
            show = human_flops_per_s if name == "matmul" else human_bandwidth
            reasons.append(f"the {name} gave {show(best)}, under half of the {show(before)} measured earlier here")
    return reasons


def unreliable_reason(new: DeviceProfile, earlier: DeviceProfile | None = None) -> str:
    """Why `new`'s measured figures look taken under load ('' when they look sound), judged on its own samples and
    core share and, where the caller knows one, against `earlier` figures of this machine (same device and dtype)."""
    reasons = []
    share = new.benchmark_core_share
    if share is not None and share < MIN_CORE_SHARE:
        reasons.append(
            f"the benchmarks' threads had {share:.0%} of their cores, under {MIN_CORE_SHARE:.0%}: other work had the "
            "rest"
        )
    reasons += spread_reasons(new) + below_earlier_reasons(new, earlier)
    return "; ".join(reasons)


def caveat(d: DeviceProfile) -> str:
    """' (figures taken under load: unreliable)' after any bound or ridge stated from unreliable figures, else '': for
    text with no warning at its top (the CLI); a page says `figures_line` once instead."""
    return f" ({UNDER_LOAD})" if d.figures_taken_under_load else ""


def marked_bound(bound: str, d: DeviceProfile) -> str:
    """'memory-bound', or 'memory-bound (figures taken under load: unreliable)': never stated as fact from them."""
    return f"{bound}-bound{caveat(d)}"


def figures_line(d: DeviceProfile) -> str:
    """The one plain line a screen or report shows about unreliable figures ('' when they look sound): a page's one
    under-load warning."""
    if not d.figures_taken_under_load:
        return ""
    return (
        "The device figures were taken under load, so they are unreliable, and so is every bound and ridge stated "
        f"from them: {d.figures_note}"
    )
