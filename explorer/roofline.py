"""Roofline arithmetic for one forward pass: FLOPs, bytes moved, and the times a device profile predicts for them.

Plain Python, like nanoGPT's `estimate_mfu`: every count is written out so it can be checked by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.trace import DeviceProfile, ModelInfo

GIB = 1024**3


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


@dataclass(frozen=True)
class PassCost:
    """The modelled side of a PassRecord."""

    flops: int
    weight_bytes_read: int
    kv_bytes_read: int
    kv_bytes_written: int
    t_weight_read_s: float
    t_kv_read_s: float
    t_compute_s: float


def pass_cost(model: ModelInfo, device: DeviceProfile, tokens_in: int, cache_len_after: int) -> PassCost:
    flops = pass_flops(model, tokens_in, cache_len_after)
    weights = weight_bytes_read(model, tokens_in)
    kv_read = kv_cache_bytes(model, cache_len_after)  # attention reads K and V of every position, the new ones too
    kv_written = kv_cache_bytes(model, tokens_in)
    bandwidth = device.bandwidth_bytes_per_s
    return PassCost(
        flops=flops,
        weight_bytes_read=weights,
        kv_bytes_read=kv_read,
        kv_bytes_written=kv_written,
        t_weight_read_s=weights / bandwidth,
        t_kv_read_s=kv_read / bandwidth,
        t_compute_s=flops / device.peak_flops,
    )


def roofline_time(flops: float, bytes_moved: float, device: DeviceProfile) -> float:
    """The roofline lower bound on a pass's time: the slower of the maths and the memory traffic."""
    return max(flops / device.peak_flops, bytes_moved / device.bandwidth_bytes_per_s)


def attainable_flops(arithmetic_intensity: float, device: DeviceProfile) -> float:
    """The roofline itself: min(peak, intensity x bandwidth)."""
    return min(device.peak_flops, arithmetic_intensity * device.bandwidth_bytes_per_s)
