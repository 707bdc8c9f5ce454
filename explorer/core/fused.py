"""Fused projections for the graph decode step: each Llama layer's q, k and v projections as one matmul and its gate
and up projections as one, built from the loaded weights.

Why: a batch-1 decode step is a chain of small matrix-vector products, each its own kernel reading its own weight.
One matmul over the concatenated [q; k; v] weight reads the same bytes in one kernel instead of three (gate and up: one
instead of two), which is what serving engines (vLLM's QKVParallelLinear, gpt-fast's wqkv) do. The sum of bytes and
FLOPs is unchanged, so the roofline's floor is too; only the kernels between them shrink.

The fused model is a second view of the same model: its own decoder layers (shallow copies) whose attention and MLP
modules use the fused weights, everything else shared. The original projections' weights become slices of the fused
tensors (the same values, one copy in memory), so the eager and static paths, which run the original modules, are
untouched. Only Llama's own attention and MLP are fused (their forward is rewritten here, with the fused matmul in
place of the separate ones); any other model runs its decode step unfused (`fuse_refusal` says why).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers.models.llama.modeling_llama import (
    ALL_ATTENTION_FUNCTIONS,
    LlamaAttention,
    LlamaMLP,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

FUSE_ENV = "EXPLORER_GRAPH_FUSE"  # "0": the graph path captures the model's own unfused projections


def fuse_wanted() -> bool:
    return os.environ.get(FUSE_ENV, "1") != "0"


def _layers(model: nn.Module) -> nn.ModuleList | None:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    return layers if isinstance(layers, nn.ModuleList) else None


def fuse_refusal(model: nn.Module) -> str | None:
    """Why this model's projections are not fused, in one line; None when every layer is Llama's own."""
    layers = _layers(model)
    if layers is None or not len(layers):
        return f"{type(model).__name__} has no model.layers to fuse"
    for layer in layers:
        attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if type(attention) is not LlamaAttention or type(mlp) is not LlamaMLP:
            return (
                f"only Llama's own attention and MLP are fused; this model's are {type(attention).__name__} and "
                f"{type(mlp).__name__}"
            )
    return None


@torch.no_grad()
def fused_linear(parts: list[nn.Linear]) -> tuple[nn.Linear, tuple[int, ...]]:
    """One Linear whose weight is `parts`' weights stacked (out features one after another), and the out features of
    each; each part's weight (and bias) then becomes a slice of it: the same values, one copy in memory."""
    first = parts[0].weight
    widths = tuple(part.out_features for part in parts)
    has_bias = parts[0].bias is not None
    fused = nn.Linear(parts[0].in_features, sum(widths), bias=has_bias, device=first.device, dtype=first.dtype)
    fused.weight.copy_(torch.cat([part.weight for part in parts], dim=0))  # (sum out, in)
    if has_bias:
        fused.bias.copy_(torch.cat([part.bias for part in parts], dim=0))
    fused.requires_grad_(False)
    start = 0
    for part, width in zip(parts, widths):
        part.weight.data = fused.weight.data[start : start + width]  # a row slice: contiguous, same values
        if has_bias:
            part.bias.data = fused.bias.data[start : start + width]
        start += width
    return fused, widths


class FusedAttention(nn.Module):
    """LlamaAttention with q, k and v from one matmul; o_proj and every other figure are the original's."""

    def __init__(self, attention: LlamaAttention) -> None:
        super().__init__()
        self.config, self.layer_idx, self.head_dim = attention.config, attention.layer_idx, attention.head_dim
        self.num_key_value_groups, self.scaling = attention.num_key_value_groups, attention.scaling
        self.attention_dropout, self.is_causal = attention.attention_dropout, attention.is_causal
        self.qkv_proj, self.widths = fused_linear([attention.q_proj, attention.k_proj, attention.v_proj])
        self.o_proj = attention.o_proj
        self.training = attention.training  # a new module starts in training mode; attention kernels read it

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # hidden_states: (B, T, hidden) -> q (B, heads, T, D), k and v (B, kv_heads, T, D): one matmul, then views
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q, k, v = self.qkv_proj(hidden_states).split(self.widths, dim=-1)
        query_states = q.view(hidden_shape).transpose(1, 2)
        key_states = k.view(hidden_shape).transpose(1, 2)
        value_states = v.view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
        attention: Callable[..., Any] = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class FusedMLP(nn.Module):
    """LlamaMLP with gate and up from one matmul: down(act(gate) * up)."""

    def __init__(self, mlp: LlamaMLP) -> None:
        super().__init__()
        self.gate_up_proj, self.widths = fused_linear([mlp.gate_proj, mlp.up_proj])
        self.down_proj, self.act_fn = mlp.down_proj, mlp.act_fn
        self.training = mlp.training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.widths, dim=-1)  # (B, T, intermediate) each
        return self.down_proj(self.act_fn(gate) * up)


def _shallow(module: nn.Module, **children: nn.Module) -> nn.Module:
    """A copy of `module` that shares its parameters and buffers but has its own children, `children` replaced: the
    original module tree is not changed."""
    twin = copy.copy(module)
    twin.__dict__["_modules"] = {**module._modules, **children}
    return twin


def fused_model(model: nn.Module) -> nn.Module:
    """The same model with every layer's q/k/v and gate/up fused (`fuse_refusal` must be None): a second module tree
    over the same weights, to run or capture beside the original."""
    refusal = fuse_refusal(model)
    if refusal is not None:
        raise ValueError(refusal)
    layers = _layers(model)
    assert layers is not None
    fused_layers = nn.ModuleList(
        [_shallow(layer, self_attn=FusedAttention(layer.self_attn), mlp=FusedMLP(layer.mlp)) for layer in layers]
    )
    return _shallow(model, model=_shallow(model.model, layers=fused_layers))
