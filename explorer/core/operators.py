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
  attention kernel, and elementwise work is small beside the matmuls. Their measured time is what the profile shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.roofline import keys_seen, memory_time_s, weight_bytes_read
from explorer.core.trace import DeviceProfile, ModelInfo, PassCost, PassRecord

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


@dataclass(frozen=True)
class OpCost:
    """One operator of one layer in one pass (all modelled): what it computes and moves, and the time of each."""

    name: str  # e.g. "q_proj", "QKᵀ"
    kind: str  # one of KINDS
    layer: int | None  # None outside the decoder layers (embedding, LM head, the weights no layer owns)
    flops: int
    weight_bytes_read: int
    kv_bytes_read: int
    kv_bytes_written: int
    t_weight_read_s: float
    t_kv_s: float
    t_compute_s: float

    @property
    def bytes_read(self) -> int:
        return self.weight_bytes_read + self.kv_bytes_read

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.kv_bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved, as `PassCost.arithmetic_intensity`."""
        return self.flops / max(1, self.bytes_moved)

    @property
    def t_memory_s(self) -> float:
        return self.t_weight_read_s + self.t_kv_s

    @property
    def roofline_time_s(self) -> float:
        """This operator's own floor: the slower of its maths and its bytes (ops run one after another, so the sum of
        these floors is at least the pass's floor, where the maths of one op may hide behind the reads of another)."""
        return max(self.t_compute_s, self.t_memory_s)

    @property
    def bound(self) -> str:
        """Which side of the device's ridge the operator sits on, by the pass's own rule; "none" when it costs nothing
        in the model."""
        if self.flops == 0 and self.bytes_moved == 0:
            return "none"
        return "compute" if self.t_compute_s >= self.t_memory_s else "memory"


def _op(name: str, kind: str, layer: int | None, device: DeviceProfile, flops: int = 0, weights: int = 0) -> OpCost:
    return OpCost(
        name, kind, layer, flops, weights, 0, 0, memory_time_s(weights, 0, device), 0.0, flops / device.peak_flops
    )


def _kv_op(name: str, kind: str, layer: int, device: DeviceProfile, flops: int, kv: tuple[int, int]) -> OpCost:
    read, written = kv
    t_kv = memory_time_s(read, written, device)
    return OpCost(name, kind, layer, flops, 0, read, written, 0.0, t_kv, flops / device.peak_flops)


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


def layer_ops(
    model: ModelInfo, device: DeviceProfile, layer: int, linear: dict[str, int], pass_shape: tuple[int, int, int]
) -> list[OpCost]:
    """One decoder layer's operators in one pass: `linear` is its entry of `layer_linear_params`, `pass_shape`
    (tokens_in, cache_len_before, batch)."""
    tokens_in, cache_len_before, batch = pass_shape

    def linear_op(name: str, kind: str, params: int) -> OpCost:  # 2 FLOPs per weight per token, weights read once
        return _op(name, kind, layer, device, 2 * params * tokens_in * batch, params * model.bytes_per_element)

    ops = [
        linear_op(name, PROJECTIONS, linear[name])
        for name in ("q_proj", "k_proj", "v_proj", "o_proj")
        if name in linear
    ]
    keys = keys_seen(model, layer, tokens_in, cache_len_before)
    per_key = 2 * model.heads * tokens_in * keys * batch
    seen_bytes = keys * model.kv_bytes_per_token_per_layer * batch
    expand: list[OpCost] = []
    if model.latent_cache:  # kv_b_proj reads the cached latent; QKᵀ and SV read its expansion (activations)
        flops = 2 * model.kv_expand_params * keys * batch
        weights = model.kv_expand_params * model.bytes_per_element
        t_weights, t_kv = memory_time_s(weights, 0, device), memory_time_s(seen_bytes, 0, device)
        op = OpCost(
            "kv_b_proj", KV_EXPAND, layer, flops, weights, seen_bytes, 0, t_weights, t_kv, flops / device.peak_flops
        )
        expand.append(op)
        k_bytes = v_bytes = 0
    else:  # QKᵀ reads the keys, SV the values
        k_bytes = seen_bytes * model.cache_key_width // (model.cache_key_width + model.cache_value_width)
        v_bytes = seen_bytes - k_bytes
    ops.append(_kv_op("QKᵀ", SCORES, layer, device, per_key * model.head_dim, (k_bytes, 0)))
    ops.append(_op("softmax", SOFTMAX, layer, device))
    ops.append(_kv_op("SV", VALUES, layer, device, per_key * model.sv_head_dim, (v_bytes, 0)))
    ops.append(_kv_op("cache update (concatenate)", KV_UPDATE, layer, device, 0, (seen_bytes, seen_bytes)))
    ops += expand
    if linear["router_weights"]:  # its weights are read either way; its maths counted only as a linear layer
        router = linear_op("router", ROUTER, linear["router"])
        ops.append(
            _op("router", ROUTER, layer, device, router.flops, linear["router_weights"] * model.bytes_per_element)
        )
    if linear["mlp"] or model.experts is None:
        name = "gate, up, down" if "q_proj" in linear else "every linear layer"
        name += " but kv_b_proj" if model.latent_cache else ""
        ops.append(linear_op(name, MLP, linear["mlp"]))
    return ops


def expert_ops(
    model: ModelInfo, device: DeviceProfile, pass_shape: tuple[int, int, int], touched: Sequence[int] | None
) -> list[OpCost]:
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
        _op(f"{count} of {e.n_experts} experts", EXPERTS, first_moe + i, device, flops, count * e.expert_bytes)
        for i, count in enumerate(counts)
    ]


def operator_costs(
    model: ModelInfo,
    device: DeviceProfile,
    tokens_in: int,
    cache_len_before: int,
    batch: int = 1,
    experts_touched: Sequence[int] | None = None,
) -> list[OpCost]:
    """Every operator of a pass, layer by layer, then the embedding, the LM head and the weights no operator
    multiplies: the split of `pass_cost(model, device, tokens_in, cache_len_before, batch, experts_touched)`."""
    shape = (tokens_in, cache_len_before, batch)
    linear = layer_linear_params(model)
    ops = [op for layer in range(model.layers) for op in layer_ops(model, device, layer, linear[layer], shape)]
    ops += expert_ops(model, device, shape, experts_touched)
    bpe = model.bytes_per_element
    # An untied input table is only gathered row by row; a tied one is the LM head's, read there.
    gathered = 0 if model.tied_embeddings else tokens_in * batch * model.hidden_size * bpe
    name = "token embedding (its tied table is read as the LM head)" if model.tied_embeddings else "token embedding"
    ops.append(_op(name, EMBEDDING, None, device, 0, gathered))
    lm_head_flops = 2 * model.lm_head_params * batch  # the last position's logits only
    ops.append(_op("LM head", LM_HEAD, None, device, lm_head_flops, model.lm_head_params * bpe))
    counted = sum(op.weight_bytes_read for op in ops)
    rest = weight_bytes_read(model, tokens_in * batch, experts_touched) - counted
    ops.append(_op("norms, biases, other", OTHER_WEIGHTS, None, device, 0, rest))
    return ops


def pass_operators(model: ModelInfo, device: DeviceProfile, record: PassRecord) -> list[OpCost]:
    """The operators of a recorded pass, with the experts its routers chose (as the engine costs it)."""
    touched = record.experts_touched or None
    return operator_costs(model, device, record.tokens_in, record.cache_len_before, record.batch, touched)


def summed(ops: Sequence[OpCost]) -> PassCost:
    """The operators added back into one pass's cost: equal to `pass_cost` (its MoE fields are left at 0)."""
    return PassCost(
        flops=sum(op.flops for op in ops),
        weight_bytes_read=sum(op.weight_bytes_read for op in ops),
        kv_bytes_read=sum(op.kv_bytes_read for op in ops),
        kv_bytes_written=sum(op.kv_bytes_written for op in ops),
        t_weight_read_s=sum(op.t_weight_read_s for op in ops),
        t_kv_s=sum(op.t_kv_s for op in ops),
        t_compute_s=sum(op.t_compute_s for op in ops),
    )
