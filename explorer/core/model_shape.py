"""What a loaded model's own objects say about its layers: each layer's attention window (from the transformers cache
it builds), its mixture-of-experts routers and experts (from its modules), and the kernel its attention runs on."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from explorer.core.profiles import ExpertsInfo

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
