"""transformers' own greedy generate() on the same prompt ids, end-of-text ignored: the reference the explorer's tokens
are held against (doctor, bench and the tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from explorer.core.loaded_model import LoadedModel


def generate_tokens(
    lm: LoadedModel,
    prompt_ids: Sequence[int],
    new_tokens: int,
    streamer: object | None = None,
    cache: str | None = None,
) -> tuple[int, ...]:
    """The `new_tokens` ids transformers' greedy loop makes after `prompt_ids` (EOS ignored, as the explorer's runs
    ignore it, so both make exactly `new_tokens`). `streamer`: sees each token as it is made (bench times them);
    `cache`: generate()'s `cache_implementation` (None: its default DynamicCache)."""
    ids = torch.tensor([list(prompt_ids)], device=lm.torch_device)
    with torch.inference_mode():
        out = lm.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            do_sample=False,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
            streamer=streamer,
            cache_implementation=cache,
        )
    return tuple(int(t) for t in out[0, ids.shape[1] :].tolist())
