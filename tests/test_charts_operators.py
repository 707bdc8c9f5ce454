"""The Cost page's operator tables add up to the pass's modelled totals (tiny Llama, sliding-window and MoE models), and
on a profiled pass every profiler group's measured time stands beside its operators' modelled floor."""

from __future__ import annotations

import json
import math

import pytest

from explorer.charts import operators as charts
from explorer.core import operators
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.profiler import MODELLED_KINDS, OP_GROUPS, PassProfile, profile_pass
from explorer.core.trace import DeviceProfile, Trace
from explorer.core.units import to_ms
from explorer.models.loading import load_model
from tests.tiny_zoo import BY_NAME, save_tiny

NAMES = ("llama", "gemma3-text", "mixtral")


@pytest.fixture(scope="module")
def device() -> DeviceProfile:
    return DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedModel]:
    root = tmp_path_factory.mktemp("charts-operators-zoo")
    return {n: load_model(str(save_tiny(BY_NAME[n], root / n)), device="cpu") for n in NAMES}


@pytest.fixture(scope="module")
def traces(zoo: dict[str, LoadedModel], device: DeviceProfile) -> dict[str, Trace]:
    request = Request("sliding windows!", max_new_tokens=3, use_chat_template=False)
    return {name: generate(lm, check_request(lm, request), device) for name, lm in zoo.items()}


@pytest.fixture(scope="module")
def profiled(zoo: dict[str, LoadedModel], traces: dict[str, Trace]) -> PassProfile:
    """Pass 2 (a decode) of the Llama run under the profiler, once for the module (profiles are frozen)."""
    return profile_pass(zoo["llama"], traces["llama"], 2)


@pytest.mark.parametrize("name", NAMES)
def test_the_kinds_table_sums_to_the_pass_s_totals(name: str, traces: dict[str, Trace]) -> None:
    trace = traces[name]
    for record in trace.passes:
        ops = operators.pass_operators(trace.model, trace.device, record)
        kinds = charts.kinds_frame(ops)
        cost = record.cost
        assert int(kinds[charts.FLOPS].sum()) == cost.flops
        assert int(kinds[charts.READ].sum()) == cost.weight_bytes_read + cost.kv_bytes_read
        assert int(kinds[charts.WRITTEN].sum()) == cost.kv_bytes_written
        for column, seconds in [
            (charts.COMPUTE_MS, cost.t_compute_s),
            (charts.WEIGHT_MS, cost.t_weight_read_s),
            (charts.KV_MS, cost.t_kv_s),
        ]:
            assert math.isclose(kinds[column].sum(), to_ms(seconds), rel_tol=1e-9)
        added, the_pass = charts.totals_frame(ops, cost).to_dict("records")
        assert added[charts.BOUND] == the_pass[charts.BOUND] == cost.bound
        assert [added[c] for c in charts.NUMBERS if c != charts.BOUND] == pytest.approx(
            [the_pass[c] for c in charts.NUMBERS if c != charts.BOUND], rel=1e-9
        )
        every = charts.operators_frame(ops)  # the download: every operator of every layer, the same sums
        assert int(every[charts.FLOPS].sum()) == cost.flops


def test_per_layer_rows_and_kinds(traces: dict[str, Trace]) -> None:
    trace = traces["mixtral"]
    ops = operators.pass_operators(trace.model, trace.device, trace.decodes[0])
    kinds = charts.kinds_frame(ops)
    assert operators.EXPERTS in kinds["operator kind"].tolist()
    assert operators.MLP not in kinds["operator kind"].tolist()  # Mixtral has no dense MLP
    layer = charts.layer_frame(ops, 1)
    assert {"Q projection", "QKᵀ", "softmax", "SV", "router"} <= set(layer["operator"])  # as a person reads them
    assert "q_proj" in set(charts.operators_frame(ops)["operator"])  # the download keeps the model's own names
    assert sum(layer[charts.FLOPS]) + sum(
        charts.layer_frame(ops, 0)[charts.FLOPS]
    ) + 2 * trace.model.lm_head_params == (trace.decodes[0].cost.flops)


def test_modelled_and_measured_side_by_side_on_a_profiled_pass(traces: dict[str, Trace], profiled: PassProfile) -> None:
    trace, profile = traces["llama"], profiled
    ops = operators.pass_operators(trace.model, trace.device, trace.passes[2])
    frame = charts.side_by_side_frame(ops, profile, MODELLED_KINDS)
    assert frame["group"].tolist() == list(OP_GROUPS)
    measured = dict(zip(frame["group"], frame["measured_ms"]))
    assert measured == pytest.approx({g.name: to_ms(g.self_s) for g in profile.groups})
    modelled = dict(zip(frame["group"], frame["modelled_ms"]))
    # every operator lands in exactly one group: the groups' floors are all the operators' floors
    assert sum(modelled.values()) == pytest.approx(to_ms(sum(op.cost.roofline_time_s for op in ops)), rel=1e-9)
    kinds = [k for group in MODELLED_KINDS.values() for k in group]
    assert sorted(kinds) == sorted(operators.KINDS)
    assert all(modelled[g] > 0 for g in MODELLED_KINDS)
    json.dumps(charts.side_by_side_chart(frame).to_dict())  # the chart serialises
    worst = frame.loc[frame["measured_over_modelled"].idxmax(), "group"]
    assert charts.furthest_sentence(frame).startswith(f"Furthest from its floor: **{worst}**")


def test_a_group_with_no_floor_has_no_ratio(traces: dict[str, Trace], profiled: PassProfile) -> None:
    trace = traces["llama"]
    ops = operators.pass_operators(trace.model, trace.device, trace.passes[2])
    frame = charts.side_by_side_frame(ops, profiled, {})
    assert frame["measured_over_modelled"].isna().all() and (frame["modelled_ms"] == 0).all()
    json.dumps(charts.side_by_side_chart(frame).to_dict())  # measured bars alone still draw
    assert charts.furthest_sentence(frame).startswith("No group")


def test_a_decode_pass_of_a_sliding_window_model_profiles(
    zoo: dict[str, LoadedModel], traces: dict[str, Trace]
) -> None:
    """Its sliding layers are past the window (16 prompt tokens, window 8): the replay rebuilds the cache, not crops."""
    trace = traces["gemma3-text"]
    profile = profile_pass(zoo["gemma3-text"], trace, 2)
    assert profile.replay_argmax_token_id == trace.passes[2].token_id
    frame = charts.side_by_side_frame(
        operators.pass_operators(trace.model, trace.device, trace.passes[2]), profile, MODELLED_KINDS
    )
    assert (frame["measured_ms"] > 0).any()
