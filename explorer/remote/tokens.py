"""How many tokens a streamed answer held, in total and chunk by chunk: the server's usage first, then a local
tokenizer, then one token per chunk. Each record says which source counted its total and which its chunks."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from explorer.core.errors import BadInput, one_line
from explorer.remote.records import TokenSource
from explorer.remote.wire import Stream

ChunkCounter = Callable[[Sequence[str]], list[int]]  # texts of a request's chunks -> tokens in each


class TokenCount(NamedTuple):
    chunk_tokens: list[int]
    chunk_source: TokenSource
    output_tokens: int
    output_source: TokenSource


def count_tokens(stream: Stream, counter: ChunkCounter | None) -> TokenCount:
    """The server's usage first (per chunk when every text chunk carries its own, vLLM's continuous usage), then a
    local tokenizer, then one token per chunk; the total from usage whenever the server sent one."""
    chunk_tokens: list[int]
    chunk_source: TokenSource
    per_chunk_usage = [u for u in stream.chunk_usage if u is not None]
    if per_chunk_usage and len(per_chunk_usage) == len(stream.chunk_usage):
        chunk_tokens, chunk_source = [], "usage"
        previous = 0
        for seen in per_chunk_usage:
            chunk_tokens.append(max(0, seen - previous))
            previous = max(previous, seen)
    elif counter is not None:
        chunk_tokens, chunk_source = counter(stream.texts), "tokenizer"
    else:
        chunk_tokens, chunk_source = [1] * len(stream.texts), "chunks"
    if stream.completion_tokens is not None:
        return TokenCount(chunk_tokens, chunk_source, stream.completion_tokens, "usage")
    return TokenCount(chunk_tokens, chunk_source, sum(chunk_tokens), chunk_source)


def tokenizer_chunk_counter(tokenizer: Any) -> ChunkCounter:
    """Per-chunk token counts from one tokenization of the whole output: each token belongs to the chunk its last
    character arrived in (tokenizing chunks one by one would split tokens at chunk borders)."""

    lock = threading.Lock()  # one tokenizer for every request thread of a level: a fast tokenizer is not re-entrant

    def count(texts: Sequence[str]) -> list[int]:
        ends: list[int] = []
        total = 0
        for text in texts:
            total += len(text)
            ends.append(total)
        counts = [0] * len(texts)
        with lock:
            encoded = tokenizer("".join(texts), add_special_tokens=False, return_offsets_mapping=True)
        for _start, end in encoded["offset_mapping"]:
            counts[min(bisect.bisect_left(ends, end), len(texts) - 1)] += 1
        return counts

    return count


def load_chunk_counter(name: str) -> ChunkCounter:
    """'embedded' (the SmolLM2 tokenizer of the local model) or a local folder holding a fast tokenizer."""
    from transformers import AutoTokenizer

    if name == "embedded":
        from explorer.core.loading import ensure_embedded_converted

        folder: str | Path = ensure_embedded_converted()
    else:
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise BadInput(f"Tokenizer folder '{name}' does not exist: pass 'embedded' or a local folder.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise BadInput(f"No tokenizer could be loaded from '{name}': {one_line(exc)}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise BadInput(f"The tokenizer in '{name}' is not a fast tokenizer: chunk offsets need one.")
    return tokenizer_chunk_counter(tokenizer)
