"""The per-operator cost model is a split of the pass's cost, never a second model: on a tiny Llama, a tiny
sliding-window model and a tiny MoE, every pass's operators add up to its Cost (integers exactly, times to 1e-9), for
every cache layout."""

from __future__ import annotations

import math

import pytest

from explorer.core import operators
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import CACHE_LAYOUTS, Cost, pass_cost
from explorer.core.trace import DeviceProfile, Trace
from explorer.models.loading import load_model
from tests.tiny_zoo import BY_NAME, save_tiny

NAMES = ("llama", "mistral-sliding", "gemma3-text", "mixtral", "qwen3-moe")
PROMPT = "sliding windows!"  # 16 byte tokens: past the tiny window of 8


@pytest.fixture(scope="module")
def device() -> DeviceProfile:
    """Hand figures with a read-only bandwidth apart from the copy one, so reads and writes are told apart."""
    return DeviceProfile(
        "hand", "cpu", "float32", 1e12, "measured", 1e11, "measured", read_bandwidth_bytes_per_s=2e11,
        read_bandwidth_source="measured",
    )  # fmt: skip


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedModel]:
    root = tmp_path_factory.mktemp("operators-zoo")
    return {n: load_model(str(save_tiny(BY_NAME[n], root / n)), device="cpu") for n in NAMES}


@pytest.fixture(scope="module")
def traces(zoo: dict[str, LoadedModel], device: DeviceProfile) -> dict[str, Trace]:
    request = Request(PROMPT, max_new_tokens=4, use_chat_template=False)
    return {name: generate(lm, check_request(lm, request), device) for name, lm in zoo.items()}


def assert_same_cost(ops: list[operators.Operator], cost: Cost) -> None:
    total = operators.summed(ops)
    for field in ("flops", "weight_bytes_read", "kv_bytes_read", "kv_bytes_written", "attention_flops"):
        assert getattr(total, field) == getattr(cost, field), field
    for field in ("t_weight_read_s", "t_kv_s", "t_compute_s"):
        assert math.isclose(getattr(total, field), getattr(cost, field), rel_tol=1e-9, abs_tol=1e-18), field


@pytest.mark.parametrize("name", NAMES)
def test_every_pass_s_operators_sum_to_its_cost(name: str, traces: dict[str, Trace], device: DeviceProfile) -> None:
    trace = traces[name]
    for record in trace.passes:
        ops = operators.pass_operators(trace.model, device, record)
        assert_same_cost(ops, record.cost)
        assert all(op.cost.weight_bytes_read >= 0 and op.cost.flops >= 0 for op in ops)
        assert {op.layer for op in ops if op.layer is not None} == set(range(trace.model.layers))


@pytest.mark.parametrize("layout", CACHE_LAYOUTS)
def test_a_batched_pass_and_a_long_cache_split_too(
    layout: str, traces: dict[str, Trace], device: DeviceProfile
) -> None:
    cache = {"cache_layout": layout, "cache_capacity": 160}
    for trace in traces.values():
        for tokens_in, before, batch in [(1, 100, 4), (40, 0, 2), (7, 9, 1)]:
            ops = operators.operator_costs(trace.model, device, (tokens_in, before, batch), **cache)
            cost = pass_cost(trace.model, device, tokens_in, before, batch, **cache)
            assert_same_cost(ops, cost)
            assert cost.cache_layout == layout and operators.summed(ops).cache_layout == layout
            update = [op for op in ops if op.kind == operators.KV_UPDATE]
            assert update and all(op.name == operators.UPDATE_NAMES[layout] for op in update)


def test_the_cache_update_row_changes_with_the_layout(traces: dict[str, Trace], device: DeviceProfile) -> None:
    """Layer 0 of the tiny Llama, one token onto 100 cached: DynamicCache re-reads and re-writes all 101 positions; a
    read-once cache writes the new one; a static cache of 160 writes it in place and attention reads all 160."""
    model = traces["llama"].model
    per_position = model.kv_bytes_per_token_per_layer

    def layer0(layout: str) -> dict[str, Cost]:
        ops = operators.operator_costs(model, device, (1, 100, 1), cache_layout=layout, cache_capacity=160)
        return {op.kind: op.cost for op in ops if op.layer == 0}

    concatenating, read_once, static = layer0("concatenating"), layer0("read_once"), layer0("static")
    update = operators.KV_UPDATE
    assert (concatenating[update].kv_bytes_read, concatenating[update].kv_bytes_written) == (101 * per_position,) * 2
    assert (read_once[update].kv_bytes_read, read_once[update].kv_bytes_written) == (0, per_position)
    assert (static[update].kv_bytes_read, static[update].kv_bytes_written) == (0, per_position)
    attention_read = [
        cost[operators.SCORES].kv_bytes_read + cost[operators.VALUES].kv_bytes_read
        for cost in (concatenating, read_once, static)
    ]
    assert attention_read == [101 * per_position, 101 * per_position, 160 * per_position]
    assert concatenating[operators.SCORES].flops == static[operators.SCORES].flops  # useful pairs, whatever is read


def test_a_sliding_layer_reads_no_more_than_its_window(traces: dict[str, Trace], device: DeviceProfile) -> None:
    model = traces["gemma3-text"].model  # layers 0 and 1 slide (window 8), layer 2 is full
    ops = operators.operator_costs(model, device, (1, 100, 1))
    qk = {op.layer: op for op in ops if op.kind == operators.SCORES}
    per_position_k = model.kv_bytes_per_token_per_layer // 2
    assert qk[0].cost.kv_bytes_read == 8 * per_position_k  # window - 1 kept + the new one
    assert qk[2].cost.kv_bytes_read == 101 * per_position_k


def test_moe_experts_follow_the_router_record(traces: dict[str, Trace], device: DeviceProfile) -> None:
    trace = traces["mixtral"]
    e = trace.model.experts
    decode = trace.decodes[-1]
    experts = [op for op in operators.pass_operators(trace.model, device, decode) if op.kind == operators.EXPERTS]
    assert [op.cost.weight_bytes_read for op in experts] == [n * e.expert_bytes for n in decode.experts_touched]
    assert experts and all(op.cost.flops == 2 * e.experts_per_token * e.expert_params for op in experts)
    routers = [op for op in operators.pass_operators(trace.model, device, decode) if op.kind == operators.ROUTER]
    router_bytes = trace.model.hidden_size * e.n_experts * trace.model.bytes_per_element
    assert [op.cost.weight_bytes_read for op in routers] == [router_bytes] * trace.model.layers


def test_dense_projections_are_the_shapes(traces: dict[str, Trace], device: DeviceProfile) -> None:
    model = traces["llama"].model  # hidden 32, 4 heads, 2 KV heads of 8
    ops = [op for op in operators.operator_costs(model, device, (3, 0, 1)) if op.layer == 0]
    by_name = {op.name: op for op in ops}
    assert by_name["q_proj"].cost.flops == 2 * 32 * 32 * 3 and by_name["k_proj"].cost.flops == 2 * 32 * 16 * 3
    assert by_name["gate, up, down"].cost.weight_bytes_read == 3 * 32 * 64 * model.bytes_per_element  # width 64
    assert by_name["softmax"].cost.bound == "none"
    # QKᵀ over the useful causal pairs of 3 new tokens: 1 + 2 + 3 = 6, x 2 x 4 heads x head_dim 8
    assert by_name["QKᵀ"].cost.flops == by_name["QKᵀ"].cost.attention_flops == 2 * 4 * 6 * 8
    assert {op.kind for op in ops} >= {operators.PROJECTIONS, operators.SCORES, operators.VALUES, operators.MLP}


def test_an_unfamiliar_attention_shape_keeps_the_totals(traces: dict[str, Trace], device: DeviceProfile) -> None:
    from dataclasses import replace

    model = replace(traces["llama"].model, heads=64)  # projections larger than every linear weight: unsplit rows
    ops = operators.operator_costs(model, device, (5, 3, 1))
    assert_same_cost(ops, pass_cost(model, device, 5, 3))
    assert not any(op.kind == operators.PROJECTIONS for op in ops)


def test_kinds_are_known() -> None:
    assert len(set(operators.KINDS)) == len(operators.KINDS)
