"""How many tokens a streamed answer held, in total and chunk by chunk: the server's usage first, then a local
tokenizer, then one token per chunk. Each record says which source counted its total and which its chunks."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.core.errors import BadInput, one_line
from explorer.core.paths import embedded_folder
from explorer.remote.answer import Stream, TokenCount
from explorer.remote.records import TokenSource

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MAX_TOKENIZER_BYTES = 128 << 20  # the largest vocabularies' tokenizer.json are tens of MB

ChunkCounter = Callable[[Sequence[str], Callable[[], None]], list[int]]  # (texts, deadline check) -> tokens in each


def _no_deadline() -> None:
    pass


def count_tokens(stream: Stream, counter: ChunkCounter | None, check: Callable[[], None] | None = None) -> TokenCount:
    """The server's usage first (per chunk when every text chunk carries its own, vLLM's continuous usage), then a
    local tokenizer, then one token per chunk; the total from usage whenever the server sent one. `check` raises once
    the request's deadline has passed: a tokenizer shared by many requests is not waited for past it."""
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
        chunk_tokens, chunk_source = counter(stream.texts, check or _no_deadline), "tokenizer"
    else:
        chunk_tokens, chunk_source = [1] * len(stream.texts), "chunks"
    if stream.completion_tokens is not None:
        return TokenCount(chunk_tokens, chunk_source, stream.completion_tokens, "usage")
    return TokenCount(chunk_tokens, chunk_source, sum(chunk_tokens), chunk_source)


def tokenizer_chunk_counter(tokenizer: Tokenizer) -> ChunkCounter:
    """Per-chunk token counts from one tokenization of the whole output: each token belongs to the chunk its last
    character arrived in (tokenizing chunks one by one would split tokens at chunk borders). The output is bounded
    before it gets here (explorer.remote.answer: far beyond max_tokens ends the request), so one pass is too."""

    lock = threading.Lock()  # one tokenizer for every request thread of a level: a fast tokenizer is not re-entrant

    def count(texts: Sequence[str], check: Callable[[], None]) -> list[int]:
        ends = list(itertools.accumulate(len(text) for text in texts))
        counts = [0] * len(texts)
        with lock:
            check()  # the lock may have been waited for past the deadline: not one tokenization more then
            offsets = tokenizer.encode("".join(texts), add_special_tokens=False).offsets  # character offsets
        for _start, end in offsets:
            counts[min(bisect.bisect_left(ends, end), len(texts) - 1)] += 1
        return counts

    return count


def load_chunk_counter(name: str) -> ChunkCounter:
    """'embedded' (the SmolLM2 tokenizer of the local model) or a local folder holding a fast tokenizer's
    tokenizer.json, read by the `tokenizers` library alone: a client's process needs neither torch nor transformers."""
    from tokenizers import Tokenizer

    if name == "embedded":
        folder = embedded_folder()
        if not (folder / "tokenizer.json").is_file():
            from explorer.models.loading import ensure_embedded_converted  # once: the GGUF converted (imports torch)

            folder = ensure_embedded_converted()
    else:
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise BadInput(f"Tokenizer folder '{name}' does not exist: pass 'embedded' or a local folder.")
    path = folder / "tokenizer.json"
    if not path.is_file():  # is_file: a regular file, never a FIFO or a device
        raise BadInput(f"'{name}' holds no tokenizer.json: chunk offsets need a fast tokenizer's file.")
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        raise BadInput(f"{path.name} in '{name}' is over {MAX_TOKENIZER_BYTES >> 20} MiB: not a tokenizer.")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the Rust library raises a bare Exception for any unreadable file
        raise BadInput(f"No tokenizer could be loaded from '{name}': {one_line(exc)}") from exc
    return tokenizer_chunk_counter(tokenizer)
