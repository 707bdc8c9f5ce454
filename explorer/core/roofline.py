"""Roofline arithmetic for one forward pass: FLOPs, bytes moved, and the times a device profile predicts for them.

Plain Python, like nanoGPT's `estimate_mfu`: every count is written out so it can be checked by hand.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Literal, TypedDict, Unpack

from explorer.core.trace import DecodePath, DeviceProfile, ModelInfo, PassCost

# How a KV cache is laid out in memory, which decides what its update moves:
# - "concatenating": transformers' DynamicCache; each update re-reads and re-writes the whole grown cache;
# - "read_once": a paged cache (vLLM); the update writes only the new positions, attention reads the held ones once;
# - "static": transformers' StaticCache; the new positions are written in place, and attention runs over every
#   reserved position (`cache_capacity`), the unwritten ones masked.
CacheLayout = Literal["concatenating", "read_once", "static"]


class CacheArgs(TypedDict, total=False):
    """The cache a pass ran on (`pass_cost`'s keywords): its layout, and for a static cache the positions reserved."""

    cache_layout: CacheLayout
    cache_capacity: int | None


def cache_layout_of(decode_path: DecodePath) -> CacheLayout:
    """The layout each of the engine's decode paths runs on: the eager path grows a DynamicCache; the static and graph
    paths write into a StaticCache."""
    return "concatenating" if decode_path == "eager" else "static"


def kv_cache_bytes(model: ModelInfo, cache_len: int, batch: int = 1) -> int:
    """2 (K and V) x kv_heads x head_dim x bytes per element x the positions each layer holds x batch: every position
    in a full-attention layer, at most window - 1 in a sliding one (`ModelInfo.kv_positions_held`). A latent cache
    (MLA) holds its two slots' widths per position instead (`ModelInfo.kv_bytes_per_token_per_layer`)."""
    held = sum(model.kv_positions_held(layer, cache_len) for layer in range(model.layers))
    return model.kv_bytes_per_token_per_layer * held * batch


def keys_seen(model: ModelInfo, layer: int, tokens_in: int, cache_len_before: int) -> int:
    """Keys a layer's attention reads in a pass: what its cache held before plus the pass's new positions (a sliding
    layer's cache hands attention its kept window - 1 positions and the new ones, then trims)."""
    return model.kv_positions_held(layer, cache_len_before) + tokens_in


def attention_keys(model: ModelInfo, tokens_in: int, cache_len_before: int) -> int:
    """Keys read by every layer together; layers x cache_len_after for a full-attention model."""
    return sum(keys_seen(model, layer, tokens_in, cache_len_before) for layer in range(model.layers))


def expert_params_per_token(model: ModelInfo) -> int:
    """Expert weights one token multiplies by: k experts in every MoE layer (0 for a dense model)."""
    e = model.experts
    return 0 if e is None else e.experts_per_token * e.moe_layers * e.expert_params


def static_keys(model: ModelInfo, cache_capacity: int) -> int:
    """Keys every layer's attention runs over on a static cache: all its reserved positions, written or not (masked),
    a sliding layer's at most its window."""
    return sum(min(cache_capacity, window) if window else cache_capacity for window in model.windows)


def pass_flops(
    model: ModelInfo,
    tokens_in: int,
    cache_len_after: int,
    logits_tokens: int = 1,
    cache_layout: CacheLayout = "concatenating",
    cache_capacity: int | None = None,
) -> int:
    """FLOPs of one forward pass.

    - matmuls: 2 x (linear-layer params, plus the k experts a token is routed to) x tokens; the LM head runs only on
      the positions whose logits are kept (the last one: inference needs only the next token's distribution);
    - attention: per layer and query head, Q @ K^T costs 2 x head_dim and P @ V 2 x v_head_dim (= head_dim but in
      MLA) per key per query; the kernels compute the full (tokens_in x keys) block, masked entries included, so that
      is what is counted. The keys are cache_len_after in a full-attention layer, at most window - 1 + tokens_in in a
      sliding one; on a static cache, every reserved position (`static_keys`);
    - a latent cache (MLA as transformers runs it) is expanded into per-head K and V by kv_b_proj on every key, every
      pass: 2 x its weights x keys.
    """
    matmul = 2 * (model.matmul_params + expert_params_per_token(model)) * tokens_in
    matmul += 2 * model.lm_head_params * logits_tokens
    keys = (
        static_keys(model, cache_capacity)
        if cache_layout == "static" and cache_capacity
        else attention_keys(model, tokens_in, cache_len_after - tokens_in)
    )
    attention = 2 * model.heads * (model.head_dim + model.sv_head_dim) * tokens_in * keys
    return matmul + attention + 2 * model.kv_expand_params * keys


def expert_bytes_read(model: ModelInfo, experts_touched: Sequence[int] | None) -> int:
    """Bytes of the experts a pass reads: the distinct experts its routers chose, per MoE layer. Without the router's
    record (a projection, no run behind it) every expert is counted: the upper bound."""
    e = model.experts
    if e is None:
        return 0
    if experts_touched is None:
        return e.all_expert_bytes
    return sum(experts_touched) * e.expert_bytes


def weight_bytes_read(model: ModelInfo, tokens_in: int, experts_touched: Sequence[int] | None = None) -> int:
    """Every weight is read once per pass, but an MoE layer reads only the experts its router chose, and an untied
    input-embedding table is only gathered row by row."""
    read = model.weight_bytes
    if model.experts is not None:
        read += expert_bytes_read(model, experts_touched) - model.experts.all_expert_bytes
    if model.tied_embeddings:
        return read
    table_bytes = model.input_embedding_params * model.bytes_per_element
    return read - table_bytes + tokens_in * model.hidden_size * model.bytes_per_element


def kv_traffic_bytes(
    model: ModelInfo,
    tokens_in: int,
    cache_len_before: int,
    batch: int = 1,
    cache_layout: CacheLayout = "concatenating",
    cache_capacity: int | None = None,
) -> tuple[int, int]:
    """(bytes read, bytes written) of the KV cache by one pass, as each layout (`CacheLayout`) moves them.

    A static cache writes the pass's new positions in place and attention reads every reserved position; a read-once
    cache writes the new positions and attention reads the held ones. transformers' DynamicCache ("concatenating")
    appends by concatenation (`torch.cat([old, new])`), so every pass re-writes each layer's whole cache:
    - the update reads the old cache and the new K/V and writes the grown cache (the keys seen: cache_len_after
      positions in a full layer; a sliding layer concatenates its kept window - 1 and the new ones, then keeps a view
      of the last window - 1);
    - attention then reads the same positions (a latent cache: kv_b_proj reads them to expand them; the expanded K and V
      are activations, not cache, and are not counted).
    The difference between the layouts is the cost of growing by copy.
    """
    per_position = model.kv_bytes_per_token_per_layer * batch
    written = model.layers * tokens_in * per_position  # the new positions, in every layer
    if cache_layout == "static" and cache_capacity:
        return static_keys(model, cache_capacity) * per_position, written
    seen = attention_keys(model, tokens_in, cache_len_before) * per_position
    if cache_layout == "read_once":
        return seen, written
    return 2 * seen, seen


def memory_time_s(bytes_read: float, bytes_written: float, device: DeviceProfile) -> float:
    """Time to move the bytes at the device's bandwidths: reads at the read-only figure (weights, KV reads are
    streams a pass only reads), writes at the copy figure (the KV cache's update is a copy)."""
    return bytes_read / device.effective_read_bandwidth_bytes_per_s + bytes_written / device.bandwidth_bytes_per_s


def active_params(model: ModelInfo, experts_touched: Sequence[int] | None) -> int:
    """Parameters whose weights a pass reads: the dense part plus the distinct experts its routers chose."""
    e = model.experts
    if e is None:
        return model.params
    touched = e.n_experts * e.moe_layers if experts_touched is None else sum(experts_touched)
    return model.params - e.all_expert_params + touched * e.expert_params


def pass_cost(
    model: ModelInfo,
    device: DeviceProfile,
    tokens_in: int,
    cache_len_before: int,
    batch: int = 1,
    experts_touched: Sequence[int] | None = None,
    **cache: Unpack[CacheArgs],
) -> PassCost:
    """The modelled cost of a pass computing `tokens_in` new positions for each of `batch` sequences.
    `experts_touched`: the distinct experts each MoE layer's router chose in this pass (recorded by the engine);
    None counts every expert. `cache_layout` and `cache_capacity` (`CacheArgs`): the cache it ran on, by default the
    concatenating DynamicCache."""
    layout, capacity = cache.get("cache_layout", "concatenating"), cache.get("cache_capacity")
    cache_len_after = cache_len_before + tokens_in
    flops = batch * pass_flops(model, tokens_in, cache_len_after, 1, layout, capacity)
    weights = weight_bytes_read(model, tokens_in * batch, experts_touched)  # read once per pass, whatever the batch
    kv_read, kv_written = kv_traffic_bytes(model, tokens_in, cache_len_before, batch, layout, capacity)
    return PassCost(
        flops=flops,
        weight_bytes_read=weights,
        kv_bytes_read=kv_read,
        kv_bytes_written=kv_written,
        t_weight_read_s=memory_time_s(weights, 0, device),
        t_kv_s=memory_time_s(kv_read, kv_written, device),
        t_compute_s=flops / device.peak_flops,
        expert_bytes_read=expert_bytes_read(model, experts_touched),
        active_params=active_params(model, experts_touched),
    )


def pass_bandwidth_bytes_per_s(cost: PassCost, device: DeviceProfile) -> float:
    """The device's bandwidth for this pass's mix of reads and writes: its bytes over its modelled memory time."""
    moved = cost.weight_bytes_read + cost.kv_bytes_read + cost.kv_bytes_written
    return moved / memory_time_s(cost.weight_bytes_read + cost.kv_bytes_read, cost.kv_bytes_written, device)


def prefill_ridge_tokens(model: ModelInfo, device: DeviceProfile) -> int | None:
    """The shortest prompt whose prefill is compute-bound on this device and dtype, None if none fits the context.

    Found on the same `pass_cost` that states each pass's bound, not on a shortcut such as 2 T / bytes per element:
    that shortcut ignores what is read but not multiplied (a tied embedding table is ~27 % of SmolLM2's weights)
    and the KV traffic, so a page could then call a prompt "above the compute-bound length" beside a prefill it
    calls memory-bound. Compute grows faster with T than bytes do (the weights are read once per pass), so the
    bound flips once: bisect for the first compute-bound T.
    """

    def compute_bound(tokens: int) -> bool:
        return pass_cost(model, device, tokens, cache_len_before=0).bound == "compute"

    lengths = range(1, model.max_context + 1)
    first = bisect.bisect_left(lengths, True, key=compute_bound)
    return lengths[first] if first < len(lengths) else None


def roofline_time(flops: float, bytes_read: float, device: DeviceProfile, bytes_written: float = 0) -> float:
    """The roofline lower bound on a pass's time: the slower of the maths and the memory traffic."""
    return max(flops / device.peak_flops, memory_time_s(bytes_read, bytes_written, device))


def attainable_flops(arithmetic_intensity: float, device: DeviceProfile) -> float:
    """The roofline itself: min(peak, intensity x bandwidth), with the read figure because a pass's bytes are mostly
    reads (as for `DeviceProfile.ridge_point_flops_per_byte`)."""
    return min(device.peak_flops, arithmetic_intensity * device.effective_read_bandwidth_bytes_per_s)
