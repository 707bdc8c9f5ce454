"""Issue 46 §4: the graph path's fused projections (q/k/v as one matmul, gate/up as one), built from the loaded weights,
give the unfused model's tokens in float32 on a CPU, leave the original model's modules and outputs as they were, and
are refused in one line for a model whose layers are not Llama's own."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModelForCausalLM, StaticCache

from explorer.core.fused import FusedAttention, FusedMLP, fuse_refusal, fused_model
from explorer.core.graph_decode import GraphPool
from explorer.core.loaded_model import LoadedModel

STEPS = 16  # greedy decode steps after the prefill


@torch.inference_mode()
def greedy(model: nn.Module, prompt: torch.Tensor, capacity: int) -> tuple[list[int], torch.Tensor]:
    """Prefill, then STEPS one-token decodes on a StaticCache (as the graph path), greedy: (tokens, last logits)."""
    cache = StaticCache(config=model.config, max_cache_len=capacity)
    logits = model(input_ids=prompt, past_key_values=cache, use_cache=True).logits[:, -1, :]  # (1, vocab)
    tokens = [int(logits.argmax(-1))]
    for _ in range(STEPS):
        token = torch.tensor([[tokens[-1]]])  # (1, 1): a decode pass computes exactly one new token
        logits = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1, :]
        tokens.append(int(logits.argmax(-1)))
    return tokens, logits


def test_fused_projections_give_the_unfused_models_tokens_in_float32(tiny_llama_dir: object) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()  # its own copy
    assert fuse_refusal(model) is None
    prompt = torch.tensor([[5, 17, 99, 3, 42, 7, 250, 11]])  # (1, T)
    unfused_tokens, unfused_logits = greedy(model, prompt, 64)
    originals = [(layer.self_attn, layer.mlp, layer.self_attn.q_proj.weight.clone()) for layer in model.model.layers]

    fused = fused_model(model)
    layers = fused.model.layers
    assert all(isinstance(layer.self_attn, FusedAttention) and isinstance(layer.mlp, FusedMLP) for layer in layers)
    first = layers[0]
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    q_out, kv_out = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    assert first.self_attn.qkv_proj.weight.shape == (q_out + 2 * kv_out, config.hidden_size)  # one matmul for three
    assert first.mlp.gate_up_proj.weight.shape == (2 * config.intermediate_size, config.hidden_size)
    fused_tokens, fused_logits = greedy(fused, prompt, 64)
    assert fused_tokens == unfused_tokens
    torch.testing.assert_close(fused_logits, unfused_logits, rtol=1e-4, atol=1e-5)

    # The original tree is untouched: its own modules, the same weights (now slices of the fused ones), the same tokens.
    for layer, (attention, mlp, q_weight) in zip(model.model.layers, originals):
        assert layer.self_attn is attention and layer.mlp is mlp
        assert torch.equal(layer.self_attn.q_proj.weight, q_weight)
    first_q = model.model.layers[0].self_attn.q_proj.weight
    assert first_q.data_ptr() == first.self_attn.qkv_proj.weight.data_ptr()  # one copy in memory, not two
    assert greedy(model, prompt, 64)[0] == unfused_tokens


def test_a_model_that_is_not_llamas_own_is_refused_in_one_line(tiny_gpt2: LoadedModel) -> None:
    said = fuse_refusal(tiny_gpt2.model)
    assert said is not None and "\n" not in said
    pool = GraphPool(compile_steps=False)
    assert pool._target_for(tiny_gpt2.model) is tiny_gpt2.model and pool.why_unfused == said
    off = GraphPool(compile_steps=False, fuse_steps=False)
    assert off._target_for(tiny_gpt2.model) is tiny_gpt2.model and off.why_unfused == "EXPLORER_GRAPH_FUSE=0"
