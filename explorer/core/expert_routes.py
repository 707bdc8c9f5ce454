"""Which experts a mixture-of-experts pass really used: read from every router's own output (its chosen indices), for
every token of the pass, by forward hooks that live for one pass and see only the thread that set them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from explorer.core.loaded_model import Router, routers


@dataclass
class RoutingRecord:
    """The experts each MoE layer's router chose in one pass: per layer (in layer order), a (tokens, k) index tensor."""

    chosen: list[torch.Tensor | None] = field(default_factory=list)

    @property
    def experts_chosen(self) -> tuple[tuple[int, ...], ...]:
        """Per MoE layer, the distinct experts chosen for any token of the pass, sorted."""
        return tuple(() if c is None else tuple(sorted(set(c.flatten().tolist()))) for c in self.chosen)

    @property
    def experts_touched(self) -> tuple[int, ...]:
        return tuple(len(ids) for ids in self.experts_chosen)


def chosen_indices(output: object) -> torch.Tensor | None:
    """The router's chosen expert indices: the integer tensor among its outputs (transformers' top-k routers return
    (logits, scores, indices)). None when the router returns no indices: then nothing is guessed."""
    items = output if isinstance(output, tuple | list) else (output,)
    for item in items:
        if isinstance(item, torch.Tensor) and not item.is_floating_point() and item.dtype != torch.bool:
            return item
    return None


@contextmanager
def recording_routes(model: nn.Module, layers: list[Router] | None = None) -> Iterator[RoutingRecord]:
    """Hook every router for the duration of one pass; the record fills as the forward runs. A dense model yields an
    empty record and costs nothing. Hooks fire only for the thread that set them: another session's forward on the
    same shared model is not counted."""
    found = routers(model) if layers is None else layers
    record = RoutingRecord(chosen=[None] * len(found))
    owner = threading.get_ident()

    def hook_for(i: int):  # noqa: ANN202 - a torch forward hook
        def hook(module: nn.Module, args: object, output: object) -> None:
            if threading.get_ident() != owner:
                return
            indices = chosen_indices(output)
            if indices is not None:
                indices = indices.detach().reshape(-1, indices.shape[-1])  # (tokens, k), left on the device: no sync
                previous = record.chosen[i]
                record.chosen[i] = indices if previous is None else torch.cat([previous, indices])

        return hook

    handles = [r.router.register_forward_hook(hook_for(i)) for i, r in enumerate(found)]
    try:
        yield record
    finally:
        for handle in handles:
            handle.remove()
