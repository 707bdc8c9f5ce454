"""Exact parameter counts of a decoder by part, from its architecture alone, and the bytes they and the KV cache take
in each dtype. Every count is written out, as in nanoGPT's `estimate_mfu`, so it can be checked by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

from explorer.core.errors import BadInput
from explorer.core.roofline import positions_held
from explorer.scale.config import Architecture

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # what a pass computes in: the spec table has its peaks
# What weights or the KV cache can be stored in (the quantization what-if), in bits per element. fp8, int8 and int4
# scales add a few per cent (e.g. one bf16 scale per 32-128 weights): not counted, so their bytes are a floor. MXFP4
# (the OCP microscaling format gpt-oss ships its experts in) counts its scales: 4-bit values and one 8-bit scale per
# block of 32, 4 + 8/32 = 4.25 bits a value.
STORAGE_BITS = {"float32": 32, "bfloat16": 16, "float16": 16, "fp8": 8, "int8": 8, "mxfp4": 4.25, "int4": 4}


def bytes_per_element(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"Unknown dtype '{dtype}': use one of {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[dtype]


def storage_bits(dtype: str) -> float:
    if dtype not in STORAGE_BITS:
        raise BadInput(f"Unknown storage type '{dtype}': use one of {', '.join(STORAGE_BITS)}.")
    return STORAGE_BITS[dtype]


def stored_bytes(elements: float, dtype: str) -> int:
    """Bytes of `elements` values stored in `dtype` (int4 packs two to a byte)."""
    return math.ceil(elements * storage_bits(dtype) / 8)


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by part (all layers summed); a tied LM head is the input table, counted once (in `embeddings`)."""

    embeddings: int  # the input table: vocab x hidden
    attention: int  # q, k, v, o projections of every layer, with their biases (and sinks) where the model has them
    mlp: int  # gate, up and down projections of every dense layer (0 where every layer has experts)
    norms: int  # the RMSNorms of every layer (+ q/k norms), and the final one
    lm_head: int  # vocab x hidden; 0 when tied to the input table
    linear: int  # weights one token's matmuls multiply by: every projection, k experts per sparse layer, the LM head
    experts: int = 0  # every expert of every sparse layer
    router: int = 0  # the routers of every sparse layer
    expert_each: int = 0  # one expert of one layer (its three projections and biases)
    moe_layers: int = 0
    experts_per_token: int = 0

    @property
    def total(self) -> int:
        return self.embeddings + self.attention + self.mlp + self.experts + self.router + self.norms + self.lm_head

    @property
    def active(self) -> int:
        """What one token uses: everything but the experts its router did not pick (for a dense model, `total`)."""
        return self.total - self.experts + self.moe_layers * self.experts_per_token * self.expert_each

    @property
    def dense(self) -> int:
        """Every parameter outside the experts: read by every pass, whatever the router picks."""
        return self.total - self.experts

    @property
    def by_part(self) -> dict[str, int]:
        parts = {
            "embeddings": self.embeddings,
            "attention": self.attention,
            "mlp": self.mlp,
            "norms": self.norms,
            "lm_head": self.lm_head,
        }
        return parts | ({"experts": self.experts, "router": self.router} if self.experts else {})


def attention_weights_per_layer(arch: Architecture) -> int:
    """q and o are hidden x (heads x head_dim); k and v only hidden x (kv_heads x head_dim): grouped-query attention
    keeps fewer K/V heads than query heads."""
    q_width = arch.heads * arch.head_dim
    kv_width = arch.kv_heads * arch.head_dim
    return 2 * arch.hidden_size * q_width + 2 * arch.hidden_size * kv_width


def attention_biases_per_layer(arch: Architecture) -> int:
    """Biases on q, k, v (and o), plus gpt-oss's one sink logit per query head."""
    q_width = arch.heads * arch.head_dim
    kv_width = arch.kv_heads * arch.head_dim
    qkv = q_width + 2 * kv_width if arch.qkv_bias else 0
    return qkv + (arch.hidden_size if arch.o_bias else 0) + (arch.heads if arch.attention_sinks else 0)


def mlp_weights_per_layer(arch: Architecture) -> int:
    """A gated MLP: gate and up (hidden -> intermediate) and down (intermediate -> hidden)."""
    return 3 * arch.hidden_size * arch.intermediate_size


def expert_weights(arch: Architecture) -> int:
    """One expert: a gated MLP of the experts' own width."""
    return 3 * arch.hidden_size * arch.expert_intermediate_size


def expert_params(arch: Architecture) -> int:
    """One expert with its biases where the model has them (gate and up, then down)."""
    biases = 2 * arch.expert_intermediate_size + arch.hidden_size if arch.expert_biases else 0
    return expert_weights(arch) + biases


def router_params_per_layer(arch: Architecture) -> int:
    """hidden -> one logit per expert (with a bias in gpt-oss)."""
    return arch.hidden_size * arch.n_experts + (arch.n_experts if arch.expert_biases else 0)


def count_params(arch: Architecture) -> ParamCounts:
    table = arch.vocab_size * arch.hidden_size
    mlp_bias = (2 * arch.intermediate_size + arch.hidden_size) if arch.mlp_bias else 0
    layer_norms = arch.norms_per_layer * arch.hidden_size + (2 * arch.head_dim if arch.qk_norm else 0)
    attention = attention_weights_per_layer(arch)
    mlp = mlp_weights_per_layer(arch)
    dense_layers = arch.layers - arch.moe_layers
    k = arch.experts_per_token
    return ParamCounts(
        embeddings=table,
        attention=arch.layers * (attention + attention_biases_per_layer(arch)),
        mlp=dense_layers * (mlp + mlp_bias),
        norms=arch.layers * layer_norms + arch.hidden_size,
        lm_head=0 if arch.tied_embeddings else table,
        linear=arch.layers * attention
        + dense_layers * mlp
        + arch.moe_layers * (arch.hidden_size * arch.n_experts + k * expert_weights(arch))
        + table,
        experts=arch.moe_layers * arch.n_experts * expert_params(arch),
        router=arch.moe_layers * router_params_per_layer(arch),
        expert_each=expert_params(arch),
        moe_layers=arch.moe_layers,
        experts_per_token=k,
    )


def expected_experts_read(arch: Architecture, tokens: int) -> float:
    """Distinct experts one sparse layer reads for `tokens` tokens routed independently and uniformly (an
    ASSUMPTION: real routers are skewed, which touches fewer): n (1 - (1 - k/n)^tokens). k for one token, n for many."""
    if not arch.is_moe:
        return 0.0
    n, k = arch.n_experts, arch.experts_per_token
    return n * (1 - (1 - k / n) ** tokens)


def weights_read_params(arch: Architecture, tokens: int, counts: ParamCounts | None = None) -> float:
    """Parameters a pass over `tokens` tokens reads: every dense one, and the experts its tokens are expected to pick
    (every parameter for a dense model)."""
    counts = counts or count_params(arch)
    return counts.dense + counts.moe_layers * expected_experts_read(arch, tokens) * counts.expert_each


def expert_weight_params(arch: Architecture) -> int:
    """The experts' projection weights, biases left out: what a quantized checkpoint stores in its experts' format
    (gpt-oss's MXFP4 blocks; the biases stay in the weights' dtype)."""
    return arch.moe_layers * arch.n_experts * expert_weights(arch)


def weight_bytes(arch: Architecture, dtype: str, experts_dtype: str | None = None) -> int:
    """Every parameter once (a tied table once), in `dtype`; the experts' weights in `experts_dtype` where given."""
    experts = expert_weight_params(arch) if experts_dtype else 0
    rest = stored_bytes(count_params(arch).total - experts, dtype)
    return rest + (stored_bytes(experts, experts_dtype) if experts_dtype else 0)


def kv_bytes_at(arch: Architecture, context: int, dtype: str, kv_heads: int | None = None) -> int:
    """One request's whole KV cache at `context` tokens: K and V of the positions every layer holds, window - 1 at
    most in a sliding layer (`explorer.core.roofline.positions_held`: the live run's rule too)."""
    return kv_position_bytes(arch, positions_held(arch, context), dtype, kv_heads)


def kv_position_bytes(arch: Architecture, positions: int, dtype: str, kv_heads: int | None = None) -> int:
    """K and V of `positions` layer-positions (summed over layers): 2 x kv_heads x head_dim values each."""
    heads = arch.kv_heads if kv_heads is None else kv_heads
    return stored_bytes(2 * heads * arch.head_dim * positions, dtype)


def kv_bytes_per_token(arch: Architecture, dtype: str, kv_heads: int | None = None) -> int:
    """What one more position adds while every layer still grows (full attention, or a sliding layer inside its
    window): 2 x layers x kv_heads x head_dim x bytes. Past a window, only the full layers grow (`kv_bytes_at`)."""
    heads = arch.kv_heads if kv_heads is None else kv_heads
    return stored_bytes(2 * arch.layers * heads * arch.head_dim, dtype)
