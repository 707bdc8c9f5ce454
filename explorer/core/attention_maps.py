"""Attention maps of a finished run as data: what a capture produces and a recording stores (no torch needed)."""

from __future__ import annotations

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
