"""B prompts decoded together, greedy, in one KV cache of batch B: the batched loop the batching lab sweeps and
static batching (the scheduling lab's baseline) serves.

Two paths:
- prompts of one length need no padding: `run_batched` drives the engine's `LiveRequest` with `batch_rows`, so every
  sequence keeps its own positions and causal mask and every step is a timed `PassRecord`;
- prompts of different lengths go through `PaddedBatch`: left padding, an attention mask that hides it, and positions
  counted from each row's first real token.
Either way the batch computes what the solo runs compute, up to float rounding of the batched matmuls (the labs check
it, and name a token that differs with the reason).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from explorer.core.engine import (
    UNWATCHED,
    LiveRequest,
    OnPass,
    Request,
    check_request,
    new_cache,
    run_to_end,
    warm_up_shapes,
)
from explorer.core.loaded_model import LoadedModel
from explorer.core.timing import synchronize
from explorer.core.trace import DeviceProfile, Sampling


# --- prompts of one length: the engine's own ladder at batch B -------------------------------------------------------
def run_batched(
    lm: LoadedModel, device: DeviceProfile, rows: list[list[int]], new_tokens: int, on_pass: OnPass = UNWATCHED
) -> LiveRequest:
    """One prefill of all B rows (one length), then decode steps for all of them, through the engine's timed step
    (`run_to_end`), greedy, EOS ignored; `on_pass` follows every step (a lab hands the device on there, the batch's
    clock paused). The batch's shapes run untimed first unless this process has run them (`warm_up_shapes`)."""
    request = Request(prompt="", max_new_tokens=new_tokens, stop_at_eos=False, sampling=Sampling())
    checked = check_request(lm, request, rows[0])
    warm_up_shapes(lm, checked, rows)
    return run_to_end(LiveRequest(lm, checked, device, request.sampling, batch_rows=rows), on_pass)


# --- prompts of different lengths: left padding ----------------------------------------------------------------------
@torch.inference_mode()
def padded_forward(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: object,
) -> torch.Tensor:
    # input_ids, position_ids: (B, T), T = 1 for a decode; attention_mask: (B, T_cache + T) -> logits (B, vocab)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,  # only the last position's logits pick the next token
    )
    return out.logits[:, -1, :]


def prompt_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    # attention_mask: (B, T), left-padded -> (B, T): each row counts from its first real token (padding at 0)
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


class PaddedBatch:
    """B greedy prompts of any lengths in one batch: left-padded so every row's last prompt token is the last
    position, an attention mask that hides the padding, positions counted from each row's first real token, so each
    row computes what it would alone (up to float rounding). `step()` is one forward for every row."""

    def __init__(self, lm: LoadedModel, rows: Sequence[Sequence[int]]) -> None:
        self.model, self.device = lm.model, lm.torch_device
        longest = max(len(row) for row in rows)
        pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0  # masked: any id works
        input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)  # (B, T)
        for r, row in enumerate(rows):
            input_ids[r, longest - len(row) :] = torch.tensor(list(row))
            attention_mask[r, longest - len(row) :] = 1
        self.input_ids, self.attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        self.cache = new_cache(lm.model)
        self.positions = self.attention_mask.sum(-1, keepdim=True)  # (B, 1): the next position of every row
        self.next_ids: torch.Tensor | None = None  # (B, 1): the tokens the last step picked

    def step(self) -> list[int]:
        """The prefill first, then one decode per call: every row's next greedy token, once the device is done."""
        if self.next_ids is None:  # the prefill: every prompt position into the empty cache
            ids, positions = self.input_ids, prompt_positions(self.attention_mask)  # (B, T) each
        else:  # a decode: one new token per row, finished rows included (a fixed batch)
            ids, positions = self.next_ids, self.positions  # (B, 1) each
            assert ids.shape[-1] == 1, "a decode pass computes exactly one new token per row"
            ones = self.attention_mask.new_ones((self.attention_mask.shape[0], 1))
            self.attention_mask = torch.cat([self.attention_mask, ones], dim=-1)  # (B, T_cache + 1)
            self.positions = self.positions + 1
        logits = padded_forward(self.model, ids, self.attention_mask, positions, self.cache)
        self.next_ids = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        synchronize(self.device)
        return [int(t) for t in self.next_ids[:, 0].tolist()]
