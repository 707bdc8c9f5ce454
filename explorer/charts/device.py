"""The device figures the roofline divides by, as a table with each figure's source, spread and reliability, and which
figures a result was modelled with beside this session's live ones."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from explorer.charts.common import MEASURED, MODELLED
from explorer.core.device_profile import READ_BANDWIDTH_COUNTS
from explorer.core.trace import DeviceProfile
from explorer.core.units import human_bandwidth, human_bytes, human_flops

DEVICE_NOTE = {
    "cpu": "A CPU has no datasheet here: its 'peaks' are the best that a large matmul, a large copy and a large "
    "read-only sum achieved on this machine with the same threads, so a pass can approach the roof but a real kernel "
    "rarely reaches it.",
    "cuda": "On a GPU the roofline divides by what the microbenchmarks achieved on this board; the datasheet's (or the "
    "driver's) peaks stand beside them, usually somewhat above: no kernel reaches the bus's peak.",
}


def device_frame(device: DeviceProfile) -> pd.DataFrame:
    """The figures the roofline divides by, each with its source, and the microbenchmarks with their spread."""

    def spread(samples: tuple[float, ...], fmt: Callable[[float], str]) -> str:
        return f"best of {len(samples)}; spread {fmt(min(samples))} – {fmt(max(samples))}" if samples else ""

    matmul = f"{device.matmul_n}×{device.matmul_n} {device.dtype} matmul" if device.matmul_n else "matmul"
    copy = f"copy of {human_bytes(device.copy_bytes)}" if device.copy_bytes else "copy"
    read = f"sum over {human_bytes(device.read_bytes)}" if device.read_bytes else "sum"
    rows = [
        ("device", f"{device.name} ({device.kind})", "the run's device"),
        ("dtype", device.dtype, "every FLOP/s figure here is for this dtype"),
        ("peak compute", human_flops(device.peak_flops) + "/s", device.peak_flops_source),
        read_bandwidth_row(device),
        (
            "copy bandwidth (KV cache writes)",
            f"{human_bandwidth(device.bandwidth_bytes_per_s)} ({device.bandwidth_counts})",
            device.bandwidth_source,
        ),
        (
            "ridge point",
            f"{device.ridge_point_flops_per_byte:.1f} FLOP/byte",
            f"{MODELLED}: peak compute / read bandwidth (a pass's bytes are mostly reads)",
        ),
        (
            f"achievable compute ({matmul})",
            _rate_or_na(device.measured_flops, lambda v: human_flops(v) + "/s"),
            f"{MEASURED}; {spread(device.flops_samples, lambda v: human_flops(v) + '/s')}",
        ),
        (
            f"achievable bandwidth ({copy}, {device.bandwidth_counts})",
            _rate_or_na(device.measured_bandwidth_bytes_per_s, human_bandwidth),
            f"{MEASURED}; {spread(device.bandwidth_samples, human_bandwidth)}",
        ),
        (
            f"achievable bandwidth ({read}, {READ_BANDWIDTH_COUNTS})",
            _rate_or_na(device.measured_read_bandwidth_bytes_per_s, human_bandwidth),
            f"{MEASURED}; {spread(device.read_bandwidth_samples, human_bandwidth)}",
        ),
        ("measured at", device.measured_at or "n/a", measured_when(device)),
        ("memory", human_bytes(device.memory_bytes) if device.memory_bytes else "n/a", "reported by the system"),
    ]
    if device.datasheet_flops:
        sheet = human_flops(device.datasheet_flops) + "/s"
        rows.append(("datasheet compute", sheet, f"spec: {device.datasheet_source}"))
    if device.datasheet_bandwidth_bytes_per_s:
        rows.append(
            (
                "datasheet bandwidth",
                human_bandwidth(device.datasheet_bandwidth_bytes_per_s),
                f"{device.datasheet_bandwidth_source}: {device.datasheet_source}",
            )
        )
    if device.busy_note:
        rows.append(("re-measured", device.busy_note, MEASURED))
    rows += trust_rows(device)
    if device.notes:
        rows.append(("notes", device.notes, ""))
    return pd.DataFrame(rows, columns=["figure", "value", "source"])


def trust_rows(device: DeviceProfile) -> list[tuple[str, str, str]]:
    """How busy the machine was while the figures were taken, and whether they can be trusted."""
    rows = []
    if device.benchmark_core_share is not None:
        share = f"{device.benchmark_core_share:.0%} of their cores"
        rows.append(("cores the benchmarks had", share, f"{MEASURED}: process CPU time / (wall × threads)"))
    if device.figures_taken_under_load:
        rows.append(("reliability", "unreliable", device.figures_note))  # the page's warning says why
    elif device.figures_note:
        rows.append(("reliability", "sound", device.figures_note))
    return rows


def read_bandwidth_row(device: DeviceProfile) -> tuple[str, str, str]:
    """The figure weight and KV reads are divided by; a trace from before it was measured says it uses the copy's."""
    figure = "read bandwidth (weights, KV cache reads)"
    if device.read_bandwidth_from_copy:
        value = f"{human_bandwidth(device.bandwidth_bytes_per_s)} ({device.bandwidth_counts})"
        return figure, value, "the copy figure: this trace was taken before read-only bandwidth was measured"
    value = f"{human_bandwidth(device.effective_read_bandwidth_bytes_per_s)} ({READ_BANDWIDTH_COUNTS})"
    return figure, value, str(device.read_bandwidth_source)


def measured_when(device: DeviceProfile) -> str:
    """When and why the microbenchmarks last ran: the figures are reused across runs, so "before this run" may be
    false."""
    if device.busy_note:
        return (
            "re-measured after this run: a pass ran faster than the figures predicted (they may have been taken busy)"
        )
    return (
        "the latest microbenchmarks in this server process: the first run's after its warm-up, or a re-measure; "
        "reused by later runs while no pass beats them"
    )


def _rate_or_na(value: float | None, fmt: Callable[[float], str]) -> str:
    return "n/a" if value is None else fmt(value)


def figures_text(device: DeviceProfile) -> str:
    """`ridge 5.7 FLOP/B (peak 93.1 GFLOP/s, read 16.4 GB/s, float32 on cpu)`: the figures a result's modelled numbers
    rest on, in one phrase."""
    return (
        f"ridge {device.ridge_point_flops_per_byte:,.1f} FLOP/B (peak {human_flops(device.peak_flops)}/s, read "
        f"{human_bandwidth(device.effective_read_bandwidth_bytes_per_s)}, {device.dtype} on {device.kind})"
    )


def figures_used_sentence(used: DeviceProfile, recorded: bool, live: DeviceProfile | None) -> str:
    """Which device figures a lab's modelled numbers were computed with, and this session's live ones beside them:
    a recorded result keeps the figures of the machine and moment it was recorded on."""
    whose = "the recording's, taken when it was made" if recorded else "this result's, taken for its run"
    when = f" at {used.measured_at}" if used.measured_at else ""
    sentence = f"Modelled figures here use {whose}{when}: {figures_text(used)}."
    if live is None:
        return sentence + " No live run in this session yet: its figures would be taken on this machine."
    if live == used:
        return sentence + " This session's live run uses the same figures."
    return sentence + f" This session's live run uses {figures_text(live)}."
