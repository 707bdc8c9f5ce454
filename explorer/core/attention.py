"""Attention maps of a finished run, captured by replaying its tokens with eager attention (opt-in, never timed)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from explorer.core.attention_maps import AttentionMaps, attention_bytes
from explorer.core.engine import decode_one_token, new_cache, prefill
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import ModelInfo, Trace
from explorer.core.units import MIB, mebibytes

CAP_ENV = "EXPLORER_ATTENTION_CAP_MIB"  # a hosted demo can lower the per-run cap


def default_cap_bytes() -> int:
    """$EXPLORER_ATTENTION_CAP_MIB, else 512 MiB of float16 maps per run (30 layers x 512 tokens take ~141 MiB)."""
    return int(float(os.environ.get(CAP_ENV, "512")) * MIB)


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


class AttentionReplay:
    """An untimed eager shadow of a request, fed the same tokens pass by pass, keeping each pass's attention maps.

    It has its own cache, so the timed request's SDPA cache is never touched; the capture of a finished run and the
    step mode (one pass per click) both feed it. Eager attention mutates the shared model: hold the run lock.
    """

    def __init__(self, lm: LoadedModel, layers: list[int]) -> None:
        self.lm, self.layers = lm, layers
        self.modules = decoder_attention_modules(lm.model)
        self.cache = new_cache(lm.model)
        self.prefill: dict[int, np.ndarray] = {}
        self.decode: dict[int, list[np.ndarray]] = {i: [] for i in layers}
        self.replayed: list[int] = []

    def step(self, input_ids: list[int]) -> int:
        """Feed one pass's tokens (the prompt, then each token fed back); return the replay's own argmax."""
        current: dict[int, np.ndarray] = {}

        def keep(layer: int) -> Callable[..., None]:
            def hook(_module: nn.Module, _args: object, output: tuple[torch.Tensor, ...]) -> None:
                current[layer] = output[1][0].to("cpu", torch.float16).numpy()  # (1, H, Tq, Tk) -> (H, Tq, Tk)

            return hook

        handles = [self.modules[i].register_forward_hook(keep(i)) for i in self.layers]
        ids = torch.tensor([input_ids], device=self.lm.torch_device)  # (1, T) or (1, 1)
        try:
            with eager_attention(self.lm.model):
                forward = prefill if not self.replayed else decode_one_token
                token_id = int(forward(self.lm.model, ids, self.cache).argmax(-1).item())
        finally:
            for handle in handles:
                handle.remove()
        if not self.replayed:
            self.prefill = current
        else:
            positions = self.cache.get_seq_length()
            for i in self.layers:
                self.decode[i].append(over_every_position(current[i][:, 0, :], positions))  # (H, cache_len)
        self.replayed.append(token_id)
        return token_id

    def maps(self, tokens_text: tuple[str, ...], prompt_len: int) -> AttentionMaps:
        return AttentionMaps(
            layers=tuple(self.layers),
            tokens_text=tokens_text,
            prompt_len=prompt_len,
            prefill=dict(self.prefill),
            decode={i: tuple(rows) for i, rows in self.decode.items()},
            replay_token_ids=tuple(self.replayed),
        )

    def free(self) -> None:
        self.cache = None


def over_every_position(row: np.ndarray, positions: int) -> np.ndarray:
    """A decode row over every position so far: a sliding-window layer attends only to its last keys (its cache kept
    window - 1 of them), so the positions before are zeros, as in its prefill map, where the window's mask puts them."""
    # row: (H, keys seen) -> (H, positions)
    missing = positions - row.shape[-1]
    return np.pad(row, ((0, 0), (missing, 0))) if missing > 0 else row


def check_capture(
    info: ModelInfo, layers: list[int] | None, prompt_len: int, decode_lens: list[int], cap_bytes: int | None = None
) -> list[int]:
    """The layers to capture, refused before anything runs when they do not exist or would pass the memory cap."""
    cap_bytes = default_cap_bytes() if cap_bytes is None else cap_bytes
    chosen = sorted(set(range(info.layers) if layers is None else layers))
    if not chosen or chosen[0] < 0 or chosen[-1] >= info.layers:
        raise BadInput(f"Attention layers must be between 0 and {info.layers - 1}.")
    needed = attention_bytes(len(chosen), info.heads, prompt_len, decode_lens)
    if needed > cap_bytes:
        raise AttentionCapExceeded(
            f"Attention capture needs {mebibytes(needed)} for {len(chosen)} layers x {prompt_len} tokens, "
            f"over the {mebibytes(cap_bytes)} cap: capture fewer layers or use a shorter prompt."
        )
    return chosen


def capture_attention(
    lm: LoadedModel, trace: Trace, layers: list[int] | None = None, cap_bytes: int | None = None
) -> AttentionMaps:
    """Replay the trace's exact tokens (prompt, then each generated token fed back) and keep the attention maps.

    The timed run never pays for this: it is a second, untimed replay of the same tokens through the same cache logic.
    """
    decode_lens = [p.cache_len_after for p in trace.decodes]
    chosen = check_capture(trace.model, layers, trace.prompt_len, decode_lens, cap_bytes)
    replay = AttentionReplay(lm, chosen)
    replay.step(list(trace.prompt_token_ids))
    for fed in trace.decodes:
        replay.step([fed.input_token_ids[0]])  # the run's own token, fed back
    replay.free()
    return replay.maps(trace.prompt_tokens_text + tuple(p.token_text for p in trace.passes), trace.prompt_len)


def save_attention(maps: AttentionMaps, path: Path) -> None:
    """One .npz: `prefill_L{layer}` (heads, T, T) and `decode_L{layer}_{k}` (heads, cache_len), float16."""
    arrays = {f"prefill_L{layer}": maps.prefill[layer] for layer in maps.layers}
    for layer in maps.layers:
        arrays.update({f"decode_L{layer}_{k}": row for k, row in enumerate(maps.decode[layer])})
    np.savez_compressed(path, tokens=np.array(maps.tokens_text), **arrays)
