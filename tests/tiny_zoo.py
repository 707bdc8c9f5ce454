"""Tiny random models of the architectures people bring (dense, sliding-window, hybrid, mixture of experts), each saved
with save_pretrained beside the tiny byte tokenizer: as a user's folder looks, built in a fraction of a second."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM

from tests.tiny import byte_tokenizer

WINDOW = 8  # sliding window of the tiny sliding layers: a prompt of ~20 tokens passes it
NO_SPECIAL = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}  # generate() must not stop early
SHAPE = {
    "vocab_size": 256,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
HEAD_DIM = {"head_dim": 8}
MOE = {"num_experts_per_tok": 2}
# Multi-head latent attention (DeepSeek V2/V3): K of 16 + 8 and V of 16 values per head, built from a latent of 12.
# transformers caches the latent (12) in the key slot and the rotary key (8) in the value slot: 20 values per position.
LATENT, ROPE, NOPE, V_DIM = 12, 8, 16, 16
MLA = {
    "num_hidden_layers": 3,  # the first dense, as DeepSeek's first_k_dense_replace layers are
    "num_key_value_heads": 4,  # = heads: MLA expands every head's K and V from the shared latent
    "kv_lora_rank": LATENT,
    "qk_rope_head_dim": ROPE,
    "qk_nope_head_dim": NOPE,
    "v_head_dim": V_DIM,
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
}


@dataclass(frozen=True)
class Architecture:
    """One architecture of the matrix: its config class and arguments, and what its cache should do per layer."""

    name: str
    config_class: str  # a transformers config class name
    kwargs: dict[str, Any]
    windows: tuple[int, ...]  # per layer: the sliding window the cache should apply, 0 for full attention
    moe: bool = False
    sdpa: bool = True  # whether transformers runs it on SDPA (else the loader falls back on eager)
    cache_widths: tuple[int, int] | None = None  # values per position in the cache's key and value slots where they
    # are not kv_heads x head_dim (MLA's latent and rotary key)

    def config(self) -> transformers.PretrainedConfig:
        return getattr(transformers, self.config_class)(**self.kwargs)


def _arch(name: str, config_class: str, windows: tuple[int, ...], **kwargs: Any) -> Architecture:
    extra = {k: kwargs.pop(k) for k in ("moe", "sdpa", "cache_widths") if k in kwargs}
    return Architecture(name, config_class, {**SHAPE, **NO_SPECIAL, **kwargs}, windows, **extra)


ARCHITECTURES = (
    _arch("llama", "LlamaConfig", (0, 0)),
    _arch("qwen2", "Qwen2Config", (0, 0)),
    _arch("qwen3", "Qwen3Config", (0, 0), **HEAD_DIM),
    _arch("mistral-sliding", "MistralConfig", (WINDOW, WINDOW), sliding_window=WINDOW),
    _arch("gemma2", "Gemma2Config", (WINDOW, 0), sliding_window=WINDOW, sdpa=False, **HEAD_DIM),
    _arch(
        "gemma3-text",
        "Gemma3TextConfig",
        (WINDOW, WINDOW, 0),
        sliding_window=WINDOW,
        num_hidden_layers=3,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        **HEAD_DIM,
    ),
    _arch("phi3", "Phi3Config", (0, 0)),
    _arch("smollm3", "SmolLM3Config", (0, 0)),
    _arch("olmo2", "Olmo2Config", (0, 0)),
    _arch("mixtral", "MixtralConfig", (0, 0), num_local_experts=4, sliding_window=None, moe=True, **MOE),
    _arch(
        "qwen3-moe",
        "Qwen3MoeConfig",
        (0, 0),
        num_experts=4,
        moe_intermediate_size=32,
        moe=True,
        **HEAD_DIM,
        **MOE,
    ),
    _arch(
        "gpt-oss",
        "GptOssConfig",
        (WINDOW, 0),
        sliding_window=WINDOW,
        num_local_experts=4,
        intermediate_size=32,
        moe=True,
        sdpa=False,
        **HEAD_DIM,
        **MOE,
    ),
    _arch(  # group-limited routing over one group: the top-k of the router's sigmoid scores
        "deepseek-v3",
        "DeepseekV3Config",
        (0, 0, 0),
        n_group=1,
        topk_group=1,
        q_lora_rank=16,
        moe=True,
        cache_widths=(LATENT, ROPE),
        **MLA,
        **MOE,
    ),
    _arch(  # DeepSeek-V2-Lite's layout: no query latent, greedy softmax routing
        "deepseek-v2",
        "DeepseekV2Config",
        (0, 0, 0),
        q_lora_rank=None,
        moe=True,
        cache_widths=(LATENT, ROPE),
        **MLA,
        **MOE,
    ),
)

GPT2 = Architecture(
    "gpt2",
    "GPT2Config",
    {"vocab_size": 256, "n_positions": 128, "n_embd": 32, "n_layer": 2, "n_head": 4, **NO_SPECIAL},
    (0, 0),
)
OPT = Architecture(
    "opt",
    "OPTConfig",
    {
        "vocab_size": 256,
        "hidden_size": 32,
        "ffn_dim": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "word_embed_proj_dim": 32,
        "max_position_embeddings": 128,
        **NO_SPECIAL,
    },
    (0, 0),
)
ALL = (*ARCHITECTURES, GPT2, OPT)
BY_NAME = {a.name: a for a in ALL}


def save_tiny(arch: Architecture, folder: Path) -> Path:
    """The architecture's tiny random model and the byte tokenizer, as save_pretrained writes them."""
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(arch.config()).save_pretrained(folder)
    byte_tokenizer(None).save_pretrained(folder)
    return folder
