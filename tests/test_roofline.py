"""Roofline arithmetic checked against hand-computed numbers for SmolLM2-135M."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import (
    CACHE_LAYOUTS,
    RIDGE_BATCH_LIMIT,
    Cost,
    attainable_flops,
    attention_flops,
    causal_keys,
    first_where,
    kv_cache_bytes,
    kv_reaches_weights_context,
    kv_traffic_bytes,
    layer_kv_positions,
    memory_time_s,
    pass_cost,
    pass_flops,
    positions_held,
    prefill_ridge_tokens,
    ridge_batch,
    roofline_time,
    total,
    utilisation,
    weight_bytes_read,
)
from explorer.core.trace import DeviceProfile, ModelInfo

# SmolLM2-135M: hidden 576, MLP 1536, 30 layers, 9 query heads and 3 KV heads of 64, vocab 49152, tied embeddings.
PER_LAYER_MATMUL = 576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3  # q, o; k, v; gate, up, down = 3,538,944
LM_HEAD = 49152 * 576  # 28,311,552
NORMS = 30 * 2 * 576 + 576


@pytest.fixture
def device() -> DeviceProfile:
    return DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")


def test_counts_from_the_loaded_model(real_lm: LoadedModel) -> None:
    info = real_lm.info
    assert info.matmul_params == 30 * PER_LAYER_MATMUL == 106_168_320
    assert info.lm_head_params == LM_HEAD and info.tied_embeddings
    assert info.params == 30 * PER_LAYER_MATMUL + LM_HEAD + NORMS == 134_515_008
    assert info.weight_bytes == info.params * 4


def test_flops_by_hand(real_lm: LoadedModel) -> None:
    info = real_lm.info
    # decode at cache length 100: 2 x matmul params + 2 x LM head + 4 x layers x heads x head_dim x 100
    assert pass_flops(info, 1, 100) == 2 * 106_168_320 + 2 * LM_HEAD + 4 * 30 * 9 * 64 * 100 == 275_871_744
    # prefill of 10 tokens: matmuls scale with tokens, the LM head runs once, attention over the useful causal pairs
    # (query i sees i keys: 1 + 2 + ... + 10 = 55), not the 10 x 10 block a kernel computing the masked half does
    assert pass_flops(info, 10, 10) == 20 * 106_168_320 + 2 * LM_HEAD + 4 * 30 * 9 * 64 * 55


def test_bytes_and_times_by_hand(real_lm: LoadedModel, device: DeviceProfile) -> None:
    info = real_lm.info
    assert kv_cache_bytes(info, 1000) == 46_080_000
    assert kv_cache_bytes(info, 8192, batch=32) == 46_080 * 8192 * 32
    assert weight_bytes_read(info, 1) == info.weight_bytes  # tied: the LM head reads the whole table anyway
    cost = pass_cost(info, device, tokens_in=1, cache_len_before=99)
    # DynamicCache concatenates: the update reads 99 old + 1 new positions and writes all 100; attention reads 100
    assert cost.kv_bytes_read == 2 * 4_608_000 and cost.kv_bytes_written == 4_608_000
    assert cost.t_kv_s == pytest.approx(3 * 4_608_000 / 1e11)
    assert cost.t_weight_read_s == pytest.approx(info.weight_bytes / 1e11)
    assert cost.t_compute_s == pytest.approx(275_871_744 / 1e12)


def test_tied_embeddings_are_read_whole(tiny_gpt2: LoadedModel) -> None:
    info = tiny_gpt2.info
    assert info.tied_embeddings  # GPT-2 ties its LM head to the token embeddings: the LM head reads the whole table
    assert weight_bytes_read(info, 3) == info.weight_bytes


def test_untied_embeddings_are_gathered_not_read(tiny_lm: LoadedModel) -> None:
    info = replace(tiny_lm.info, tied_embeddings=False)
    # 4 bytes per float32 element; a 3-token pass gathers 3 rows of 64 instead of the 256 x 64 table
    assert weight_bytes_read(info, 3) == info.weight_bytes - 256 * 64 * 4 + 3 * 64 * 4


def test_roofline_by_hand(device: DeviceProfile) -> None:
    assert device.ridge_point_flops_per_byte == 10.0
    assert roofline_time(2e12, 1e9, device) == 2.0  # compute-bound
    assert roofline_time(1e9, 1e11, device) == 1.0  # memory-bound
    assert attainable_flops(1.0, device) == 1e11 and attainable_flops(100.0, device) == 1e12


@pytest.fixture
def split_device(device: DeviceProfile) -> DeviceProfile:
    """Reads stream at twice the copy figure: 200 GB/s read only, 100 GB/s for a copy (read + write)."""
    return replace(device, read_bandwidth_bytes_per_s=2e11, read_bandwidth_source="measured")


def test_weights_and_kv_reads_use_the_read_bandwidth_and_kv_writes_the_copy(split_device: DeviceProfile) -> None:
    model = smollm2_by_hand()
    assert model.weight_bytes == 538_060_032
    cost = pass_cost(model, split_device, tokens_in=1, cache_len_before=99)
    assert cost.t_weight_read_s == pytest.approx(538_060_032 / 2e11)  # 2.690 ms, not the copy figure's 5.381 ms
    # KV: 99 + 1 positions read by the update and 100 by attention, at 200 GB/s; 100 written at 100 GB/s
    assert cost.t_kv_s == pytest.approx(9_216_000 / 2e11 + 4_608_000 / 1e11)  # 46.08 us + 46.08 us
    assert cost.t_memory_s == pytest.approx(2.78246016e-3)
    assert memory_time_s(2e11, 1e11, split_device) == 2.0
    # The pass's own bandwidth lies between the two figures, nearer the reads that make up most of its bytes.
    mixed = utilisation(cost, 1.0, split_device).device_bandwidth_bytes_per_s
    assert mixed == pytest.approx((538_060_032 + 13_824_000) / 2.78246016e-3)
    assert 1.98e11 < mixed < 2e11


def test_the_roof_and_the_ridge_use_the_read_bandwidth(split_device: DeviceProfile) -> None:
    assert split_device.ridge_point_flops_per_byte == 5.0  # 1 TFLOP/s / 200 GB/s
    assert roofline_time(1e9, 2e11, split_device) == 1.0  # 200 GB read at 200 GB/s
    assert roofline_time(1e9, 1e11, split_device, bytes_written=1e11) == 1.5  # 0.5 s of reads, 1 s of writes
    assert attainable_flops(1.0, split_device) == 2e11


def test_a_device_from_before_the_read_figure_reads_at_the_copy_figure(device: DeviceProfile) -> None:
    assert device.read_bandwidth_from_copy and device.effective_read_bandwidth_bytes_per_s == 1e11
    cost = pass_cost(smollm2_by_hand(), device, tokens_in=1, cache_len_before=99)
    assert cost.t_weight_read_s == 538_060_032 / 1e11
    assert cost.t_kv_s == pytest.approx(3 * 4_608_000 / 1e11)


def smollm2_by_hand(max_context: int = 8192) -> ModelInfo:
    """SmolLM2-135M's shapes in float32, written out: the tied embedding is LM_HEAD / params = 21 % of the weights."""
    params = 30 * PER_LAYER_MATMUL + LM_HEAD + NORMS
    return ModelInfo(
        "hand", "SmolLM2 by hand", "LlamaForCausalLM", params, 30, 9, 3, 64, 576, 49152, "float32", 4, params * 4,
        30 * PER_LAYER_MATMUL, LM_HEAD, LM_HEAD, True, max_context, "cpu",
    )  # fmt: skip


def test_the_compute_bound_prompt_length_is_where_the_prefill_bound_flips(device: DeviceProfile) -> None:
    model = smollm2_by_hand()
    tokens = prefill_ridge_tokens(model, device)
    assert tokens is not None
    assert pass_cost(model, device, tokens - 1, 0).bound == "memory"
    assert pass_cost(model, device, tokens, 0).bound == "compute"
    # The shortcut 2 T / bytes per element (ridge 10 FLOP/B x 4 B / 2 = 20 tokens) forgets the LM head's reads that
    # feed no per-token matmul: at 20 tokens the prefill is still memory-bound.
    assert tokens > 20 and pass_cost(model, device, 20, 0).bound == "memory"


def test_no_compute_bound_prompt_within_a_short_context(device: DeviceProfile) -> None:
    assert prefill_ridge_tokens(smollm2_by_hand(max_context=20), device) is None
    fast_memory = replace(device, bandwidth_bytes_per_s=1e15)  # ridge 0.001 FLOP/B: one token is already compute-bound
    assert prefill_ridge_tokens(smollm2_by_hand(), fast_memory) == 1


# --- cache layouts ----------------------------------------------------------------------------------------------------
def test_each_cache_layout_moves_the_bytes_it_says(device: DeviceProfile) -> None:
    """SmolLM2 by hand, one token onto 99 cached positions: 2 x 3 KV heads x 64 x 4 B x 30 layers a position."""
    model = smollm2_by_hand()
    position = 2 * 3 * 64 * 4 * 30  # every layer's K and V of one position: 46,080 B
    # DynamicCache: the update reads 99 old + 1 new and writes 100; attention reads the 100 again
    assert kv_traffic_bytes(model, 1, 99) == (200 * position, 100 * position)
    # read once: attention reads the 100 positions, the update writes the new one
    assert kv_traffic_bytes(model, 1, 99, cache_layout="read_once") == (100 * position, position)
    # static, 256 allocated: written in place, attention over all 256 (masked past 100)
    assert kv_traffic_bytes(model, 1, 99, cache_layout="static", cache_capacity=256) == (256 * position, position)
    with pytest.raises(ValueError, match="static cache of 64 positions cannot hold 100"):
        kv_traffic_bytes(model, 1, 99, cache_layout="static", cache_capacity=64)
    cache = {"cache_capacity": 256}
    costs = {layout: pass_cost(model, device, 1, 99, cache_layout=layout, **cache) for layout in CACHE_LAYOUTS}
    assert {layout: c.cache_layout for layout, c in costs.items()} == {layout: layout for layout in CACHE_LAYOUTS}
    assert len({c.flops for c in costs.values()}) == 1  # the layout moves bytes; the maths counts the useful pairs
    assert costs["read_once"].t_kv_s < costs["concatenating"].t_kv_s


def test_a_sliding_layer_holds_window_minus_one_and_a_static_one_rolls_its_window() -> None:
    sliding = replace(smollm2_by_hand(), layers=1, layer_windows=(8,))
    assert sliding.kv_positions_held(0, 100) == 7 and positions_held(sliding, 5) == 5
    assert layer_kv_positions(sliding, 0, 1, 100) == (8, 8, 8)  # concatenating: 7 kept + 1 new, twice and written
    assert layer_kv_positions(sliding, 0, 1, 100, cache_layout="read_once") == (8, 0, 1)
    # StaticSlidingWindowLayer allocates the window; once full it rolls it (read and written twice) and writes the new
    full = layer_kv_positions(sliding, 0, 1, 100, cache_layout="static", cache_capacity=256)
    assert full == (8, 16, 17)
    assert layer_kv_positions(sliding, 0, 1, 3, cache_layout="static", cache_capacity=256) == (8, 0, 1)


def test_attention_counts_the_useful_causal_pairs() -> None:
    for first, last, window in [(1, 10, 4), (5, 5, 4), (1, 3, 8), (3, 20, 7), (10, 12, 0)]:
        brute = sum(min(i, window) if window else i for i in range(first, last + 1))
        assert causal_keys(first, last, window) == brute
    model = smollm2_by_hand()
    # a 10-token prefill: 55 pairs a layer and head, x 2 (QKᵀ) + 2 (SV) x head_dim 64 x 9 heads x 30 layers
    assert attention_flops(model, 10, 0) == 4 * 64 * 9 * 30 * 55
    assert attention_flops(model, 1, 99) == 4 * 64 * 9 * 30 * 100  # a decode: one row of 100 keys


# --- the questions ----------------------------------------------------------------------------------------------------
def test_each_question_searches_once_over_one_range(device: DeviceProfile) -> None:
    assert first_where(lambda n: n >= 37, 100) == 37 and first_where(lambda n: n > 100, 100) is None
    model = smollm2_by_hand()

    def step(batch: int) -> Cost:
        return pass_cost(model, device, 1, 99, batch=batch)

    ridge = ridge_batch(step)
    assert ridge is not None and step(ridge).bound == "compute" and step(ridge - 1).bound == "memory"
    flat = replace(device, peak_flops=1e30)  # compute never binds: no ridge within the one range
    assert ridge_batch(lambda b: pass_cost(model, flat, 1, 99, batch=b)) is None
    assert RIDGE_BATCH_LIMIT == 1 << 20
    # KV = weights: 538,060,032 B over 46,080 B a position is 11,676.6: the 11,677th position reaches them
    at = kv_reaches_weights_context(model.weight_bytes, lambda positions: kv_cache_bytes(model, positions))
    assert at == 11_677 and kv_cache_bytes(model, at - 1) < model.weight_bytes <= kv_cache_bytes(model, at)
    slides = replace(model, layer_windows=(8,) * 30)  # every layer slides: the cache stops at 7 positions a layer
    assert kv_reaches_weights_context(slides.weight_bytes, lambda n: kv_cache_bytes(slides, n)) is None


def test_utilisation_is_capped_at_the_device_and_says_its_bandwidth(device: DeviceProfile) -> None:
    cost = Cost.priced(device, 2_000_000_000, 400_000_000, (60_000_000, 40_000_000))
    used = utilisation(cost, 0.5, device)
    assert (used.compute, used.bandwidth) == (0.004, pytest.approx(0.01))
    assert used.device_bandwidth_bytes_per_s == pytest.approx(1e11)
    at_roof = utilisation(cost, cost.roofline_time_s * 0.95, device)
    assert at_roof.bandwidth == 1.0  # within noise under the floor: shown as 100 %
    assert Cost.priced(device, 0).bound == "none" and total([cost, cost]).flops == 4_000_000_000
