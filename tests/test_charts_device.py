"""The device table (explorer.charts.device): every figure with its source and spread, when it was measured, and the
figures a lab's result used named beside this session's live ones."""

from __future__ import annotations

from dataclasses import replace

from explorer.charts import device as device_charts
from explorer.core.trace import DeviceProfile
from tests.cost_support import HAND

READ_ROW = "read bandwidth (weights, KV cache reads)"


def by_figure(device: DeviceProfile) -> dict[str, dict[str, str]]:
    frame = device_charts.device_frame(device)
    return dict(zip(frame["figure"], frame.to_dict("records"), strict=True))


def test_device_frame_shows_sources() -> None:
    gpu = replace(HAND, kind="cuda", peak_flops_source="spec", bandwidth_source="nvml", measured_flops=None)
    rows = by_figure(gpu)
    assert rows["peak compute"]["value"] == "1.00 TFLOP/s" and rows["peak compute"]["source"] == "spec"
    assert rows["copy bandwidth (KV cache writes)"]["source"] == "nvml"
    assert rows["ridge point"]["value"] == "10.0 FLOP/byte"
    assert rows["achievable compute (matmul)"]["value"] == "n/a"
    # A device without a read-only figure (a trace from before it) says its reads use the copy figure.
    assert "taken before read-only bandwidth was measured" in rows[READ_ROW]["source"]
    measured = replace(
        HAND,
        matmul_n=2048,
        copy_bytes=512_000_000,
        flops_samples=(0.5e12, 1e12),
        bandwidth_samples=(5e10, 1e11),
        read_bandwidth_bytes_per_s=1.2e11,
        read_bandwidth_source="measured",
        measured_read_bandwidth_bytes_per_s=1.2e11,
        read_bandwidth_samples=(1.1e11, 1.2e11),
        read_bytes=512_000_000,
    )
    rows = by_figure(measured)
    assert rows["copy bandwidth (KV cache writes)"]["value"] == "100.0 GB/s (read + write)"
    assert rows[READ_ROW] == {"figure": READ_ROW, "value": "120.0 GB/s (read only)", "source": "measured"}
    assert rows["ridge point"]["value"] == "8.3 FLOP/byte"  # 1 TFLOP/s over the read figure
    copy = rows["achievable bandwidth (copy of 512.0 MB, read + write)"]
    assert "best of 2; spread 50.0 GB/s – 100.0 GB/s" in copy["source"]
    read = rows["achievable bandwidth (sum over 512.0 MB, read only)"]
    assert read["value"] == "120.0 GB/s" and "best of 2; spread 110.0 GB/s – 120.0 GB/s" in read["source"]
    assert "2048×2048 float32 matmul" in " ".join(rows)


def test_device_table_says_when_and_why_it_was_measured() -> None:
    def measured_at(device: DeviceProfile) -> dict[str, str]:
        frame = device_charts.device_frame(device)
        return frame[frame["figure"] == "measured at"].iloc[0].to_dict()

    quiet = measured_at(replace(HAND, measured_at="2025-01-01T00:00:00+00:00"))
    assert quiet["value"] == "2025-01-01T00:00:00+00:00" and "reused by later runs" in quiet["source"]
    busy = measured_at(replace(HAND, busy_note="Pass 3 ran in 1 ms, under the modelled floor."))
    assert "re-measured after this run" in busy["source"] and "before the run" not in busy["source"]


def test_a_result_names_the_figures_it_used_beside_the_live_ones() -> None:
    """Cost's live 7.1 FLOP/B beside Batching's recorded 5.7: a recorded result says whose figures its modelled
    numbers use, and the live run's beside them."""
    recorded = replace(
        HAND, peak_flops=5.7e11, measured_at="2025-01-01T00:00:00+00:00", read_bandwidth_bytes_per_s=1e11
    )
    live = replace(HAND, peak_flops=7.1e11, read_bandwidth_bytes_per_s=1e11)
    sentence = device_charts.figures_used_sentence(recorded, True, live)
    assert "the recording's, taken when it was made at 2025-01-01T00:00:00+00:00" in sentence
    assert "ridge 5.7 FLOP/B" in sentence and "This session's live run uses ridge 7.1 FLOP/B" in sentence
    assert "uses the same figures" in device_charts.figures_used_sentence(live, False, live)
    assert "No live run in this session yet" in device_charts.figures_used_sentence(recorded, True, None)
