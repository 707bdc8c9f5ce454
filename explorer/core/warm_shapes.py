"""What a loaded model has already run, shape by shape, so that a warm-up runs only the shapes a request adds.

Why shapes: on a GPU the first pass of a new shape pays for things the later ones reuse (the caching allocator's new
segments as the KV cache grows past any size seen, kernel choices and lazy module loads for a new prompt length), so
the first timed repeat of a process came out 3x slow after a warm-up of 8 tokens. A request's shapes are its decode
path and cache (batch, reserved positions), its prompt length (the prefill's matmuls) and the cache lengths its
decodes reach. What ran is forgotten when the device's allocator has given memory back since (`reserved_bytes`
below what it held after the warm-up: the device microbenchmarks empty the CUDA cache). Pure Python and thread-safe:
sessions of one server share a loaded model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


def warm_device_needs_new_shapes(device_type: str) -> bool:
    """Whether a device that other passes left warm a moment ago still needs a new shape warmed before it is timed: a
    GPU does (a new cache size grows the caching allocator's segments), a CPU does not (after the generic warm-up a new
    prompt length's first prefill took what its second did there: 107/121, 124/119, 218/216, 318/313 ms)."""
    return device_type != "cpu"


@dataclass(frozen=True)
class RequestShape:
    """The shapes one request's passes run at."""

    decode_path: str
    batch: int
    capacity: int | None  # positions a static cache reserves; None for a growing cache
    prompt_tokens: int
    new_tokens: int

    @property
    def cache_key(self) -> tuple[str, int, int | None]:
        return (self.decode_path, self.batch, self.capacity)


@dataclass(frozen=True)
class WarmUpPlan:
    """The untimed passes that cover a request's shapes: a prefill of its prompt length, then `decodes` one-token
    decodes (up to its last cache length); nothing when both were run before."""

    prefill: bool
    decodes: int

    @property
    def nothing(self) -> bool:
        return not self.prefill and not self.decodes


class WarmShapes:
    """The prompt lengths prefilled and the cache lengths decoded to, per decode path and cache, in this process."""

    def __init__(self) -> None:
        self._prefilled: set[tuple[tuple[str, int, int | None], int]] = set()
        self._decoded_to: dict[tuple[str, int, int | None], int] = {}
        self._reserved_bytes = 0  # the device allocator's reserve after the last warm-up (0 on a CPU)
        self._lock = threading.Lock()

    def plan(self, shape: RequestShape, decodes_wanted: int, reserved_bytes: int = 0) -> WarmUpPlan:
        """What `shape` adds to what ran, warming `decodes_wanted` decodes after its prefill (every one of its decodes
        on a GPU): those decodes if they reach a cache length never decoded at (they start at its own prompt, so its
        prefill runs too), else only its prefill if that length is new. Everything, if the allocator now reserves less
        than after the last warm-up (`reserved_bytes`): its blocks were given back."""
        decodes_wanted = max(0, min(decodes_wanted, shape.new_tokens - 1))
        with self._lock:
            if reserved_bytes < self._reserved_bytes:
                self._prefilled.clear()
                self._decoded_to.clear()
            decoded_to = self._decoded_to.get(shape.cache_key, 0)
            prefilled = (shape.cache_key, shape.prompt_tokens) in self._prefilled
        decodes = decodes_wanted if shape.prompt_tokens + decodes_wanted > decoded_to else 0
        return WarmUpPlan(prefill=decodes > 0 or not prefilled, decodes=decodes)

    def prefilled(self, shape: RequestShape) -> bool:
        """Whether this process has prefilled `shape`'s prompt length on its decode path and cache."""
        with self._lock:
            return (shape.cache_key, shape.prompt_tokens) in self._prefilled

    def ran(self, shape: RequestShape, decodes_done: int, reserved_bytes: int = 0) -> None:
        """Record that a warm-up of `shape` has just run its prefill and `decodes_done` decodes, and what the
        allocator reserves after it."""
        with self._lock:
            self._reserved_bytes = reserved_bytes
            self._prefilled.add((shape.cache_key, shape.prompt_tokens))
            reached = shape.prompt_tokens + decodes_done
            self._decoded_to[shape.cache_key] = max(self._decoded_to.get(shape.cache_key, 0), reached)
