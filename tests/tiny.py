"""Tiny random models saved as local folders: the hub code path, exercised without a network."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, PreTrainedTokenizerFast

# A ChatML-like template, so the chat-template path runs on the tiny Llama too.
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def byte_tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    """256 byte-level symbols, no merges: any text tokenizes, ids fit a 256-token vocabulary."""
    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    fast.chat_template = chat_template
    return fast


def save_tiny_llama(folder: Path) -> Path:
    """2 layers, 4 query heads sharing 2 KV heads (grouped-query attention), ~0.1 M params."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,  # a random model would stop early on a random token
        pad_token_id=None,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    byte_tokenizer(CHAT_TEMPLATE).save_pretrained(folder)
    return folder


def save_tiny_gpt2(folder: Path) -> Path:
    """GPT-2 layout: Conv1D projections, multi-head attention (no GQA), learned positions, no chat template."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4, bos_token_id=None, eos_token_id=None
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    byte_tokenizer(None).save_pretrained(folder)
    return folder
