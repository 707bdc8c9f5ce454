"""Which (query, key) pairs a pass computes, layer by layer: every earlier position on a full-attention layer, at most
its window on a sliding one, and the attention FLOPs those pairs cost."""

from __future__ import annotations

from explorer.scale.config import Architecture


def attention_pairs(arch: Architecture, queries: int, context: int) -> int:
    """(query, key) pairs over every layer for the last `queries` of `context` positions, causal: a full layer's
    query at position i sees i keys, a sliding layer's at most its window."""
    first = context - queries + 1
    return sum(keys_seen(first, context, w) for w in arch.windows)


def keys_seen(first: int, last: int, window: int) -> int:
    """sum over positions i = first..last of min(i, window) (window 0: i)."""
    if not window or last <= window:
        return (first + last) * (last - first + 1) // 2
    below = max(0, min(last, window) - first + 1)  # positions still inside the window see all before them
    start = first + below
    return (first + start - 1) * below // 2 + window * (last - start + 1)


def attention_flops(arch: Architecture, pairs: int) -> int:
    """Q @ K^T and P @ V: 2 x head_dim each per query head and (query, key) pair (`pairs` summed over layers)."""
    return 2 * 2 * arch.heads * arch.head_dim * pairs
