"""The roofline model per operator, per layer, as LLM-Viewer shows it: each projection, QKᵀ, softmax, SV, the KV cache's
update, the MLP (or the experts routed to), the router, the embedding and the LM head, with its FLOPs and bytes.

A split of exactly the terms `roofline.pass_cost` adds up, never a second model: the rows' FLOPs, weight bytes and KV
bytes sum to the pass's integers, and their times to its weight-read, KV and compute times. Plain arithmetic on
`ModelInfo`, like roofline.py. What the shapes cannot say is split with the assumption written beside it:
- q, k, v, o come from the shapes (hidden x heads x head_dim; hidden x kv_heads x head_dim for k and v); the rest of
  the per-token linear weights (`matmul_params`) is the MLP and the router, split evenly over the layers;
- a router's weights are hidden x n_experts; its maths is counted only where it is a linear layer (transformers 5's
  routers hold a bare weight, which the pass's FLOPs leave out: 2 x hidden x n_experts per token, tiny beside the
  experts); the MoE layers are the last `moe_layers` layers (every layer in Mixtral, Qwen3-MoE and gpt-oss);
- norms, biases and every other weight the matmuls do not multiply are one row, the remainder of the pass's weight read;
- a latent cache (MLA as transformers runs it) has no per-head k and v projections: its attention's linear layers stay
  in the one unsplit row per layer, and kv_b_proj, which expands every cached position each pass, is its own row;
- softmax and norms cost no FLOPs and no bytes of their own in the pass model: the scores stay inside the fused
  attention kernel, and elementwise work is small beside the matmuls. Their measured time is what the profile shows;
- QKᵀ and SV cost their layer's useful (causal) pairs; what they read and what the cache update reads and writes
  follow the pass's cache layout (`explorer.core.roofline.layer_kv_positions`), which every row's `Cost` records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Unpack

from explorer.core.roofline import (
    CacheOptions,
    Cost,
    keys_seen,
    layer_kv_positions,
    layer_pairs,
    total,
    weight_bytes_read,
)
from explorer.core.trace import DeviceProfile, ModelInfo, PassRecord

# Operator kinds, in the order a layer runs them (then what runs outside the layers).
PROJECTIONS = "attention projections (q, k, v, o)"
SCORES = "attention scores QKᵀ"
SOFTMAX = "softmax"
VALUES = "attention values SV"
KV_UPDATE = "KV cache update"
KV_EXPAND = "latent expanded to K, V (kv_b_proj)"
ROUTER = "router"
MLP = "MLP (gate, up, down)"
EXPERTS = "experts routed to"
EMBEDDING = "embedding"
LM_HEAD = "LM head"
OTHER_WEIGHTS = "norms, biases and other weights"
KINDS = (
    PROJECTIONS,
    SCORES,
    SOFTMAX,
    VALUES,
    KV_UPDATE,
    KV_EXPAND,
    ROUTER,
    MLP,
    EXPERTS,
    EMBEDDING,
    LM_HEAD,
    OTHER_WEIGHTS,
)


UPDATE_NAMES = {  # the KV cache update's row, by the cache's layout (`explorer.core.roofline.CacheLayout`)
    "concatenating": "cache update (concatenate: re-read and re-write the cache)",
    "read_once": "cache update (write the new positions)",
    "static": "cache update (write in place)",
}


@dataclass(frozen=True)
class Operator:
    """One operator of one layer in one pass: what it is, and its `Cost` (modelled), the pass's own record."""

    name: str  # e.g. "q_proj", "QKᵀ"
    kind: str  # one of KINDS
    layer: int | None  # None outside the decoder layers (embedding, LM head, the weights no layer owns)
    cost: Cost


def projection_params(model: ModelInfo) -> dict[str, int]:
    """One layer's q, k, v, o weights from the shapes (a fused qkv holds the same three)."""
    q_width = model.heads * model.head_dim
    kv_width = model.kv_heads * model.head_dim
    return {
        "q_proj": model.hidden_size * q_width,
        "k_proj": model.hidden_size * kv_width,
        "v_proj": model.hidden_size * kv_width,
        "o_proj": q_width * model.hidden_size,
    }


def layer_linear_params(model: ModelInfo) -> list[dict[str, int]]:
    """Per layer, the per-token linear weights by operator: q, k, v, o from the shapes, the rest of `matmul_params`
    split evenly over the layers (the last takes the remainder), a router's hidden x n_experts taken from it first."""
    projections = {} if model.latent_cache else projection_params(model)
    rest = model.matmul_params - model.layers * sum(projections.values())
    if rest < 0:  # attention not shaped as the config says (another layout): one unsplit row per layer
        projections, rest = {}, model.matmul_params
    e = model.experts
    first_moe = model.layers - (e.moe_layers if e else 0)
    layers = []
    for layer in range(model.layers):
        share = rest // model.layers + (rest % model.layers if layer == model.layers - 1 else 0)
        router_weights = model.hidden_size * e.n_experts if e and layer >= first_moe else 0
        router = min(router_weights, share)  # 0 where the router is no nn.Linear (transformers 5's MoE routers)
        layers.append({**projections, "router": router, "router_weights": router_weights, "mlp": share - router})
    return layers


def attention_ops(
    model: ModelInfo, device: DeviceProfile, layer: int, pass_shape: tuple[int, int, int], **cache: Unpack[CacheOptions]
) -> list[Operator]:
    """One layer's QKᵀ, softmax, SV, cache update (and a latent's expansion): their FLOPs over the useful pairs,
    their KV bytes by the cache's layout."""
    tokens_in, cache_len_before, batch = pass_shape
    read, update_read, update_written = layer_kv_positions(model, layer, tokens_in, cache_len_before, **cache)
    per_position = model.kv_bytes_per_token_per_layer * batch
    per_pair = 2 * model.heads * layer_pairs(model.windows[layer], tokens_in, cache_len_before) * batch
    read_bytes = read * per_position

    def op(name: str, kind: str, flops: int = 0, kv: tuple[int, int] = (0, 0), **parts: object) -> Operator:
        return Operator(name, kind, layer, Cost.priced(device, flops, kv=kv, **parts))

    ops = []
    if model.latent_cache:  # kv_b_proj reads the cached latent; QKᵀ and SV read its expansion (activations)
        keys = keys_seen(model, layer, tokens_in, cache_len_before)
        weights = model.kv_expand_params * model.bytes_per_element
        expand = Cost.priced(device, 2 * model.kv_expand_params * keys * batch, weights, (read_bytes, 0))
        k_bytes = v_bytes = 0
    else:  # QKᵀ reads the keys, SV the values
        k_bytes = read_bytes * model.cache_key_width // (model.cache_key_width + model.cache_value_width)
        v_bytes = read_bytes - k_bytes
    qk, sv = per_pair * model.head_dim, per_pair * model.sv_head_dim
    ops.append(op("QKᵀ", SCORES, qk, (k_bytes, 0), attention_flops=qk))
    ops.append(op("softmax", SOFTMAX))
    ops.append(op("SV", VALUES, sv, (v_bytes, 0), attention_flops=sv))
    layout = cache.get("cache_layout", "concatenating")
    ops.append(op(UPDATE_NAMES[layout], KV_UPDATE, 0, (update_read * per_position, update_written * per_position)))
    if model.latent_cache:
        ops.append(Operator("kv_b_proj", KV_EXPAND, layer, expand))
    return ops


def layer_ops(
    model: ModelInfo,
    device: DeviceProfile,
    layer: int,
    linear: dict[str, int],
    pass_shape: tuple[int, int, int],
    **cache: Unpack[CacheOptions],
) -> list[Operator]:
    """One decoder layer's operators in one pass: `linear` is its entry of `layer_linear_params`, `pass_shape`
    (tokens_in, cache_len_before, batch)."""
    tokens_in, _, batch = pass_shape

    def linear_op(name: str, kind: str, params: int, weights: int | None = None) -> Operator:
        """2 FLOPs per weight per token, its weights read once (`weights` params where more are read than used)."""
        read = (params if weights is None else weights) * model.bytes_per_element
        return Operator(name, kind, layer, Cost.priced(device, 2 * params * tokens_in * batch, read))

    ops = [
        linear_op(name, PROJECTIONS, linear[name])
        for name in ("q_proj", "k_proj", "v_proj", "o_proj")
        if name in linear
    ]
    ops += attention_ops(model, device, layer, pass_shape, **cache)
    if linear["router_weights"]:  # its weights are read either way; its maths counted only as a linear layer
        ops.append(linear_op("router", ROUTER, linear["router"], linear["router_weights"]))
    if linear["mlp"] or model.experts is None:
        name = "gate, up, down" if "q_proj" in linear else "every linear layer"
        name += " but kv_b_proj" if model.latent_cache else ""
        ops.append(linear_op(name, MLP, linear["mlp"]))
    return ops


def expert_ops(
    model: ModelInfo, device: DeviceProfile, pass_shape: tuple[int, int, int], touched: Sequence[int] | None
) -> list[Operator]:
    """The experts each MoE layer reads: the distinct ones its router chose (all of them without the router's record),
    each token multiplying by k of them."""
    e = model.experts
    if e is None:
        return []
    tokens_in, _, batch = pass_shape
    first_moe = model.layers - e.moe_layers
    flops = 2 * e.experts_per_token * e.expert_params * tokens_in * batch
    counts = list(touched) if touched is not None else [e.n_experts] * e.moe_layers
    return [
        Operator(
            f"{count} of {e.n_experts} experts",
            EXPERTS,
            first_moe + i,
            Cost.priced(device, flops, count * e.expert_bytes, expert_bytes_read=count * e.expert_bytes),
        )
        for i, count in enumerate(counts)
    ]


def operator_costs(
    model: ModelInfo,
    device: DeviceProfile,
    shape: tuple[int, int, int],
    experts_touched: Sequence[int] | None = None,
    **cache: Unpack[CacheOptions],
) -> list[Operator]:
    """Every operator of a pass of `shape` (tokens_in, cache_len_before, batch), layer by layer, then the embedding,
    the LM head and the weights no operator multiplies: the split of `pass_cost(model, device, *shape,
    experts_touched, **cache)`."""
    tokens_in, _, batch = shape
    linear = layer_linear_params(model)
    ops = [op for layer in range(model.layers) for op in layer_ops(model, device, layer, linear[layer], shape, **cache)]
    ops += expert_ops(model, device, shape, experts_touched)
    bpe = model.bytes_per_element
    # An untied input table is only gathered row by row; a tied one is the LM head's, read there.
    gathered = 0 if model.tied_embeddings else tokens_in * batch * model.hidden_size * bpe
    name = "token embedding (its tied table is read as the LM head)" if model.tied_embeddings else "token embedding"
    ops.append(Operator(name, EMBEDDING, None, Cost.priced(device, 0, gathered)))
    lm_head_flops = 2 * model.lm_head_params * batch  # the last position's logits only
    ops.append(Operator("LM head", LM_HEAD, None, Cost.priced(device, lm_head_flops, model.lm_head_params * bpe)))
    rest = weight_bytes_read(model, tokens_in * batch, experts_touched) - sum(op.cost.weight_bytes_read for op in ops)
    ops.append(Operator("norms, biases, other", OTHER_WEIGHTS, None, Cost.priced(device, 0, rest)))
    layout = {"cache_layout": cache.get("cache_layout", "concatenating"), "cache_capacity": cache.get("cache_capacity")}
    return [replace(op, cost=replace(op.cost, **layout)) for op in ops]  # each says the layout it was costed for


def pass_operators(model: ModelInfo, device: DeviceProfile, record: PassRecord) -> list[Operator]:
    """The operators of a recorded pass, with the experts its routers chose and the cache layout it was costed with
    (as the engine costs it)."""
    touched = record.experts_touched or None
    layout = {"cache_layout": record.cost.cache_layout, "cache_capacity": record.cost.cache_capacity}
    shape = (record.tokens_in, record.cache_len_before, record.batch)
    return operator_costs(model, device, shape, touched, **layout)


def summed(ops: Sequence[Operator]) -> Cost:
    """The operators added back into one pass's cost: equal to `pass_cost` (its active_params left at 0)."""
    return total([op.cost for op in ops])
