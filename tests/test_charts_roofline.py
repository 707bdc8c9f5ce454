"""The Cost page's roofline (explorer.charts.roofline): each pass under the roof, utilisation against hand numbers,
and the bound sentences computed from the same cost model as each pass's bound."""

from __future__ import annotations

import json
from dataclasses import replace

import altair as alt
import pytest

from explorer.charts import roofline
from explorer.core.figure_correction import recost
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import attainable_flops, pass_cost, prefill_ridge_tokens, utilisation
from explorer.core.trace import DeviceProfile, Trace
from explorer.core.units import percent
from tests.cost_support import HAND, tiny_run


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return tiny_run(tiny_lm)


def test_roofline_points_roof_and_ridge(trace: Trace) -> None:
    frame = roofline.roofline_frame(trace)
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


def test_utilisation_by_hand(trace: Trace) -> None:
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
    frame = roofline.utilisation_frame([prefill, decode], HAND)
    assert list(frame["label"]) == ["prefill (pass 0)", "decode (pass 1)"]
    assert list(frame["achieved_flops_per_s"]) == [4e9, 1e9]
    assert list(frame["compute_utilisation"]) == [0.004, 0.001]
    assert list(frame["achieved_bandwidth_bytes_per_s"]) == [1e9, 2e9]
    assert list(frame["bandwidth_utilisation"]) == pytest.approx([0.01, 0.02])  # one figure for reads and writes
    # Reads at 200 GB/s, writes at 100 GB/s: the prefill's 460 MB read and 40 MB written take 2.7 ms, 500 MB / 2.7 ms.
    split = roofline.utilisation_frame([prefill, decode], replace(HAND, read_bandwidth_bytes_per_s=2e11))
    assert split["device_bandwidth_bytes_per_s"][0] == pytest.approx(500e6 / 2.7e-3)
    assert split["bandwidth_utilisation"][0] == pytest.approx(1e9 / (500e6 / 2.7e-3))  # 0.54 %
    assert list(frame["tokens_per_s"]) == [40.0, 4.0]
    assert percent(0.0246) == "2.46 %" and percent(0.5) == "50 %"


def test_utilisation_matches_the_trace(trace: Trace) -> None:
    frame = roofline.utilisation_frame(trace.passes, trace.device)
    for row, p in zip(frame.to_dict("records"), trace.passes, strict=True):
        assert row["compute_utilisation"] == min(1.0, p.achieved_flops_per_s / trace.device.peak_flops)
        bandwidth = (
            p.achieved_bandwidth_bytes_per_s / utilisation(p.cost, p.wall_s, trace.device).device_bandwidth_bytes_per_s
        )
        assert row["bandwidth_utilisation"] == min(1.0, bandwidth)
        assert row["bandwidth_utilisation"] == pytest.approx(min(1.0, p.cost.t_memory_s / p.wall_s))
        assert row["bytes_moved"] == p.cost.weight_bytes_read + p.cost.kv_bytes_read + p.cost.kv_bytes_written


def test_utilisation_never_shows_more_than_the_device(trace: Trace) -> None:
    # A pass within noise under its floor (the run re-measures only beyond 10 %) is at the roof: 100 %, flagged.
    at_roof = replace(trace.decodes[0], wall_s=trace.decodes[0].cost.roofline_time_s * 0.95)
    frame = roofline.utilisation_frame([at_roof], trace.device)
    assert frame["bandwidth_utilisation"].max() <= 1.0 and frame["compute_utilisation"].max() <= 1.0
    assert frame["at_the_roof"].all()


def test_bound_sentences_follow_the_intensity_not_the_phase(trace: Trace) -> None:
    p = trace.prefill
    ridge = p.cost.arithmetic_intensity  # put the ridge exactly on the pass, then either side of it
    for peak, expected in [(ridge * 1e11 * 2, "left of the ridge: memory-bound"), (ridge * 1e11 / 2, "right")]:
        device = replace(HAND, peak_flops=peak, bandwidth_bytes_per_s=1e11)
        recosted = replace(p, cost=pass_cost(trace.model, device, p.tokens_in, 0))
        assert expected in roofline.bound_sentence(recosted, device)
        assert f"{recosted.cost.bound}-bound" in roofline.bound_sentence(recosted, device)


def test_the_compute_bound_length_and_the_prefill_bound_never_disagree(trace: Trace) -> None:
    prompt_len = trace.prompt_len

    def flipping_at(tokens: int) -> DeviceProfile:
        """A peak that puts a prefill of `tokens` a hair right of the ridge (and one token less left of it)."""
        c = pass_cost(trace.model, HAND, tokens, 0)
        return replace(HAND, peak_flops=c.flops / c.t_memory_s * (1 - 1e-9))

    for ridge_tokens, bound in [(prompt_len, "compute"), (prompt_len + 1, "memory")]:
        device = flipping_at(ridge_tokens)
        recosted = recost(trace, device)
        assert prefill_ridge_tokens(trace.model, device) == ridge_tokens
        assert recosted.prefill.cost.bound == bound
        assert f"{bound}-bound by the model" in roofline.bound_sentence(recosted.prefill, device)
        assert ("at or above that" in roofline.prefill_ridge_sentence(recosted)) == (bound == "compute")


def test_roofline_and_utilisation_charts_serialise(trace: Trace) -> None:
    charts = [
        roofline.roofline_chart(roofline.roofline_frame(trace)),
        roofline.utilisation_chart(roofline.utilisation_frame([trace.prefill, trace.decodes[0]], trace.device)),
    ]
    for chart in charts:
        assert isinstance(chart, alt.TopLevelMixin) and json.dumps(chart.to_dict())  # what Streamlit ships
    assert "log" in json.dumps(charts[0].to_dict())
