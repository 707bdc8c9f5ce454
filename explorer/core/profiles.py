"""What the roofline formulas divide by: the loaded model's shapes and bytes (`ModelInfo`) and the device's peak
compute and bandwidth (`DeviceProfile`), each device figure with where it came from. Parts of every `Trace`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["measured", "spec", "nvml", "modelled", "achieved"]  # achieved: by a pass of the run itself
# The copy figure counts bytes read plus bytes written, as STREAM's copy does; the read figure counts each byte a
# read-only stream (a reduction) reads, once. The roofline divides the bytes a pass only reads (weights, KV reads) by
# the read figure and the bytes it writes (the KV cache's update) by the copy figure, so each division counts alike.
BANDWIDTH_COUNTS = "read + write"
READ_BANDWIDTH_COUNTS = "read only"


@dataclass(frozen=True)
class ExpertsInfo:
    """A mixture-of-experts model's routing, read from its loaded router and expert modules."""

    n_experts: int  # experts per MoE layer
    experts_per_token: int  # k: the router's top-k
    moe_layers: int  # layers with a router
    expert_params: int  # parameters of one expert in one layer
    expert_bytes: int  # bytes of one expert in one layer

    @property
    def all_expert_params(self) -> int:
        return self.n_experts * self.moe_layers * self.expert_params

    @property
    def all_expert_bytes(self) -> int:
        return self.n_experts * self.moe_layers * self.expert_bytes


class LayerWindows:
    """Every layer's sliding window, how many layers slide and the positions each holds, for a dataclass with `layers`
    and `layer_windows` fields: the loaded model (`ModelInfo`) and an At-scale config
    (`explorer.scale.config.Architecture`)."""

    layers: int
    layer_windows: tuple[int, ...]  # empty: every layer attends to every position

    @property
    def windows(self) -> tuple[int, ...]:
        """Every layer's sliding window, 0 for a full-attention layer."""
        return self.layer_windows or (0,) * self.layers

    @property
    def sliding_layers(self) -> int:
        return sum(1 for w in self.windows if w)

    def kv_positions_held(self, layer: int, positions: int) -> int:
        """Positions a layer's cache keeps after `positions` have gone in: a sliding layer keeps the last window - 1
        (transformers' DynamicSlidingWindowLayer: the next query brings the window's last position itself). The one
        rule for the live run and At scale alike."""
        window = self.windows[layer]
        return min(positions, window - 1) if window else positions


@dataclass(frozen=True)
class ModelInfo(LayerWindows):
    """What the loaded model is, with the numbers the formulas need."""

    name: str  # what the user asked for ("embedded", a hub id or a folder)
    display_name: str
    architecture: str  # e.g. "LlamaForCausalLM"
    params: int  # unique parameters (tied embeddings counted once)
    layers: int
    heads: int  # query heads
    kv_heads: int  # key/value heads (< heads means grouped-query attention)
    head_dim: int
    hidden_size: int
    vocab_size: int
    dtype: str  # "float32" | "bfloat16" | "float16"
    bytes_per_element: int
    weight_bytes: int  # counted from the loaded parameters, tied embeddings once
    matmul_params: int  # weights of the per-token matmuls (all linear layers except the LM head)
    lm_head_params: int
    input_embedding_params: int
    tied_embeddings: bool
    max_context: int
    device: str  # "cpu" | "cuda"
    # Fields below were added later: traces recorded before them load with these defaults (dense, full attention).
    attn_implementation: str = ""  # the kernel the timed passes use: "sdpa" or "eager"; "" in older traces
    layer_windows: tuple[int, ...] = ()  # per layer, the sliding window its cache layer applies (0: full attention),
    # as the transformers cache object reports it; () in older traces: every layer full
    experts: ExpertsInfo | None = None  # mixture of experts, read from the loaded router modules; None: dense
    active_params_per_token: int | None = None  # params a token's forward multiplies by: dense + k experts per MoE
    # layer (= params for a dense model); None in older traces
    # A cache that holds something other than per-head K and V of head_dim (DeepSeek's multi-head latent attention, as
    # transformers caches it: a compressed latent in the key slot, the shared rotary key in the value slot). 0 in every
    # other model and in older traces: then the cache holds kv_heads x head_dim in each slot, and attention reads
    # head_dim per head for both QKᵀ and SV.
    kv_cache_key_width: int = 0  # values per layer and position in the cache's key tensor, all its heads together
    kv_cache_value_width: int = 0  # values per layer and position in the cache's value tensor, all its heads together
    v_head_dim: int = 0  # SV's width per query head where it is not head_dim (MLA: v_head_dim; head_dim is QKᵀ's)
    kv_expand_params: int = 0  # per layer: weights of the linear that expands the cached latent into per-head K and V
    # (MLA's kv_b_proj); it runs on every position attention reads, each pass, not only on the new tokens
    # `shape:NAME`: random weights in a shipped config's shape (explorer.core.shape_model). Timings, bytes and FLOPs
    # are real; the tokens are not meaningful. False in every loaded model and in older traces.
    random_weights: bool = False

    @property
    def shape_note(self) -> str:
        """What a shape model's figures mean, for every page and the CLI's header; "" for a model with its weights."""
        if not self.random_weights:
            return ""
        return (
            "random weights in a shipped config's shape: timings, bytes and FLOPs are real, tokens are not meaningful"
        )

    @property
    def full_layers(self) -> int:
        return self.layers - self.sliding_layers

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head: 2 x layers x kv_heads x head_dim x bytes (a latent cache: its two slots'
        widths instead). What a token adds while every layer still grows; past a sliding window only the full layers
        grow (`kv_bytes_per_token_full_layers`)."""
        return self.layers * self.kv_bytes_per_token_per_layer

    @property
    def latent_cache(self) -> bool:
        """Whether the cache holds a compressed latent (MLA, expanded every pass) rather than per-head K and V."""
        return self.kv_expand_params > 0

    @property
    def cache_key_width(self) -> int:
        """Values per layer and position in the cache's key tensor: kv_heads x head_dim, or the latent's width."""
        return self.kv_cache_key_width or self.kv_heads * self.head_dim

    @property
    def cache_value_width(self) -> int:
        """Values per layer and position in the cache's value tensor: kv_heads x head_dim, or the rotary key's width."""
        return self.kv_cache_value_width or self.kv_heads * self.head_dim

    @property
    def sv_head_dim(self) -> int:
        """Values per head that P @ V multiplies by: head_dim, or MLA's v_head_dim."""
        return self.v_head_dim or self.head_dim

    @property
    def kv_bytes_per_token_full_layers(self) -> int:
        """What one more position adds once every sliding layer holds its window: the full layers' K and V."""
        return self.full_layers * self.kv_bytes_per_token_per_layer

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """One layer's cache for one position: 2 x kv_heads x head_dim x bytes (the two slots' widths in a latent)."""
        return (self.cache_key_width + self.cache_value_width) * self.bytes_per_element

    @property
    def is_gqa(self) -> bool:
        return self.kv_heads < self.heads


@dataclass(frozen=True)
class DeviceProfile:
    """The hardware figures the roofline model divides by, each with where it came from."""

    name: str
    kind: str  # "cpu" | "cuda"
    dtype: str  # the dtype the FLOP/s figures are for
    peak_flops: float  # FLOP/s used by the roofline model
    peak_flops_source: Source
    bandwidth_bytes_per_s: float  # memory bandwidth used by the roofline model
    bandwidth_source: Source
    measured_flops: float | None = None  # achievable: the best of the matmul microbenchmark's repeats
    measured_bandwidth_bytes_per_s: float | None = None  # achievable: the best of the copy's repeats
    memory_bytes: int | None = None
    notes: str = ""
    flops_samples: tuple[float, ...] = ()  # FLOP/s of every timed matmul repeat
    bandwidth_samples: tuple[float, ...] = ()  # B/s of every timed copy repeat
    matmul_n: int | None = None  # the microbenchmark: an n x n by n x n matmul in `dtype`
    copy_bytes: int | None = None  # the microbenchmark: a copy of this many bytes
    bandwidth_counts: str = BANDWIDTH_COUNTS
    measured_at: str = ""  # ISO time the microbenchmarks ran
    busy_note: str = ""  # why the figures were re-taken or raised after a run beat them; empty when they held
    # Read-only bandwidth: what weight and KV reads are divided by. None in traces taken before it was measured:
    # reads then use the copy figure (`read_bandwidth_from_copy`), and the device table and the CLI say so.
    read_bandwidth_bytes_per_s: float | None = None
    read_bandwidth_source: Source | None = None
    measured_read_bandwidth_bytes_per_s: float | None = None  # achievable: the best of the read-only stream's repeats
    read_bandwidth_samples: tuple[float, ...] = ()  # B/s of every timed read-only repeat (bytes read once)
    read_bytes: int | None = None  # the microbenchmark: a reduction reading this many bytes
    # Whether the figures look taken under load (see `figure_trust`): then every bound and ridge from them is marked.
    # Traces from before the judgement open as not flagged, their figures as they were.
    figures_taken_under_load: bool = False
    figures_note: str = ""  # why they look unreliable, and whether they were taken twice; "" when they look sound
    figures_retaken: bool = False  # the first set looked unreliable, so the microbenchmarks ran again after a pause
    benchmark_core_share: float | None = None  # CPU: process CPU time / (wall x threads) over the memory streams

    @property
    def read_bandwidth_from_copy(self) -> bool:
        """A trace from before the read-only figure existed: its reads are divided by the copy figure."""
        return self.read_bandwidth_bytes_per_s is None

    @property
    def effective_read_bandwidth_bytes_per_s(self) -> float:
        """What the roofline divides bytes read by: the read-only figure, else (an older trace) the copy figure."""
        if self.read_bandwidth_bytes_per_s is None:
            return self.bandwidth_bytes_per_s
        return self.read_bandwidth_bytes_per_s

    @property
    def ridge_point_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a pass is compute-bound on this device. Against the read figure: every
        pass reads more bytes than it writes (the weights alone outweigh the KV cache's update)."""
        return self.peak_flops / self.effective_read_bandwidth_bytes_per_s
