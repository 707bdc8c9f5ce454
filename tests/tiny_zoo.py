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


@dataclass(frozen=True)
class Architecture:
    """One architecture of the matrix: its config class and arguments, and what its cache should do per layer."""

    name: str
    config_class: str  # a transformers config class name
    kwargs: dict[str, Any]
    windows: tuple[int, ...]  # per layer: the sliding window the cache should apply, 0 for full attention
    moe: bool = False
    sdpa: bool = True  # whether transformers runs it on SDPA (else the loader falls back on eager)

    def config(self) -> transformers.PretrainedConfig:
        return getattr(transformers, self.config_class)(**self.kwargs)


def _arch(name: str, config_class: str, windows: tuple[int, ...], **kwargs: Any) -> Architecture:
    extra = {k: kwargs.pop(k) for k in ("moe", "sdpa") if k in kwargs}
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
