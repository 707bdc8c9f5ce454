"""What the loaded model is, with the shapes and bytes the roofline formulas need (`ModelInfo`), its experts and its
layers' sliding windows; part of every `Trace`."""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_NAMES = ("float32", "bfloat16", "float16")  # what a run may ask for, torch-free (the sidebar lists them)
DEVICES = ("auto", "cpu", "cuda")  # where a run may ask to run


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
    # `shape:NAME`: random weights in a shipped config's shape (explorer.models.shape_model). Timings, bytes and FLOPs
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
