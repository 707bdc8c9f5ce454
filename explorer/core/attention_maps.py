"""Attention maps of a finished run as data: what a capture produces and a recording stores (no torch needed)."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import numpy as np

from explorer.core.trace import Trace


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


def maps_to_wire(maps: AttentionMaps) -> str:
    """The maps as base64 text of one .npz (float16, as captured), for the device owner's JSON events."""
    arrays: dict[str, np.ndarray] = {
        "tokens_text": np.array(maps.tokens_text, dtype=str),
        "replay_token_ids": np.array(maps.replay_token_ids, dtype=np.int64),
        "prompt_len": np.array(maps.prompt_len),
    }
    for layer in maps.layers:
        arrays[f"prefill_L{layer}"] = maps.prefill[layer]
        for k, row in enumerate(maps.decode[layer]):
            arrays[f"decode_L{layer}_{k}"] = row
    out = io.BytesIO()
    np.savez(out, **arrays)
    return base64.b64encode(out.getvalue()).decode("ascii")


def maps_from_wire(text: str) -> AttentionMaps:
    """`maps_to_wire`'s maps back (from the owner this server talks to: no pickles are read)."""
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    layers = tuple(sorted(int(name[len("prefill_L") :]) for name in arrays if name.startswith("prefill_L")))
    decode = {
        layer: tuple(
            arrays[f"decode_L{layer}_{k}"]
            for k in range(sum(1 for name in arrays if name.startswith(f"decode_L{layer}_")))
        )
        for layer in layers
    }
    return AttentionMaps(
        layers=layers,
        tokens_text=tuple(str(t) for t in arrays["tokens_text"]),
        prompt_len=int(arrays["prompt_len"]),
        prefill={layer: arrays[f"prefill_L{layer}"] for layer in layers},
        decode=decode,
        replay_token_ids=tuple(int(t) for t in arrays["replay_token_ids"]),
    )
