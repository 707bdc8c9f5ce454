"""Roofline arithmetic for one forward pass: FLOPs, bytes moved, and the times a device profile predicts for them.

Plain Python, like nanoGPT's `estimate_mfu`: every count is written out so it can be checked by hand.
"""

from __future__ import annotations

import bisect

from explorer.core.trace import DeviceProfile, ModelInfo, PassCost


def kv_cache_bytes(model: ModelInfo, cache_len: int, batch: int = 1) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x tokens x batch x bytes per element."""
    return model.kv_bytes_per_token * cache_len * batch


def pass_flops(model: ModelInfo, tokens_in: int, cache_len_after: int, logits_tokens: int = 1) -> int:
    """FLOPs of one forward pass.

    - matmuls: 2 x (linear-layer params) x tokens; the LM head runs only on the positions whose logits are kept
      (the last one: inference needs only the next token's distribution);
    - attention: per layer and query head, Q @ K^T and P @ V each cost 2 x head_dim x keys per query; the kernels
      compute the full (tokens_in x cache_len_after) block, masked entries included, so that is what is counted.
    """
    matmul = 2 * model.matmul_params * tokens_in + 2 * model.lm_head_params * logits_tokens
    attention = 2 * 2 * model.layers * model.heads * model.head_dim * tokens_in * cache_len_after
    return matmul + attention


def weight_bytes_read(model: ModelInfo, tokens_in: int) -> int:
    """Every weight is read once per pass; an untied input-embedding table is only gathered row by row."""
    if model.tied_embeddings:
        return model.weight_bytes
    table_bytes = model.input_embedding_params * model.bytes_per_element
    return model.weight_bytes - table_bytes + tokens_in * model.hidden_size * model.bytes_per_element


def kv_traffic_bytes(model: ModelInfo, tokens_in: int, cache_len_before: int, batch: int = 1) -> tuple[int, int]:
    """(bytes read, bytes written) of the KV cache by one pass, as transformers' DynamicCache really moves them.

    DynamicCache appends by concatenation (`torch.cat([old, new])`), so every pass re-writes each layer's whole cache:
    - the update reads the old cache and the new K/V (cache_len_before + tokens_in positions) and writes the grown
      cache (cache_len_after positions);
    - attention then reads every cached position (cache_len_after).
    A pre-allocated ("static") cache would write only the new positions: the cost of growing by copy is visible here.
    """
    cache_len_after = cache_len_before + tokens_in
    update_read = kv_cache_bytes(model, cache_len_before + tokens_in, batch)
    attention_read = kv_cache_bytes(model, cache_len_after, batch)
    written = kv_cache_bytes(model, cache_len_after, batch)
    return update_read + attention_read, written


def memory_time_s(bytes_read: float, bytes_written: float, device: DeviceProfile) -> float:
    """Time to move the bytes at the device's bandwidths: reads at the read-only figure (weights, KV reads are
    streams a pass only reads), writes at the copy figure (the KV cache's update is a copy)."""
    return bytes_read / device.effective_read_bandwidth_bytes_per_s + bytes_written / device.bandwidth_bytes_per_s


def pass_cost(
    model: ModelInfo, device: DeviceProfile, tokens_in: int, cache_len_before: int, batch: int = 1
) -> PassCost:
    """The modelled cost of a pass computing `tokens_in` new positions for each of `batch` sequences."""
    cache_len_after = cache_len_before + tokens_in
    flops = batch * pass_flops(model, tokens_in, cache_len_after)
    weights = weight_bytes_read(model, tokens_in * batch)  # read once per pass, whatever the batch
    kv_read, kv_written = kv_traffic_bytes(model, tokens_in, cache_len_before, batch)
    return PassCost(
        flops=flops,
        weight_bytes_read=weights,
        kv_bytes_read=kv_read,
        kv_bytes_written=kv_written,
        t_weight_read_s=memory_time_s(weights, 0, device),
        t_kv_s=memory_time_s(kv_read, kv_written, device),
        t_compute_s=flops / device.peak_flops,
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
