"""Roofline arithmetic for one forward pass: FLOPs, bytes moved and the times a device profile predicts for them, in
the one `Cost` record, with the questions the pages ask of it and one convention per quantity.

Plain Python, like nanoGPT's `estimate_mfu`: every count is written out so it can be checked by hand. One record,
`Cost`, holds what a pass, an operator of a pass (`explorer.core.operators`) or an At-scale step
(`explorer.scale.whatif`) computes and moves; the questions the pages ask of it (the batch where decode turns
compute-bound, the context where the KV cache reaches the weights, the prompt where a prefill turns compute-bound,
utilisation) are answered here once, each over one search range.

The conventions, one per quantity, used by the live run and At scale alike:
- a sliding-window layer holds its last window - 1 positions, as transformers' cache does (the next query brings the
  window's last position itself): `LayerWindows.kv_positions_held`;
- the input embedding table is gathered row by row (a lookup reads the rows of the pass's tokens; an LM head tied to
  it reads it whole as the LM head);
- causal attention costs its useful (query, key) pairs: each query with the keys at or before it, within its window.
  A fused causal kernel skips the tiles above the diagonal; an eager kernel computes them and masks them (not counted).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, TypedDict, Unpack

from explorer.core.device_profile import DeviceProfile
from explorer.core.model_info import LayerWindows, ModelInfo

# How a KV cache moves its bytes (the names other modules pass as `cache_layout`):
# - "concatenating": transformers' DynamicCache: the update re-reads and re-writes the whole grown cache
#   (`torch.cat([old, new])`), then attention reads it again;
# - "read_once": a paged, vLLM-style cache: the update writes only the new positions, attention reads the held
#   positions (and the new ones) once;
# - "static": transformers' StaticCache: the new positions are written in place, and attention runs over every
#   allocated position (`cache_capacity`, masked past the cache's length; a sliding layer allocates its window).
CacheLayout = Literal["concatenating", "read_once", "static"]
CACHE_LAYOUTS: tuple[CacheLayout, ...] = ("concatenating", "read_once", "static")
LAYOUT_NAMES: dict[str, str] = {  # short, for a sentence
    "concatenating": "transformers' DynamicCache (re-read, re-written each step)",
    "read_once": "a read-once cache (vLLM's paged one)",
    "static": "transformers' StaticCache (every allocated position read each step)",
}
LAYOUT_WORDS: dict[str, str] = {
    "concatenating": "a concatenating cache (transformers' DynamicCache: every pass re-reads and re-writes it)",
    "read_once": "a read-once cache (paged, as vLLM's: each step reads the cache once and writes the new position)",
    "static": "a static cache (transformers' StaticCache: attention runs over every allocated position)",
}
RIDGE_BATCH_LIMIT = 1 << 20  # the largest batch any page searches for decode's ridge crossing
KV_CONTEXT_LIMIT = 1 << 40  # the longest context searched for where the KV cache reaches the weights


class CacheOptions(TypedDict, total=False):
    """How the pass's KV cache is laid out: `cache_layout` (default "concatenating") and, for "static", its
    `cache_capacity` (the positions it allocates)."""

    cache_layout: CacheLayout
    cache_capacity: int | None


@dataclass(frozen=True)
class Cost:
    """The roofline model's cost of a pass, of one operator of a pass, or of an At-scale step (all modelled): what it
    computes and moves, and how long that takes at a device's peak compute and bandwidth."""

    flops: int  # matmuls + attention over its useful (causal) pairs
    weight_bytes_read: int  # every weight once per pass (the input table's gathered rows; the experts routed to)
    kv_bytes_read: int  # attention's read of the cached K and V, plus the cache update's own read (by layout)
    kv_bytes_written: int  # the cache update's write: the whole grown cache when the cache concatenates
    t_weight_read_s: float  # weight_bytes_read / read bandwidth
    t_kv_s: float  # kv_bytes_read / read bandwidth + kv_bytes_written / copy bandwidth
    t_compute_s: float  # flops / peak FLOP/s
    expert_bytes_read: int = 0  # the part of weight_bytes_read that is MoE experts: the distinct ones routed to
    active_params: int = 0  # params whose weights the pass reads (dense part + experts routed to); 0 in older traces
    attention_flops: int = 0  # the part of flops that is QKᵀ and SV over the useful pairs; 0 in older traces
    cache_layout: CacheLayout = "concatenating"  # how the KV traffic was counted (older traces: concatenating)
    cache_capacity: int | None = None  # a static cache's allocated positions; None for the other layouts

    @classmethod
    def priced(
        cls, device: DeviceProfile, flops: int, weight_bytes_read: int = 0, kv: tuple[int, int] = (0, 0), **parts: Any
    ) -> Cost:
        """The one place a modelled time is made: the FLOPs at the device's peak, the bytes read (weights, `kv`'s
        read) at its read-only bandwidth, the bytes written (`kv`'s write) at its copy bandwidth. `parts`: the
        record's other fields (`attention_flops`, `expert_bytes_read`, `cache_layout`, ...)."""
        kv_read, kv_written = kv
        return cls(
            flops=flops,
            weight_bytes_read=weight_bytes_read,
            kv_bytes_read=kv_read,
            kv_bytes_written=kv_written,
            t_weight_read_s=memory_time_s(weight_bytes_read, 0, device),
            t_kv_s=memory_time_s(kv_read, kv_written, device),
            t_compute_s=flops / device.peak_flops,
            **parts,
        )

    @property
    def kv_bytes_moved(self) -> int:
        return self.kv_bytes_read + self.kv_bytes_written

    @property
    def bytes_read(self) -> int:
        return self.weight_bytes_read + self.kv_bytes_read

    @property
    def bytes_moved(self) -> int:
        """Weights read plus KV-cache traffic: what the memory side of the roofline divides by the bandwidths (reads by
        the read-only figure, writes by the copy figure)."""
        return self.weight_bytes_read + self.kv_bytes_moved

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved: the same bytes as `t_memory_s`, so it agrees with `bound`."""
        return self.flops / max(1, self.bytes_moved)

    @property
    def t_memory_s(self) -> float:
        return self.t_weight_read_s + self.t_kv_s

    @property
    def roofline_time_s(self) -> float:
        """The roofline model's lower bound: the slower of moving the bytes and doing the maths."""
        return max(self.t_compute_s, self.t_memory_s)

    @property
    def bound(self) -> str:
        """Which side of the ridge it sits on, from its own times: never asserted, always computed; "none" for what
        costs nothing in the model (softmax, say)."""
        if self.flops == 0 and self.bytes_moved == 0:
            return "none"
        return "compute" if self.t_compute_s >= self.t_memory_s else "memory"


def total(costs: Sequence[Cost]) -> Cost:
    """Costs added up, field by field (the layout of the first): an operator split adds back to its pass."""
    sums = {f.name: sum(getattr(c, f.name) for c in costs) for f in fields(Cost) if f.type in ("int", "float")}
    layout = costs[0].cache_layout if costs else "concatenating"
    return Cost(**sums, cache_layout=layout, cache_capacity=costs[0].cache_capacity if costs else None)


def memory_time_s(bytes_read: float, bytes_written: float, device: DeviceProfile) -> float:
    """Time to move the bytes at the device's bandwidths: reads at the read-only figure (weights, KV reads are
    streams a pass only reads), writes at the copy figure (the KV cache's update is a copy)."""
    return bytes_read / device.effective_read_bandwidth_bytes_per_s + bytes_written / device.bandwidth_bytes_per_s


# --- positions and pairs, for a loaded model and an At-scale architecture alike -----------------------------------
class AttentionShape(Protocol):
    """What attention's FLOPs need: every layer's window (`LayerWindows`) and the heads' widths."""

    heads: int
    head_dim: int

    @property
    def windows(self) -> tuple[int, ...]: ...

    @property
    def sv_head_dim(self) -> int: ...


def positions_held(shape: LayerWindows, positions: int) -> int:
    """Positions the cache holds after `positions` have gone in, summed over layers: every one in a full-attention
    layer, at most window - 1 in a sliding one (`LayerWindows.kv_positions_held`)."""
    return sum(shape.kv_positions_held(layer, positions) for layer in range(shape.layers))


def causal_keys(first: int, last: int, window: int) -> int:
    """Keys the queries at positions first..last (1-based) attend to, causal: sum of min(i, window) (window 0: i)."""
    if not window or last <= window:
        return (first + last) * (last - first + 1) // 2
    below = max(0, min(last, window) - first + 1)  # positions still inside the window see all before them
    start = first + below
    return (first + start - 1) * below // 2 + window * (last - start + 1)


def layer_pairs(window: int, tokens_in: int, cache_len_before: int) -> int:
    """One layer's useful (query, key) pairs in a pass: each new query with the keys at or before it in its window."""
    return causal_keys(cache_len_before + 1, cache_len_before + tokens_in, window)


def attention_flops(shape: AttentionShape, tokens_in: int, cache_len_before: int) -> int:
    """QKᵀ (2 x head_dim) and SV (2 x sv_head_dim) per query head and useful pair, every layer, one sequence."""
    pairs = sum(layer_pairs(window, tokens_in, cache_len_before) for window in shape.windows)
    return 2 * shape.heads * (shape.head_dim + shape.sv_head_dim) * pairs


def layer_kv_positions(
    shape: LayerWindows, layer: int, tokens_in: int, cache_len_before: int, **cache: Unpack[CacheOptions]
) -> tuple[int, int, int]:
    """One layer's KV traffic in positions: (read by attention, read by the update, written by the update)."""
    layout, capacity = cache.get("cache_layout", "concatenating"), cache.get("cache_capacity")
    seen = shape.kv_positions_held(layer, cache_len_before) + tokens_in  # the keys attention reads
    if layout == "concatenating":  # cat(old, new): reads both, writes the grown cache; attention reads it again
        return seen, seen, seen
    if layout == "read_once":
        return seen, 0, tokens_in
    window = shape.windows[layer]
    if capacity is None or (not window and capacity < cache_len_before + tokens_in):
        raise ValueError(f"a static cache of {capacity} positions cannot hold {cache_len_before + tokens_in}")
    allocated = min(capacity, window) if window else capacity
    if window and cache_len_before >= allocated:  # a full sliding layer rolls its window: read and written twice
        return allocated, 2 * allocated, 2 * allocated + tokens_in
    return allocated, 0, tokens_in


def kv_traffic_positions(
    shape: LayerWindows, tokens_in: int, cache_len_before: int, **cache: Unpack[CacheOptions]
) -> tuple[int, int]:
    """(positions read, positions written) of one sequence's KV cache by a pass, summed over layers (a position of
    one layer: its K and V), by `layer_kv_positions`: the live run's bytes and At scale's alike."""
    read = written = 0
    for layer in range(shape.layers):
        attention, update_read, update_written = layer_kv_positions(shape, layer, tokens_in, cache_len_before, **cache)
        read, written = read + attention + update_read, written + update_written
    return read, written


# --- one pass -------------------------------------------------------------------------------------------------------
def kv_cache_bytes(model: ModelInfo, cache_len: int, batch: int = 1) -> int:
    """2 (K and V) x kv_heads x head_dim x bytes per element x the positions each layer holds x batch: every position
    in a full-attention layer, at most window - 1 in a sliding one. A latent cache (MLA) holds its two slots' widths
    per position instead (`ModelInfo.kv_bytes_per_token_per_layer`)."""
    return model.kv_bytes_per_token_per_layer * positions_held(model, cache_len) * batch


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


def pass_flops(model: ModelInfo, tokens_in: int, cache_len_after: int, logits_tokens: int = 1) -> int:
    """FLOPs of one forward pass of one sequence.

    - matmuls: 2 x (linear-layer params, plus the k experts a token is routed to) x tokens; the LM head runs only on
      the positions whose logits are kept (the last one: inference needs only the next token's distribution);
    - attention: `attention_flops`, over the useful (causal) pairs;
    - a latent cache (MLA as transformers runs it) is expanded into per-head K and V by kv_b_proj on every key, every
      pass: 2 x its weights x keys.
    """
    matmul = 2 * (model.matmul_params + expert_params_per_token(model)) * tokens_in
    matmul += 2 * model.lm_head_params * logits_tokens
    before = cache_len_after - tokens_in
    keys = attention_keys(model, tokens_in, before)
    return matmul + attention_flops(model, tokens_in, before) + 2 * model.kv_expand_params * keys


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
    """(bytes read, bytes written) of the KV cache by one pass, as the cache's layout moves them (`CacheLayout`).

    transformers' DynamicCache ("concatenating") appends by `torch.cat([old, new])`, so every pass re-writes each
    layer's whole cache: the update reads the old cache and the new K/V and writes the grown cache (the keys seen:
    cache_len_after positions in a full layer; a sliding layer concatenates its kept window - 1 and the new ones,
    then keeps a view of the last window - 1), and attention then reads the same positions (a latent cache: kv_b_proj
    reads them to expand them; the expanded K and V are activations, not cache, and are not counted).
    """
    options: CacheOptions = {"cache_layout": cache_layout, "cache_capacity": cache_capacity}
    read, written = kv_traffic_positions(model, tokens_in, cache_len_before, **options)
    per_position = model.kv_bytes_per_token_per_layer * batch
    return read * per_position, written * per_position


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
    **cache: Unpack[CacheOptions],
) -> Cost:
    """The modelled cost of a pass computing `tokens_in` new positions for each of `batch` sequences.
    `experts_touched`: the distinct experts each MoE layer's router chose in this pass (recorded by the engine); None
    counts every expert. `cache`: `cache_layout` and `cache_capacity` (`CacheOptions`; a concatenating cache by
    default, as the engine's DynamicCache)."""
    layout, capacity = cache.get("cache_layout", "concatenating"), cache.get("cache_capacity")
    flops = batch * pass_flops(model, tokens_in, cache_len_before + tokens_in)
    return Cost.priced(
        device,
        flops,
        weight_bytes_read(model, tokens_in * batch, experts_touched),  # read once per pass, whatever the batch
        kv_traffic_bytes(model, tokens_in, cache_len_before, batch, layout, capacity),
        attention_flops=batch * attention_flops(model, tokens_in, cache_len_before),
        expert_bytes_read=expert_bytes_read(model, experts_touched),
        active_params=active_params(model, experts_touched),
        cache_layout=layout,
        cache_capacity=capacity,
    )


def roofline_time(flops: float, bytes_read: float, device: DeviceProfile, bytes_written: float = 0) -> float:
    """The roofline lower bound on a pass's time: the slower of the maths and the memory traffic."""
    return max(flops / device.peak_flops, memory_time_s(bytes_read, bytes_written, device))


def attainable_flops(arithmetic_intensity: float, device: DeviceProfile) -> float:
    """The roofline itself: min(peak, intensity x bandwidth), with the read figure because a pass's bytes are mostly
    reads (as for `DeviceProfile.ridge_point_flops_per_byte`)."""
    return min(device.peak_flops, arithmetic_intensity * device.effective_read_bandwidth_bytes_per_s)


# --- the questions the pages ask, each answered once over one search range --------------------------------------
def first_where(holds: Callable[[int], bool], limit: int) -> int | None:
    """The smallest n in 1..limit for which `holds(n)`, None if none; `holds` flips once (false, then true): bisect."""
    numbers = range(1, limit + 1)
    first = bisect.bisect_left(numbers, True, key=holds)
    return numbers[first] if first < len(numbers) else None


def ridge_batch(step_at: Callable[[int], Cost]) -> int | None:
    """The smallest batch whose decode step (`step_at(B)`) is compute-bound, None up to `RIDGE_BATCH_LIMIT`. Compute
    grows as B; memory as the weights (fixed, or growing towards every expert for a mixture of experts) plus B KV
    caches: once a step is compute-bound every larger batch is too."""
    return first_where(lambda batch: step_at(batch).bound == "compute", RIDGE_BATCH_LIMIT)


def prefill_ridge_tokens(model: ModelInfo, device: DeviceProfile, **cache: Unpack[CacheOptions]) -> int | None:
    """The shortest prompt whose prefill is compute-bound on this device and dtype (on the `cache` a run was costed
    with: a concatenating one by default), None if none fits the context (a static cache's, where it is smaller).

    Found on the same `pass_cost` that states each pass's bound, not on a shortcut such as 2 T / bytes per element:
    that shortcut ignores what is read but not multiplied (a tied embedding table is ~27 % of SmolLM2's weights)
    and the KV traffic, so a page could then call a prompt "above the compute-bound length" beside a prefill it
    calls memory-bound. Compute grows faster with T than bytes do (the weights are read once per pass).
    """
    longest = min(model.max_context, cache.get("cache_capacity") or model.max_context)
    return first_where(lambda tokens: pass_cost(model, device, tokens, 0, **cache).bound == "compute", longest)


def kv_reaches_weights_context(weight_bytes: int, kv_bytes_at: Callable[[int], int]) -> int | None:
    """The shortest context at which the KV bytes `kv_bytes_at(context)` reach `weight_bytes`, None up to
    `KV_CONTEXT_LIMIT` (every layer sliding: the cache stops growing at its windows). The KV cache page compares one
    sequence's cache with the weights it holds; At scale a step's KV traffic with its weight read."""
    return first_where(lambda context: kv_bytes_at(context) >= weight_bytes, KV_CONTEXT_LIMIT)


@dataclass(frozen=True)
class Utilisation:
    """A measured pass against the device: achieved compute and bandwidth, each as a share of the device's figure."""

    compute: float  # achieved FLOP/s / peak, at most 1
    bandwidth: float  # achieved bytes/s / the device's bandwidth for the pass's mix of reads and writes, at most 1
    device_bandwidth_bytes_per_s: float  # that bandwidth: the pass's bytes over its modelled memory time


def utilisation(cost: Cost, wall_s: float, device: DeviceProfile) -> Utilisation:
    """Modelled FLOPs and bytes over the measured time, against the device's figures. A pass within 10 % under its
    floor is noise at the roof, not a device beaten: shown as 100 % (the page flags it)."""
    bandwidth = cost.bytes_moved / memory_time_s(cost.bytes_read, cost.kv_bytes_written, device)
    achieved_flops = cost.flops / wall_s if wall_s > 0 else 0.0
    achieved_bytes = cost.bytes_moved / wall_s if wall_s > 0 else 0.0
    return Utilisation(min(1.0, achieved_flops / device.peak_flops), min(1.0, achieved_bytes / bandwidth), bandwidth)
