"""Attention maps of a finished run, captured by replaying its tokens with eager attention (opt-in, never timed)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from explorer.engine import decode_one_token, new_cache, prefill
from explorer.errors import BadInput
from explorer.loading import LoadedModel
from explorer.trace import Trace

CAP_ENV = "EXPLORER_ATTENTION_CAP_MIB"  # a hosted demo can lower the per-run cap


def default_cap_bytes() -> int:
    """$EXPLORER_ATTENTION_CAP_MIB, else 512 MiB of float16 maps per run (30 layers x 512 tokens take ~141 MiB)."""
    return int(float(os.environ.get(CAP_ENV, "512")) * 2**20)


@dataclass(frozen=True)
class AttentionMaps:
    """Softmax probabilities per captured layer, float16 on the CPU.

    prefill[layer]: (heads, T, T), upper triangle exactly 0 (the causal mask).
    decode[layer][k]: (heads, cache_len) for the k-th decode pass: one query row over every cached key.
    """

    layers: tuple[int, ...]
    tokens_text: tuple[str, ...]  # prompt tokens then generated tokens, one label per position
    prompt_len: int
    prefill: dict[int, np.ndarray]
    decode: dict[int, tuple[np.ndarray, ...]]
    replay_token_ids: tuple[int, ...]  # the replay's argmax after each pass: equals a greedy run's tokens

    def same_tokens_as(self, trace: Trace) -> bool | None:
        """Whether the eager replay picks the timed run's tokens; None for a sampled run (argmax need not match)."""
        return self.replay_token_ids == trace.generated_token_ids if trace.sampling.is_greedy else None

    @property
    def heads(self) -> int:
        return int(next(iter(self.prefill.values())).shape[0])

    @property
    def nbytes(self) -> int:
        total = sum(a.nbytes for a in self.prefill.values())
        return total + sum(r.nbytes for rows in self.decode.values() for r in rows)


def attention_bytes(layers: int, heads: int, prompt_len: int, decode_cache_lens: list[int]) -> int:
    """float16 bytes the capture will hold: T x T per head for prefill, one row per decode pass."""
    return 2 * layers * heads * (prompt_len * prompt_len + sum(decode_cache_lens))


class AttentionCapExceeded(BadInput):
    """The requested capture would hold more than the memory cap."""


def decoder_attention_modules(model: nn.Module) -> list[nn.Module]:
    """The attention module of every decoder block, in order (Llama's `self_attn`, GPT-2's `attn`, ...)."""
    layers = model.config.get_text_config().num_hidden_layers
    blocks = next(m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == layers)
    return [next(m for m in block.modules() if type(m).__name__.endswith("Attention")) for block in blocks]


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Only the eager kernel materialises the probabilities. This mutates the shared model: hold the run lock."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def capture_attention(
    lm: LoadedModel, trace: Trace, layers: list[int] | None = None, cap_bytes: int | None = None
) -> AttentionMaps:
    """Replay the trace's exact tokens (prompt, then each generated token fed back) and keep the attention maps.

    The timed run never pays for this: it is a second, untimed replay of the same tokens through the same cache logic.
    """
    cap_bytes = default_cap_bytes() if cap_bytes is None else cap_bytes
    info = trace.model
    chosen = sorted(set(range(info.layers) if layers is None else layers))
    if not chosen or chosen[0] < 0 or chosen[-1] >= info.layers:
        raise BadInput(f"Attention layers must be between 0 and {info.layers - 1}.")
    needed = attention_bytes(len(chosen), info.heads, trace.prompt_len, [p.cache_len_after for p in trace.decodes])
    if needed > cap_bytes:
        raise AttentionCapExceeded(
            f"Attention capture needs {needed / 2**20:.0f} MiB for {len(chosen)} layers x {trace.prompt_len} tokens, "
            f"over the {cap_bytes / 2**20:.0f} MiB cap: capture fewer layers or use a shorter prompt."
        )
    modules = decoder_attention_modules(lm.model)
    current: dict[int, np.ndarray] = {}

    def keep(layer: int) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: object, output: tuple[torch.Tensor, ...]) -> None:
            current[layer] = output[1][0].to("cpu", torch.float16).numpy()  # (1, H, Tq, Tk) -> (H, Tq, Tk)

        return hook

    handles = [modules[i].register_forward_hook(keep(i)) for i in chosen]
    prefill_maps: dict[int, np.ndarray] = {}
    decode_rows: dict[int, list[np.ndarray]] = {i: [] for i in chosen}
    try:
        with eager_attention(lm.model):
            cache = new_cache(lm.model)
            logits = prefill(lm.model, torch.tensor([list(trace.prompt_token_ids)], device=lm.torch_device), cache)
            replayed = [int(logits.argmax(-1).item())]
            prefill_maps = dict(current)
            for fed in trace.decodes:
                token = torch.tensor([[fed.input_token_ids[0]]], device=lm.torch_device)  # the run's token, fed back
                replayed.append(int(decode_one_token(lm.model, token, cache).argmax(-1).item()))
                for i in chosen:
                    decode_rows[i].append(current[i][:, 0, :])  # (H, 1, cache_len) -> (H, cache_len)
    finally:
        for handle in handles:
            handle.remove()
    return AttentionMaps(
        layers=tuple(chosen),
        tokens_text=trace.prompt_tokens_text + tuple(p.token_text for p in trace.passes),
        prompt_len=trace.prompt_len,
        prefill=prefill_maps,
        decode={i: tuple(rows) for i, rows in decode_rows.items()},
        replay_token_ids=tuple(replayed),
    )


def save_attention(maps: AttentionMaps, path: Path) -> None:
    """One .npz: `prefill_L{layer}` (heads, T, T) and `decode_L{layer}_{k}` (heads, cache_len), float16."""
    arrays = {f"prefill_L{layer}": maps.prefill[layer] for layer in maps.layers}
    for layer in maps.layers:
        arrays.update({f"decode_L{layer}_{k}": row for k, row in enumerate(maps.decode[layer])})
    np.savez_compressed(path, tokens=np.array(maps.tokens_text), **arrays)
