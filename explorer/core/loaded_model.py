"""A loaded model ready to run (`LoadedModel`: the module, its tokenizer and its `ModelInfo`), and what its own objects
say about its layers: each layer's attention window (from the transformers cache it builds), what its cache holds per
position (from the cache's own tensors), its mixture-of-experts routers and experts (from its modules), and the kernel
its attention runs on."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from explorer.core.graph_decode import GraphPool
from explorer.core.model_info import DTYPE_NAMES, ExpertsInfo, ModelInfo
from explorer.core.warm_shapes import WarmShapes

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


@dataclass
class LoadedModel:
    """A model ready to run, with its tokenizer and the numbers the formulas need."""

    model: nn.Module
    tokenizer: object
    info: ModelInfo
    torch_device: torch.device
    eos_token_ids: frozenset[int]
    load_s: float
    # Kept for the model's life, shared by every session that runs it: the shapes its passes have run (a warm-up runs
    # only what a request adds) and its captured decode graphs, one per cache shape.
    warmed: WarmShapes = field(default_factory=WarmShapes)
    graphs: GraphPool = field(default_factory=GraphPool)
    # Its eager twin for the attention replay (`explorer.core.attention.EagerTwin`): made on first use, then kept.
    eager: object | None = field(default=None, repr=False)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


ROUTER_OUTPUT = "router_logits"  # the key transformers' MoE models record their routers under (`_can_record_outputs`)


def layer_windows(model: nn.Module) -> tuple[int, ...]:
    """Per layer, the sliding window the model's own DynamicCache applies (0: full attention). Read from the cache
    object transformers builds from the config (what `layer_types`, `sliding_window` mean to the cache), not
    re-derived from the config's fields."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    return tuple(
        int(getattr(layer, "sliding_window", 0)) if getattr(layer, "is_sliding", False) else 0 for layer in cache.layers
    )


@dataclass(frozen=True)
class Router:
    """One MoE layer: its router module (whose outputs name the chosen experts) and its experts module."""

    name: str
    router: nn.Module
    experts: nn.Module
    n_experts: int
    top_k: int


def router_class(model: nn.Module) -> type[nn.Module] | None:
    """The router module class transformers itself hooks to record router logits, if the model has one."""
    recorders = getattr(model, "_can_record_outputs", None) or {}
    recorder = recorders.get(ROUTER_OUTPUT)
    target = getattr(recorder, "target_class", None)
    return target if isinstance(target, type) else None


def routers(model: nn.Module) -> list[Router]:
    """Every MoE layer's router, in layer order, with the experts module beside it (the router's sibling named
    `experts`). Empty for a dense model, and for an MoE whose router or experts are not laid out this way."""
    kind = router_class(model)
    if kind is None:
        return []
    modules = dict(model.named_modules())
    found = []
    for name, module in modules.items():
        if not isinstance(module, kind):
            continue
        parent = modules.get(name.rpartition(".")[0])
        experts = getattr(parent, "experts", None)
        n_experts = getattr(module, "num_experts", None)
        top_k = getattr(module, "top_k", None)
        if not isinstance(experts, nn.Module) or not isinstance(n_experts, int) or not isinstance(top_k, int):
            return []
        found.append(Router(name, module, experts, n_experts, top_k))
    return found


def experts_info(model: nn.Module) -> ExpertsInfo | None:
    """n experts, top-k and the size of one expert, from the loaded modules; None for a dense model."""
    found = routers(model)
    if not found:
        return None
    first = found[0]
    params = sum(p.numel() for p in first.experts.parameters())
    bytes_ = sum(p.numel() * p.element_size() for p in first.experts.parameters())
    return ExpertsInfo(
        n_experts=first.n_experts,
        experts_per_token=first.top_k,
        moe_layers=len(found),
        expert_params=params // first.n_experts,
        expert_bytes=bytes_ // first.n_experts,
    )


def expert_linear_params(model: nn.Module) -> int:
    """Weights of linear layers inside expert modules (older layouts keep one nn.Linear per expert): these are counted
    as experts, not as the dense matmuls every token runs."""
    from transformers.pytorch_utils import Conv1D

    return sum(
        m.weight.numel() for r in routers(model) for m in r.experts.modules() if isinstance(m, nn.Linear | Conv1D)
    )


def attention_kernel(model: nn.Module) -> str:
    """The attention implementation the loaded model runs: "sdpa" or "eager" (or another transformers names)."""
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek V2/V3): the widths its modules use and what its cache really holds."""

    qk_head_dim: int  # per query head in QKᵀ: qk_nope_head_dim + qk_rope_head_dim
    v_head_dim: int  # per query head in SV
    cache_key_width: int  # values per position in the cache's key tensor (all its heads), read from the tensor
    cache_value_width: int  # values per position in the cache's value tensor (all its heads), read from the tensor
    expand_params: int  # kv_b_proj's weights when the cache holds the latent (expanded each pass); 0 otherwise


def latent_attention_module(model: nn.Module) -> nn.Module | None:
    """The first attention module laid out as multi-head latent attention (a kv_b_proj that expands a kv_lora_rank
    latent into per-head K and V), None for any other model."""
    for module in model.modules():
        if isinstance(getattr(module, "kv_b_proj", None), nn.Linear) and all(
            isinstance(getattr(module, name, None), int)
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        ):
            return module
    return None


def cache_widths(model: nn.Module) -> tuple[int, int]:
    """Values per position in layer 0's cached key and value tensors (heads x last dim), from a one-token forward
    into a fresh DynamicCache: what the cache really holds, whatever the config's head_dim says."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    device = next(model.parameters()).device
    with torch.inference_mode():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), past_key_values=cache, use_cache=True)
    keys, values = cache.layers[0].keys, cache.layers[0].values
    return keys.shape[1] * keys.shape[-1], values.shape[1] * values.shape[-1]


def latent_attention(model: nn.Module) -> LatentAttention | None:
    """The model's latent attention, its cache measured, or None where attention is per-head K and V.

    transformers 5 caches DeepSeek's MLA compressed: the key slot holds the kv_lora_rank latent and the value slot the
    shared rotary key (qk_rope_head_dim), one "head" each, and every pass expands all the cached positions with
    kv_b_proj. Another model with the same modules might cache the expanded K and V instead: the widths come from the
    tensors, and kv_b_proj counts as an expansion of the cache only where the key slot holds the latent."""
    module = latent_attention_module(model)
    if module is None:
        return None
    key_width, value_width = cache_widths(model)
    latent = key_width == module.kv_lora_rank
    return LatentAttention(
        qk_head_dim=module.qk_nope_head_dim + module.qk_rope_head_dim,
        v_head_dim=module.v_head_dim,
        cache_key_width=key_width,
        cache_value_width=value_width,
        expand_params=module.kv_b_proj.weight.numel() if latent else 0,
    )
