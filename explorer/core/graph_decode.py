"""The KV cache a request decodes on, per decode path: a growing DynamicCache, a StaticCache, or a StaticCache whose
one-token decode step is replayed as a captured CUDA graph.

- "eager": transformers' DynamicCache, grown by concatenation; the engine's own forwards.
- "static": `StaticCache(config=..., max_cache_len=capacity)`: every position reserved before the prefill, each pass
  writing its new positions in place; the same forwards. It runs anywhere (a CPU too), and is rarely faster there.
- "graph" (CUDA only): the same static cache, with its decode step captured once as a CUDA graph (`CapturedDecode`)
  and replayed: one launch for the whole step instead of one per kernel, so a small-batch decode stops paying the
  host's launch overhead and moves toward its weight-read floor. This is why servers capture graphs.

How the capture works on transformers 5.23 (the recipe verified on an H200: tokens equal eager's): two warm-up calls
on a side stream, then `torch.cuda.graph` around `model(token, past_key_values=cache, use_cache=True)`, with the input
token copied into a static tensor before each replay. Positions need no input: a static layer counts its positions in
a device tensor (`cumulative_length`) that the captured step itself advances in place, and builds the mask and
positions from it. A sliding static layer also keeps a host-side count a replay cannot advance, and a mixture of
experts routes on the host: neither is captured (`graph_refusal`). A graph holds the addresses of the cache it was
captured on, so the two live and are leased together (`GraphPool`), kept for the loaded model's life.

The step a graph captures is, where torch.compile works (CUDA with Triton), the model's forward compiled by inductor
for the cache's fixed shapes: norms, rotary embeddings and activations fused into fewer, larger kernels. On an H200 the
plain capture of transformers' forward left SmolLM2-135M's shape at 3.4 ms a pass against 2.3 ms for transformers' own
compiled static path: a graph removes the launches, not the kernels. `EXPLORER_GRAPH_COMPILE=0` captures the forward as
it is, and so does a model whose compile fails (said once).

What is captured (and compiled) is the model with each layer's q/k/v projections as one matmul and gate/up as one
(`explorer.core.fused`: a Llama's own layers; other models unfused, `GraphPool.why_unfused` says why):
fewer, larger kernels for the same bytes. `EXPLORER_GRAPH_FUSE=0` captures the unfused projections.

Nothing here imports torch.cuda at import time: on a CPU the static path runs and the graph path is refused in one
line.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from explorer.core.errors import RunFailed, one_line
from explorer.core.fused import FUSE_ENV, fuse_refusal, fuse_wanted, fused_model
from explorer.core.model_info import ModelInfo
from explorer.core.roofline import CacheLayout
from explorer.core.trace import DecodePath

CAPACITY_STEP = 256  # a static cache's positions are rounded up to a multiple: nearby lengths share one graph
GRAPH_WARMUP_CALLS = 2  # on a side stream before capture: lazy kernel set-up must not be captured
MAX_IDLE_GRAPHS = 8  # per loaded model; beyond it the least recently used shape is dropped (its cache's memory too)
COMPILE_ENV = "EXPLORER_GRAPH_COMPILE"  # "0": capture transformers' forward as it is, uncompiled

Say = Callable[[float, str], None]  # progress: (fraction, what is happening)


@dataclass(frozen=True)
class CacheShape:
    """What a static cache and a captured graph are made for: sequences decoded together, positions reserved."""

    batch: int
    capacity: int


def static_capacity(positions: int, max_context: int) -> int:
    """Positions a static cache reserves for a request that reaches `positions`: rounded up to CAPACITY_STEP, so
    requests of nearby lengths share one captured graph, never past the model's context."""
    return min(max_context, -(-positions // CAPACITY_STEP) * CAPACITY_STEP)


def graph_refusal(info: ModelInfo, device: torch.device) -> str | None:
    """Why this model cannot decode on a captured CUDA graph here, in one line; None when it can."""
    if device.type != "cuda":
        return (
            f"CUDA graphs need a CUDA GPU and this model runs on {device.type}: choose the static or eager decode path."
        )
    if info.sliding_layers:
        return (
            "This model's sliding-window layers keep a host-side position count that a replayed CUDA graph cannot "
            "advance: choose the static or eager decode path."
        )
    if info.experts is not None:
        return (
            "This mixture of experts routes tokens with host-side decisions that a CUDA graph cannot replay: choose "
            "the static or eager decode path."
        )
    return None


def cache_layout_of(decode_path: DecodePath) -> CacheLayout:
    """The layout each decode path runs on, as the cost model counts its traffic: the eager path grows a DynamicCache
    by concatenation; the static and graph paths write into a StaticCache."""
    return "concatenating" if decode_path == "eager" else "static"


def default_decode_path(info: ModelInfo, device: torch.device) -> DecodePath:
    """Graphs where they can run (CUDA, a model they can capture), else the eager path."""
    return "graph" if graph_refusal(info, device) is None else "eager"


def new_static_cache(model: nn.Module, shape: CacheShape) -> object:
    """A StaticCache for `shape`, its tensors allocated now (not inside the first timed pass)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=shape.capacity)
    config = model.config.get_text_config()
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    weight = next(model.parameters())
    if not getattr(config, "kv_lora_rank", None):  # a latent (MLA) cache has other widths: allocated at its prefill
        cache.early_initialization(shape.batch, heads, head_dim, weight.dtype, weight.device)
    return cache


def tensor_bytes(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.numel() * tensor.element_size()


def growing_layer_bytes(cache: object) -> tuple[int, ...]:
    """Bytes of a growing cache's real K and V tensors, layer by layer. A sliding-window layer's tensors are views of
    the last window - 1 positions of the tensor its update concatenated: until the next pass, the memory behind them
    is that whole tensor (after a long prefill, every prompt position; tests/test_architectures_matrix.py shows it)."""
    return tuple(tensor_bytes(getattr(layer, "keys", None)) + tensor_bytes(layer.values) for layer in cache.layers)


def static_layer_bytes(cache: object, positions: int) -> tuple[int, ...]:
    """Bytes a static cache holds after `positions` have gone in, layer by layer: the written positions of its
    reserved tensors (a sliding layer holds at most its window)."""
    held = []
    for layer in cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is None:
            held.append(0)
            continue
        written = min(positions, keys.shape[-2])  # (B, kv_heads, capacity, head_dim)
        held.append(tensor_bytes(keys[:, :, :written]) + tensor_bytes(values[:, :, :written]))
    return tuple(held)


def compile_wanted() -> bool:
    """Whether a graph captures inductor's kernels: torch.compile needs Triton for CUDA, and can be switched off."""
    return os.environ.get(COMPILE_ENV, "1") != "0" and importlib.util.find_spec("triton") is not None


def compiled_forward(model: nn.Module) -> Callable[..., object]:
    """The model's forward for one fixed-shape decode step, compiled by inductor (lazily: on its first call). No CUDA
    graphs of inductor's own: the step is captured here, around the compiled kernels."""
    return torch.compile(model.__call__, fullgraph=True, dynamic=False, mode="default")


class CapturedDecode:
    """A static cache for `shape` and the one-token decode step captured on it as a CUDA graph: `replay` copies the
    token in, replays every kernel of the step in one launch and returns the step's logits (valid until the next
    replay). `step` is what is captured (the model's forward, or its compiled form); a compiled step that fails on its
    warm-up calls is replaced by the model's own forward (`compiled` False, `why_uncompiled` says why). The cache is
    empty after construction: the warm-up calls' positions are cleared."""

    def __init__(self, model: nn.Module, shape: CacheShape, step: Callable[..., object] | None = None) -> None:
        self.shape = shape
        self.compiled, self.why_uncompiled = step is not None, ""
        device = next(model.parameters()).device
        with torch.inference_mode():
            self.cache = new_static_cache(model, shape)
            self.token = torch.zeros((shape.batch, 1), dtype=torch.long, device=device)  # (B, 1): the replay's input
            try:
                self._warm(step or model, device)
            except RuntimeError as exc:  # inductor or dynamo could not compile this model's step: capture it as is
                if step is None:
                    raise
                self.compiled, self.why_uncompiled, step = False, one_line(exc), None
                self.cache.reset()
                self._warm(model, device)
            self.cache.reset()  # the warm-up calls wrote positions: zero them and the position counters, in place
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                run = step or model
                self.logits = run(input_ids=self.token, past_key_values=self.cache, use_cache=True).logits[:, -1, :]
            self.cache.reset()
        torch.cuda.synchronize(device)

    def _warm(self, step: Callable[..., object], device: torch.device) -> None:
        """GRAPH_WARMUP_CALLS of `step` on a side stream: lazy set-up (cuBLAS handles, workspaces, a compile) happens
        here, not inside the capture."""
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_CALLS):
                step(input_ids=self.token, past_key_values=self.cache, use_cache=True)
        torch.cuda.current_stream(device).wait_stream(side)

    def replay(self, input_ids: torch.Tensor) -> torch.Tensor:
        # input_ids: (B, 1) -> logits (B, vocab): the captured step on this cache, at the position it has reached
        self.token.copy_(input_ids)
        self.graph.replay()
        return self.logits


@torch.inference_mode()
def replay_decode(_model: nn.Module, input_ids: torch.Tensor, captured: CapturedDecode) -> torch.Tensor:
    # input_ids: (B, 1) -> logits (B, vocab); the model's kernels are inside the graph, its cache is the graph's.
    assert input_ids.shape[-1] == 1, "a decode pass computes exactly one new token"
    return captured.replay(input_ids)


class GraphPool:
    """The captured decode steps of one loaded model, by shape, kept for the model's life (a server's model store
    keeps the model): a shape is captured once. A request leases one for its whole life, since its KV cache is the
    graph's; a second request of the same shape at the same time (a stepped request between clicks) gets its own."""

    def __init__(self, compile_steps: bool | None = None, fuse_steps: bool | None = None) -> None:
        self._idle: dict[CacheShape, list[CapturedDecode]] = {}  # insertion order: least recently given back first
        self._lock = threading.Lock()
        self.captures = 0  # how many graphs this pool has captured
        self.compile_steps = compile_wanted() if compile_steps is None else compile_steps
        self._step: Callable[..., object] | None = None  # the compiled forward, made once per model
        self.why_uncompiled = ""  # set when a compile failed: later shapes are captured uncompiled
        self.fuse_steps = fuse_wanted() if fuse_steps is None else fuse_steps
        self._fused: nn.Module | None = None  # the model with fused projections (or the model), made once
        self.why_unfused = ""  # set when the model's projections could not be fused

    def _target_for(self, model: nn.Module) -> nn.Module:
        """What a graph captures: the model with its q/k/v and gate/up projections fused (`explorer.core.fused`), made
        once per model; the model itself where fusing is off or refused (`why_unfused` says why)."""
        with self._lock:
            if self._fused is None:
                refusal = fuse_refusal(model) if self.fuse_steps else f"{FUSE_ENV}=0"
                self.why_unfused = refusal or ""
                self._fused = model if refusal else fused_model(model)
            return self._fused

    def _step_for(self, model: nn.Module) -> Callable[..., object] | None:
        with self._lock:
            if not self.compile_steps or self.why_uncompiled:
                return None
            if self._step is None:
                self._step = compiled_forward(model)
            return self._step

    def lease(self, model: nn.Module, shape: CacheShape, progress: Say | None = None) -> CapturedDecode:
        with self._lock:
            idle = self._idle.get(shape)
            if idle:
                leased = idle.pop()
                if not idle:
                    del self._idle[shape]
                return leased
        model = self._target_for(model)  # fused projections where the model allows
        step = self._step_for(model)
        if progress is not None:
            how = (
                "its kernels compiled by torch.compile first (once per shape: tens of seconds the first time)"
                if step is not None
                else "once per shape: the first capture of a shape takes a few seconds"
            )
            positions = f"{shape.batch} x {shape.capacity} cache positions"
            progress(0.6, f"Capturing the decode step as a CUDA graph for {positions}, {how}…")
        try:
            captured = CapturedDecode(model, shape, step)
        except RuntimeError as exc:  # a kernel that cannot be captured (a host sync inside the forward)
            raise RunFailed(
                f"Capturing the decode step as a CUDA graph failed ({one_line(exc)}): run with the static or eager "
                "decode path."
            ) from exc
        with self._lock:
            self.captures += 1
            if step is not None and not captured.compiled:
                self.why_uncompiled = captured.why_uncompiled
        return captured

    def give_back(self, captured: CapturedDecode) -> None:
        with torch.inference_mode():  # the cache's tensors were made in inference mode: changed only there
            captured.cache.reset()  # in place: the graph keeps the same addresses
        with self._lock:
            self._idle.setdefault(captured.shape, []).append(captured)
            self._idle[captured.shape] = self._idle.pop(captured.shape)  # most recently used last
            while sum(len(kept) for kept in self._idle.values()) > MAX_IDLE_GRAPHS:
                oldest = next(iter(self._idle))
                self._idle[oldest].pop(0)
                if not self._idle[oldest]:
                    del self._idle[oldest]

    def idle_shapes(self) -> list[CacheShape]:
        with self._lock:
            return [shape for shape, kept in self._idle.items() for _ in kept]


class KvCache:
    """A request's KV cache on its decode path: the transformers cache the forwards write (`cache`), what it holds
    and what it reserves, and on the graph path the captured step (`graph`, leased from the model's pool and given
    back by `close`)."""

    def __init__(
        self,
        path: DecodePath,
        cache: object,
        capacity: int | None = None,
        lease: tuple[GraphPool, CapturedDecode] | tuple[()] = (),
    ) -> None:
        self.path, self.cache, self.capacity = path, cache, capacity
        self._lease = lease
        self.graph: CapturedDecode | None = lease[1] if lease else None

    @property
    def length(self) -> int:
        """Positions written so far (a static layer counts them in a device tensor: read after the pass, untimed)."""
        return int(self.cache.get_seq_length())

    def layer_bytes(self) -> tuple[int, ...]:
        """What each layer holds now (measured from the tensors)."""
        if self.capacity is None:
            return growing_layer_bytes(self.cache)
        return static_layer_bytes(self.cache, self.length)

    def allocated_bytes(self) -> int | None:
        """What the cache's tensors reserve (measured); None for a growing cache, which reserves what it holds."""
        if self.capacity is None:
            return None
        return sum(
            tensor_bytes(getattr(layer, "keys", None)) + tensor_bytes(getattr(layer, "values", None))
            for layer in self.cache.layers
        )

    @property
    def rewindable(self) -> bool:
        """Whether `rewind_one` can undo a pass: not on a sliding static layer (a host-side count, a rolled window)."""
        return self.capacity is None or not any(getattr(layer, "is_sliding", False) for layer in self.cache.layers)

    def rewind_one(self) -> None:
        """Forget the last position written (step mode's untimed twin of a pass)."""
        assert self.rewindable, "a sliding static layer cannot forget a position"
        if self.capacity is None:
            self.cache.crop(-1)  # transformers 5: a negative count drops that many positions from the end
            return
        with torch.inference_mode():  # a graph's cache was made in inference mode: changed only there
            for layer in self.cache.layers:
                layer.cumulative_length.sub_(1)  # the next write lands on the same position, overwriting it

    def close(self) -> None:
        """Give a leased graph (and its cache) back to the model's pool; a plain cache is simply dropped."""
        if self._lease:
            pool, captured = self._lease
            self._lease, self.graph = (), None
            pool.give_back(captured)


def open_kv(
    model: nn.Module, path: DecodePath, shape: CacheShape, pool: GraphPool, progress: Say | None = None
) -> KvCache:
    """A fresh, empty cache for one request on `path` (the graph path leases a captured step from `pool`)."""
    if path == "eager":
        from transformers import DynamicCache

        return KvCache(path, DynamicCache(config=model.config))  # one cache per request, never stored on the model
    if path == "static":
        return KvCache(path, new_static_cache(model, shape), shape.capacity)
    captured = pool.lease(model, shape, progress)
    return KvCache(path, captured.cache, shape.capacity, (pool, captured))
