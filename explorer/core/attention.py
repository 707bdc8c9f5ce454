"""Attention maps of a finished run, captured by replaying its tokens with eager attention (opt-in, never timed)."""

from __future__ import annotations

import copy
import itertools
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
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
Section = Callable[[], AbstractContextManager[object]]  # what wraps each replay pass (nothing by default)


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


# A module's forward hooks (torch.nn.Module's own attributes): a twin made while a test or a lab had hooks on the shared
# model would otherwise run them on every replay pass (a router's counter counted the replay's forwards too).
HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
)


@dataclass(eq=False)
class EagerTwin:
    """A second module tree over the very same weight and buffer tensors as a loaded model (no tensor is copied), set
    to eager attention: the only kernel that materialises the probabilities.

    Why a twin and not the shared model switched to eager for a moment: that switch (and the hooks that keep the maps)
    would change the model under another session's timed pass. The twin is the replays' own, so a replay can run after
    a session's turn on the device, beside the next session's passes, without touching what they run. Its `lock` lets
    one replay pass through it at a time: a forward hook sees every forward through its module, so two replays at once
    would each keep the other's maps (a workshop's 8 sessions once did, and one of them drew a map it could not label).
    """

    model: nn.Module
    modules: list[nn.Module]  # each decoder block's attention module, where the hooks go
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, model: nn.Module) -> EagerTwin:
        shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}  # deepcopy keeps these
        twin = copy.deepcopy(model, memo=shared)
        for module in twin.modules():  # copies of whatever hooks the shared model had on it now: not the twin's
            for hooks in HOOK_DICTS:
                getattr(module, hooks).clear()
        twin.set_attn_implementation("eager")
        return cls(twin.eval(), decoder_attention_modules(twin))


_TWIN_LOCK = threading.Lock()


def eager_twin(lm: LoadedModel) -> EagerTwin:
    """The loaded model's eager twin, made once and kept with it (`LoadedModel.eager`)."""
    with _TWIN_LOCK:
        if lm.eager is None:
            lm.eager = EagerTwin.of(lm.model)
        return lm.eager


class AttentionReplay:
    """An untimed eager shadow of a request, fed the same tokens pass by pass, keeping each pass's attention maps.

    It has its own cache, and runs on the model's eager twin (`EagerTwin`), so neither the timed request's cache nor
    the shared model is ever touched: it needs no turn on the device. The capture of a finished run and the step mode
    (one pass per click) both feed it, each of its passes inside a `section` (none by default).
    """

    def __init__(self, lm: LoadedModel, layers: list[int]) -> None:
        self.lm, self.layers = lm, layers
        self.twin = eager_twin(lm)
        self.cache = new_cache(self.twin.model)
        self.prefill: dict[int, np.ndarray] = {}
        self.decode: dict[int, list[np.ndarray]] = {i: [] for i in layers}
        self.replayed: list[int] = []

    def step(self, input_ids: list[int], section: Section = nullcontext) -> int:
        """Feed one pass's tokens (the prompt, then each token fed back), its forward inside `section`; return the
        replay's own argmax."""
        current: dict[int, np.ndarray] = {}

        def keep(layer: int) -> Callable[..., None]:
            def hook(_module: nn.Module, _args: object, output: tuple[torch.Tensor, ...]) -> None:
                current[layer] = output[1][0].to("cpu", torch.float16).numpy()  # (1, H, Tq, Tk) -> (H, Tq, Tk)

            return hook

        ids = torch.tensor([input_ids], device=self.lm.torch_device)  # (1, T) or (1, 1)
        # `section` first (it may make way for other jobs' turns, and their replays need the twin), then the twin:
        # holding the twin while making way left the replay it let through waiting for the twin, and both stuck.
        with section(), self.twin.lock:
            handles = [self.twin.modules[i].register_forward_hook(keep(i)) for i in self.layers]
            try:
                forward = prefill if not self.replayed else decode_one_token
                token_id = int(forward(self.twin.model, ids, self.cache).argmax(-1).item())
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
    lm: LoadedModel,
    trace: Trace,
    layers: list[int] | None = None,
    cap_bytes: int | None = None,
    section: Section = nullcontext,
) -> AttentionMaps:
    """Replay the trace's exact tokens (prompt, then each generated token fed back) and keep the attention maps.

    The timed run never pays for this: it is a second, untimed replay of the same tokens through the same cache logic,
    on the model's eager twin, each of its passes inside `section` (see `AttentionReplay`).
    """
    decode_lens = [p.cache_len_after for p in trace.decodes]
    chosen = check_capture(trace.model, layers, trace.prompt_len, decode_lens, cap_bytes)
    replay = AttentionReplay(lm, chosen)
    replay.step(list(trace.prompt_token_ids), section)
    for fed in trace.decodes:
        replay.step([fed.input_token_ids[0]], section)  # the run's own token, fed back
    replay.free()
    return replay.maps(trace.prompt_tokens_text + tuple(p.token_text for p in trace.passes), trace.prompt_len)


def save_attention(maps: AttentionMaps, path: Path) -> None:
    """One .npz: `prefill_L{layer}` (heads, T, T) and `decode_L{layer}_{k}` (heads, cache_len), float16."""
    arrays = {f"prefill_L{layer}": maps.prefill[layer] for layer in maps.layers}
    for layer in maps.layers:
        arrays.update({f"decode_L{layer}_{k}": row for k, row in enumerate(maps.decode[layer])})
    np.savez_compressed(path, tokens=np.array(maps.tokens_text), **arrays)
