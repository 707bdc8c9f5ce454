"""Exact parameter counts of a decoder by part, from its architecture alone, and the bytes they and the KV cache take
in each dtype. Every count is written out, as in nanoGPT's `estimate_mfu`, so it can be checked by hand."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import BadInput
from explorer.scale.config import Architecture

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def bytes_per_element(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"Unknown dtype '{dtype}': use one of {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by part (all layers summed); a tied LM head is the input table, counted once (in `embeddings`)."""

    embeddings: int  # the input table: vocab x hidden
    attention: int  # q, k, v, o projections of every layer, with their biases where the model has them
    mlp: int  # gate, up and down projections of every layer
    norms: int  # two RMSNorms per layer (+ q/k norms), and the final one
    lm_head: int  # vocab x hidden; 0 when tied to the input table
    linear: int  # weights the per-token matmuls multiply by: every projection and the LM head (tied or not)

    @property
    def total(self) -> int:
        return self.embeddings + self.attention + self.mlp + self.norms + self.lm_head

    @property
    def by_part(self) -> dict[str, int]:
        return {
            "embeddings": self.embeddings,
            "attention": self.attention,
            "mlp": self.mlp,
            "norms": self.norms,
            "lm_head": self.lm_head,
        }


def attention_weights_per_layer(arch: Architecture) -> int:
    """q and o are hidden x (heads x head_dim); k and v only hidden x (kv_heads x head_dim): grouped-query attention
    keeps fewer K/V heads than query heads."""
    q_width = arch.heads * arch.head_dim
    kv_width = arch.kv_heads * arch.head_dim
    return 2 * arch.hidden_size * q_width + 2 * arch.hidden_size * kv_width


def attention_biases_per_layer(arch: Architecture) -> int:
    q_width = arch.heads * arch.head_dim
    kv_width = arch.kv_heads * arch.head_dim
    qkv = q_width + 2 * kv_width if arch.qkv_bias else 0
    return qkv + (arch.hidden_size if arch.o_bias else 0)


def mlp_weights_per_layer(arch: Architecture) -> int:
    """A gated MLP: gate and up (hidden -> intermediate) and down (intermediate -> hidden)."""
    return 3 * arch.hidden_size * arch.intermediate_size


def count_params(arch: Architecture) -> ParamCounts:
    table = arch.vocab_size * arch.hidden_size
    mlp_bias = (2 * arch.intermediate_size + arch.hidden_size) if arch.mlp_bias else 0
    layer_norms = 2 * arch.hidden_size + (2 * arch.head_dim if arch.qk_norm else 0)
    attention = attention_weights_per_layer(arch)
    mlp = mlp_weights_per_layer(arch)
    return ParamCounts(
        embeddings=table,
        attention=arch.layers * (attention + attention_biases_per_layer(arch)),
        mlp=arch.layers * (mlp + mlp_bias),
        norms=arch.layers * layer_norms + arch.hidden_size,
        lm_head=0 if arch.tied_embeddings else table,
        linear=arch.layers * (attention + mlp) + table,
    )


def weight_bytes(arch: Architecture, dtype: str) -> int:
    """Every parameter once (a tied table once), in `dtype`."""
    return count_params(arch).total * bytes_per_element(dtype)


def kv_bytes_per_token(arch: Architecture, dtype: str, kv_heads: int | None = None) -> int:
    """K and V, every layer, every KV head (or `kv_heads` of them: one GPU's share): 2 x layers x kv_heads x head_dim
    x bytes."""
    heads = arch.kv_heads if kv_heads is None else kv_heads
    return 2 * arch.layers * heads * arch.head_dim * bytes_per_element(dtype)
