"""The profile builders checked exactly against a hand-made profile (power-of-two times keep every sum exact)."""

from __future__ import annotations

import json

import altair as alt
import pandas as pd
import pytest

from explorer.charts import cost
from explorer.charts import profile as charts
from explorer.charts.cost import SEGMENT_COLUMNS, SEGMENT_LABELS
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.profiler import CPU_REMAINDER, KV_UPDATE, LINEAR, OP_GROUPS, OpTime, PassProfile, ProfileGroup
from explorer.core.trace import DeviceProfile
from explorer.core.units import to_ms

# Seconds per op group, in OP_GROUPS order: linear, attention, KV update, norms/activations, embedding/LM head, other.
GROUP_S = [0.25, 0.125, 0.0625, 0.03125, 0.0, 0.015625]
REMAINDER_S = 0.515625  # the wall is 1.0 s


@pytest.fixture
def profile() -> PassProfile:
    ops = {
        LINEAR: (
            OpTime("aten::mm", 210, 0.1875),
            OpTime("aten::linear", 210, 0.046875),
            OpTime("aten::t", 210, 0.015625),
        ),
        KV_UPDATE: (OpTime("aten::cat", 60, 0.0625),),
    }
    groups = tuple(
        ProfileGroup(name, s, ops.get(name, (OpTime("aten::add", 2, s),) if s else ()))
        for name, s in zip(OP_GROUPS, GROUP_S, strict=True)
    )
    return PassProfile(
        model_name="hand",
        pass_index=3,
        phase="decode",
        tokens_in=1,
        cache_len_before=37,
        device_kind="cpu",
        time_kind="CPU self time",
        wall_s_profiled=1.0,
        wall_s_unprofiled=0.75,
        wall_s_unprofiled_samples=(0.75, 1.0, 0.5),
        wall_s_run=0.5,
        groups=groups,
        remainder_name=CPU_REMAINDER,
        remainder_s=REMAINDER_S,
        replay_argmax_token_id=7,
    )


@pytest.fixture
def roofline() -> charts.RooflineParts:
    return charts.RooflineParts(
        weight_read_s=0.125, kv_s=0.0078125, compute_not_hidden_s=0.0, overhead_s=0.3671875, wall_s=0.5
    )


def test_roofline_parts_come_from_the_time_split_row_of_the_pass() -> None:
    segments_ms = [[1.0, 125.0], [1.0, 7.8125], [1.0, 0.0], [1.0, 367.1875]]
    split = pd.DataFrame(
        {"pass": [2, 3], **dict(zip(SEGMENT_COLUMNS, segments_ms, strict=True)), "wall_ms": [4.0, 500.0]}
    )
    parts = charts.roofline_parts(split, 3)
    assert parts == charts.RooflineParts(0.125, 0.0078125, 0.0, 0.3671875, 0.5)


def test_profile_frame_is_the_groups_then_the_remainder(profile: PassProfile) -> None:
    frame = charts.profile_frame(profile)
    assert list(frame["part"]) == [*OP_GROUPS, CPU_REMAINDER]
    assert list(frame["part_order"]) == list(range(7))
    assert list(frame["ms"]) == [s * 1e3 for s in GROUP_S] + [515.625]
    assert list(frame["share_of_profiled_wall"]) == [*GROUP_S, REMAINDER_S]
    assert frame["ms"].sum() == 1000.0  # the parts make the profiled wall
    assert list(frame["calls"]) == [630, 2, 60, 2, 0, 2, 0]
    assert frame.loc[0, "top_ops"] == "aten::mm 187.500 ms, aten::linear 46.875 ms, aten::t 15.625 ms"
    assert frame.loc[4, "top_ops"] == "" and frame.loc[6, "top_ops"] == ""
    assert (frame["wall_profiled_ms"] == 1000.0).all() and (frame["wall_unprofiled_ms"] == 750.0).all()
    assert (frame["pass"] == 3).all() and (frame["phase"] == "decode").all()


def test_ops_frame_lists_every_op_largest_first(profile: PassProfile) -> None:
    frame = charts.ops_frame(profile)
    assert list(frame["op"])[:3] == ["aten::mm", "aten::add", "aten::cat"]
    assert list(frame["self_ms"])[:3] == [187.5, 125.0, 62.5]
    assert len(frame) == 3 + 1 + 3  # linear's three, KV's one, three groups of one add; the empty group has none
    assert frame.loc[0, "group"] == LINEAR and frame.loc[0, "calls"] == 210
    assert frame["self_ms"].sum() == sum(GROUP_S) * 1e3
    assert frame["self_ms"].is_monotonic_decreasing


def test_bars_are_the_roofline_parts_then_the_profile_parts(
    profile: PassProfile, roofline: charts.RooflineParts
) -> None:
    bars = charts.bars_frame(charts.profile_frame(profile), roofline)
    roof = bars[bars["bar"] == charts.ROOFLINE_BAR]
    assert list(roof["part"]) == SEGMENT_LABELS
    assert list(roof["ms"]) == [125.0, 7.8125, 0.0, 367.1875]
    assert roof["ms"].sum() == 500.0  # the run's wall, as the time split stacks it
    profiled = bars[bars["bar"] == charts.PROFILE_BAR]
    assert list(profiled["part"]) == [*OP_GROUPS, CPU_REMAINDER]
    assert list(bars["part_order"]) == list(range(11))  # one stacking order across both bars
    assert profiled["ms"].sum() == 1000.0


def test_walls_are_ticks_on_their_bars(profile: PassProfile, roofline: charts.RooflineParts) -> None:
    walls = charts.walls_frame(charts.profile_frame(profile), roofline)
    assert walls.to_dict("records") == [
        {"bar": charts.PROFILE_BAR, "wall": charts.PROFILED_WALL, "ms": 1000.0},
        {"bar": charts.PROFILE_BAR, "wall": charts.UNPROFILED_WALL, "ms": 750.0},
        {"bar": charts.ROOFLINE_BAR, "wall": charts.RUN_WALL, "ms": 500.0},
    ]


def test_chart_serialises_with_one_colour_per_part(profile: PassProfile, roofline: charts.RooflineParts) -> None:
    chart = charts.profile_chart(charts.profile_frame(profile), roofline)
    assert isinstance(chart, alt.TopLevelMixin)
    spec = chart.to_dict()
    assert json.dumps(spec)  # what Streamlit ships to the browser
    scale = spec["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == [*SEGMENT_LABELS, *OP_GROUPS, CPU_REMAINDER]
    assert len(scale["range"]) == len(scale["domain"]) == len(set(scale["range"]))
    assert spec["layer"][1]["encoding"]["color"]["scale"]["domain"] == charts.WALL_DOMAIN


def test_roofline_parts_match_the_time_split_of_a_real_trace(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    trace = generate(tiny_lm, check_request(tiny_lm, Request("abc", max_new_tokens=4, repeats=3)), cpu_figures)
    split = cost.time_split_frame(trace)
    for k in range(trace.new_tokens):
        parts = charts.roofline_parts(split, k)
        row = split.loc[k]
        assert [to_ms(parts.weight_read_s), to_ms(parts.kv_s)] == pytest.approx(
            [row["weight_read_ms"], row["kv_ms"]], rel=1e-12
        )
        assert to_ms(parts.overhead_s) == pytest.approx(row["overhead_ms"], rel=1e-12)
        assert to_ms(parts.wall_s) == pytest.approx(to_ms(trace.pass_wall_spread(k).median), rel=1e-12)
