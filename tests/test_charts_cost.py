"""The Cost page's frames checked exactly against a tiny model's real trace, utilisation against hand numbers."""

from __future__ import annotations

import json
from dataclasses import replace

import altair as alt
import pytest

from explorer.charts import cost
from explorer.core.engine import Request
from explorer.core.loading import LoadedModel
from explorer.core.measure import measure, recost
from explorer.core.roofline import attainable_flops, pass_bandwidth_bytes_per_s, pass_cost, prefill_ridge_tokens
from explorer.core.trace import DeviceProfile, PassRecord, Trace
from explorer.core.units import percent, to_ms

SEGMENTS = ["weight_read_ms", "kv_ms", "compute_not_hidden_ms", "overhead_ms"]


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("abc", max_new_tokens=8))


@pytest.fixture
def hand_device() -> DeviceProfile:
    return DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")


def with_walls(trace: Trace, walls_s: list[float]) -> Trace:
    """The same trace with chosen measured times, to reach branches a real run only reaches by chance."""
    return with_passes(trace, tuple(replace(p, wall_s=w) for p, w in zip(trace.passes, walls_s, strict=True)))


def with_passes(trace: Trace, passes: tuple[PassRecord, ...]) -> Trace:
    """One repeat with these passes."""
    return replace(trace, repeats=(passes,), shown_repeat=0)


def test_time_split_segments_are_the_modelled_times_and_the_overhead(trace: Trace) -> None:
    frame = cost.time_split_frame(trace)
    assert list(frame["pass"]) == [p.index for p in trace.passes]
    assert list(frame["phase"]) == ["prefill"] + ["decode"] * (trace.new_tokens - 1)
    for row, p in zip(frame.itertuples(index=False), trace.passes, strict=True):
        assert row.weight_read_ms == to_ms(p.cost.t_weight_read_s)
        assert row.kv_ms == to_ms(p.cost.t_kv_s)
        assert row.compute_not_hidden_ms == to_ms(max(0.0, p.cost.t_compute_s - p.cost.t_memory_s))
        assert row.overhead_ms == to_ms(p.overhead_s)
        assert row.wall_ms == to_ms(p.wall_s)
        assert row.roofline_ms == to_ms(p.cost.roofline_time_s)
        assert row.bound == p.cost.bound
        assert row.faster_than_model == (p.wall_s < p.cost.roofline_time_s)


def test_segments_sum_to_the_wall_time_when_the_pass_is_slower_than_the_model(trace: Trace) -> None:
    # Both cases by construction: compute hidden behind memory (decode), compute beyond it (a compute-heavy prefill).
    slow = with_walls(trace, [p.cost.roofline_time_s * 3 + 1e-3 for p in trace.passes])
    heavy_cost = replace(slow.prefill.cost, t_compute_s=slow.prefill.cost.t_memory_s * 5)
    slow = with_passes(slow, (replace(slow.prefill, cost=heavy_cost), *slow.decodes))
    frame = cost.time_split_frame(slow)
    assert frame.loc[0, "compute_not_hidden_ms"] > 0 and (frame.loc[1:, "compute_not_hidden_ms"] == 0).all()
    for row, p in zip(frame.itertuples(index=False), slow.passes, strict=True):
        assert sum(getattr(row, s) for s in SEGMENTS) == pytest.approx(to_ms(p.wall_s), rel=1e-12)
        assert not row.faster_than_model


def test_a_pass_faster_than_the_model_is_flagged_not_hidden(trace: Trace) -> None:
    fast = with_walls(trace, [p.cost.roofline_time_s / 2 for p in trace.passes])
    frame = cost.time_split_frame(fast)
    assert frame["faster_than_model"].all()
    assert (frame["overhead_ms"] == 0).all()
    # The bar shows the model's time, the tick the (shorter) measured one.
    modelled = frame[SEGMENTS].sum(axis=1)
    assert (frame["wall_ms"] < modelled).all()
    assert list(modelled) == pytest.approx(list(frame["roofline_ms"]), rel=1e-12)


def test_time_split_range(trace: Trace) -> None:
    assert list(cost.time_split_frame(trace, 2, 4)["pass"]) == [2, 3, 4]
    assert list(cost.time_split_frame(trace, 0, 0)["phase"]) == ["prefill"]


def test_predicted_frame_is_the_raw_model(trace: Trace) -> None:
    frame = cost.predicted_frame(trace)
    assert len(frame) == trace.new_tokens
    for row, p in zip(frame.to_dict("records"), trace.passes, strict=True):
        assert row["flops"] == p.cost.flops
        assert row["weight_bytes_read"] == p.cost.weight_bytes_read and row["kv_bytes_read"] == p.cost.kv_bytes_read
        assert row["t_compute_ms"] == to_ms(p.cost.t_compute_s)
        assert row["t_weight_read_ms"] == to_ms(p.cost.t_weight_read_s)
        assert row["t_kv_ms"] == to_ms(p.cost.t_kv_s) and row["roofline_ms"] == to_ms(p.cost.roofline_time_s)
        assert row["overhead_ms"] == to_ms(p.overhead_s) and row["wall_ms"] == to_ms(p.wall_s)
        assert row["wall_over_roofline"] == p.wall_s / p.cost.roofline_time_s


def test_roofline_points_roof_and_ridge(trace: Trace) -> None:
    frame = cost.roofline_frame(trace)
    device = trace.device
    points = frame[frame["kind"] == "pass"]
    assert list(points["pass"]) == [p.index for p in trace.passes]
    assert list(points["intensity_flops_per_byte"]) == [p.cost.arithmetic_intensity for p in trace.passes]
    assert list(points["flops_per_s"]) == [p.achieved_flops_per_s for p in trace.passes]
    # Prefill computes many tokens per weight read: it sits right of every decode.
    assert points.iloc[0]["intensity_flops_per_byte"] > points.iloc[1:]["intensity_flops_per_byte"].max()

    roof = frame[frame["kind"] == "roof"]
    assert list(roof["flops_per_s"]) == [attainable_flops(x, device) for x in roof["intensity_flops_per_byte"]]
    assert roof["intensity_flops_per_byte"].is_monotonic_increasing
    assert device.ridge_point_flops_per_byte in set(roof["intensity_flops_per_byte"])  # the corner is drawn exactly
    assert roof["intensity_flops_per_byte"].min() < points["intensity_flops_per_byte"].min()
    assert roof["intensity_flops_per_byte"].max() > points["intensity_flops_per_byte"].max()

    ridge = frame[frame["kind"] == "ridge"]
    assert list(ridge["intensity_flops_per_byte"]) == [device.ridge_point_flops_per_byte]
    assert list(ridge["flops_per_s"]) == [device.peak_flops]


def test_median_decode_index(trace: Trace) -> None:
    walls = [0.5, 0.04, 0.01, 0.03, 0.07, 0.02, 0.06, 0.05]  # decodes sorted: 0.01 0.02 0.03 0.04 0.05 0.06 0.07
    assert cost.median_decode_index(with_walls(trace, walls)) == 1  # 0.04 s is pass 1
    even = with_passes(trace, with_walls(trace, walls).passes[:5])  # decodes 0.04 0.01 0.03 0.07: lower middle 0.03
    assert cost.median_decode_index(even) == 3
    assert cost.median_decode_index(with_passes(trace, trace.passes[:1])) is None


def test_utilisation_by_hand(trace: Trace, hand_device: DeviceProfile) -> None:
    # Power-of-two times keep every quotient exact: 2e9 FLOPs in 0.5 s is 4e9 FLOP/s, 0.4 % of 1e12.
    prefill_cost = replace(
        trace.prefill.cost,
        flops=2_000_000_000,
        weight_bytes_read=400_000_000,
        kv_bytes_read=60_000_000,
        kv_bytes_written=40_000_000,
    )
    prefill = replace(trace.prefill, tokens_in=20, cost=prefill_cost, wall_s=0.5)
    decode_cost = replace(
        trace.decodes[0].cost,
        flops=250_000_000,
        weight_bytes_read=499_000_000,
        kv_bytes_read=600_000,
        kv_bytes_written=400_000,
    )
    decode = replace(trace.decodes[0], cost=decode_cost, wall_s=0.25)
    frame = cost.utilisation_frame([prefill, decode], hand_device)
    assert list(frame["label"]) == ["prefill (pass 0)", "decode (pass 1)"]
    assert list(frame["achieved_flops_per_s"]) == [4e9, 1e9]
    assert list(frame["compute_utilisation"]) == [0.004, 0.001]
    assert list(frame["achieved_bandwidth_bytes_per_s"]) == [1e9, 2e9]
    assert list(frame["bandwidth_utilisation"]) == pytest.approx([0.01, 0.02])  # one figure for reads and writes
    # Reads at 200 GB/s, writes at 100 GB/s: the prefill's 460 MB read and 40 MB written take 2.7 ms, 500 MB / 2.7 ms.
    split = cost.utilisation_frame([prefill, decode], replace(hand_device, read_bandwidth_bytes_per_s=2e11))
    assert split["device_bandwidth_bytes_per_s"][0] == pytest.approx(500e6 / 2.7e-3)
    assert split["bandwidth_utilisation"][0] == pytest.approx(1e9 / (500e6 / 2.7e-3))  # 0.54 %
    assert list(frame["tokens_per_s"]) == [40.0, 4.0]
    assert percent(0.0246) == "2.46 %" and percent(0.5) == "50 %"


def test_utilisation_matches_the_trace(trace: Trace) -> None:
    frame = cost.utilisation_frame(trace.passes, trace.device)
    for row, p in zip(frame.to_dict("records"), trace.passes, strict=True):
        assert row["compute_utilisation"] == min(1.0, p.achieved_flops_per_s / trace.device.peak_flops)
        bandwidth = p.achieved_bandwidth_bytes_per_s / pass_bandwidth_bytes_per_s(p.cost, trace.device)
        assert row["bandwidth_utilisation"] == min(1.0, bandwidth)
        assert row["bandwidth_utilisation"] == pytest.approx(min(1.0, p.cost.t_memory_s / p.wall_s))
        assert row["bytes_moved"] == p.cost.weight_bytes_read + p.cost.kv_bytes_read + p.cost.kv_bytes_written


def test_utilisation_never_shows_more_than_the_device(trace: Trace, hand_device: DeviceProfile) -> None:
    # A pass within noise under its floor (the run re-measures only beyond 10 %) is at the roof: 100 %, flagged.
    at_roof = replace(trace.decodes[0], wall_s=trace.decodes[0].cost.roofline_time_s * 0.95)
    frame = cost.utilisation_frame([at_roof], trace.device)
    assert frame["bandwidth_utilisation"].max() <= 1.0 and frame["compute_utilisation"].max() <= 1.0
    assert frame["at_the_roof"].all()


READ_ROW = "read bandwidth (weights, KV cache reads)"


def test_device_frame_shows_sources(hand_device: DeviceProfile) -> None:
    gpu = replace(hand_device, kind="cuda", peak_flops_source="spec", bandwidth_source="nvml", measured_flops=None)
    rows = dict(zip(cost.device_frame(gpu)["figure"], cost.device_frame(gpu).to_dict("records"), strict=True))
    assert rows["peak compute"]["value"] == "1.00 TFLOP/s" and rows["peak compute"]["source"] == "spec"
    assert rows["copy bandwidth (KV cache writes)"]["source"] == "nvml"
    assert rows["ridge point"]["value"] == "10.0 FLOP/byte"
    assert rows["achievable compute (matmul)"]["value"] == "n/a"
    # A device without a read-only figure (a trace from before it) says its reads use the copy figure.
    assert "taken before read-only bandwidth was measured" in rows[READ_ROW]["source"]
    measured = replace(
        hand_device,
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
    rows = dict(zip(cost.device_frame(measured)["figure"], cost.device_frame(measured).to_dict("records"), strict=True))
    assert rows["copy bandwidth (KV cache writes)"]["value"] == "100.0 GB/s (read + write)"
    assert rows[READ_ROW] == {"figure": READ_ROW, "value": "120.0 GB/s (read only)", "source": "measured"}
    assert rows["ridge point"]["value"] == "8.3 FLOP/byte"  # 1 TFLOP/s over the read figure
    copy = rows["achievable bandwidth (copy of 512.0 MB, read + write)"]
    assert "best of 2; spread 50.0 GB/s – 100.0 GB/s" in copy["source"]
    read = rows["achievable bandwidth (sum over 512.0 MB, read only)"]
    assert read["value"] == "120.0 GB/s" and "best of 2; spread 110.0 GB/s – 120.0 GB/s" in read["source"]
    assert "2048×2048 float32 matmul" in " ".join(rows)


def test_charts_serialise(trace: Trace) -> None:
    split = cost.time_split_frame(trace)
    roofline = cost.roofline_frame(trace)
    utilisation = cost.utilisation_frame([trace.prefill, trace.decodes[0]], trace.device)
    charts = [cost.time_split_chart(split), cost.roofline_chart(roofline), cost.utilisation_chart(utilisation)]
    for chart in charts:
        assert isinstance(chart, alt.TopLevelMixin)
        spec = chart.to_dict()
        assert json.dumps(spec)  # what Streamlit ships to the browser
    assert "log" in json.dumps(charts[1].to_dict())


def test_bound_sentences_follow_the_intensity_not_the_phase(trace: Trace, hand_device: DeviceProfile) -> None:
    p = trace.prefill
    ridge = p.cost.arithmetic_intensity  # put the ridge exactly on the pass, then either side of it
    for peak, expected in [(ridge * 1e11 * 2, "left of the ridge: memory-bound"), (ridge * 1e11 / 2, "right")]:
        device = replace(hand_device, peak_flops=peak, bandwidth_bytes_per_s=1e11)
        recosted = replace(p, cost=pass_cost(trace.model, device, p.tokens_in, 0))
        assert expected in cost.bound_sentence(recosted, device)
        assert f"{recosted.cost.bound}-bound" in cost.bound_sentence(recosted, device)


def test_prefill_ridge_sentence_and_kv_formula(trace: Trace) -> None:
    text = cost.prefill_ridge_sentence(trace)
    tokens = prefill_ridge_tokens(trace.model, trace.device)
    assert tokens is None or f"compute-bound from {tokens:,} prompt tokens" in text
    assert f"This prompt has {trace.prompt_len} tokens" in text
    last = trace.decodes[-1]
    formula = cost.kv_traffic_formula(trace, last)
    assert (
        f"(old {last.cache_len_before} + new 1) positions" in formula
        and f"+ {last.cache_len_after} by attention" in formula
    )


def test_the_compute_bound_length_and_the_prefill_bound_never_disagree(
    trace: Trace, hand_device: DeviceProfile
) -> None:
    prompt_len = trace.prompt_len

    def flipping_at(tokens: int) -> DeviceProfile:
        """A peak that puts a prefill of `tokens` a hair right of the ridge (and one token less left of it)."""
        c = pass_cost(trace.model, hand_device, tokens, 0)
        return replace(hand_device, peak_flops=c.flops / c.t_memory_s * (1 - 1e-9))

    for ridge_tokens, bound in [(prompt_len, "compute"), (prompt_len + 1, "memory")]:
        device = flipping_at(ridge_tokens)
        recosted = recost(trace, device)
        assert prefill_ridge_tokens(trace.model, device) == ridge_tokens
        assert recosted.prefill.cost.bound == bound
        assert f"{bound}-bound by the model" in cost.bound_sentence(recosted.prefill, device)
        assert ("at or above that" in cost.prefill_ridge_sentence(recosted)) == (bound == "compute")


def test_device_table_says_when_and_why_it_was_measured(hand_device: DeviceProfile) -> None:
    def measured_at(device: DeviceProfile) -> dict[str, str]:
        frame = cost.device_frame(device)
        return frame[frame["figure"] == "measured at"].iloc[0].to_dict()

    quiet = measured_at(replace(hand_device, measured_at="2025-01-01T00:00:00+00:00"))
    assert quiet["value"] == "2025-01-01T00:00:00+00:00" and "reused by later runs" in quiet["source"]
    busy = measured_at(replace(hand_device, busy_note="Pass 3 ran in 1 ms, under the modelled floor."))
    assert "re-measured after this run" in busy["source"] and "before the run" not in busy["source"]
