"""The two baselines continuous batching is measured against, and the token check against solo greedy runs.

- One at a time: the explorer's own engine (`explorer.engine.generate`) serves each request alone, in arrival order;
  a request that arrives while another is served waits. Its runs are also the solo greedy reference tokens.
- Static batching: wait for the whole batch, prefill every prompt in one padded forward, then decode every row
  until the longest request is done (finished rows keep computing, as in a fixed batch). Until the explorer's
  batched loop (issue 8) lands, `serve_static_batch` is that loop, written here with an attention mask.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from explorer.engine import Request, generate, new_cache, warm_up
from explorer.loading import LoadedModel, Progress
from explorer.schedule import SEQUENTIAL, STATIC, RequestRecord, ServedMode, TokenCheck
from explorer.schedule_workload import PlannedRequest
from explorer.timing import synchronize
from explorer.trace import DeviceProfile, Trace

NEAR_TIE = 0.02  # solo probabilities of the two tokens closer than this: a tie float rounding can flip


# --- one at a time ---------------------------------------------------------------------------------------------------
def solo_request(r: PlannedRequest, stop_at_eos: bool) -> Request:
    return Request(r.prompt_text, max_new_tokens=r.max_new_tokens, use_chat_template=False, stop_at_eos=stop_at_eos)


def solo_traces(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    device: DeviceProfile,
    stop_at_eos: bool,
    on_progress: Progress | None = None,
) -> dict[str, Trace]:
    """Each request alone through the explorer's engine, for its reference tokens (timings unused)."""
    traces = {}
    for k, r in enumerate(planned):
        if on_progress:
            on_progress(k / len(planned), f"Solo greedy reference for {r.id}…")
        request = solo_request(r, stop_at_eos)
        traces[r.id] = generate(lm, request, device, warmup=k == 0, prompt_token_ids=list(r.prompt_token_ids))
    return traces


def serve_one_at_a_time(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    device: DeviceProfile,
    stop_at_eos: bool,
    on_progress: Progress | None = None,
) -> tuple[ServedMode, dict[str, Trace]]:
    """A server that runs one request to completion before it starts the next, arrivals as in the workload."""
    warm_up(lm)
    traces: dict[str, Trace] = {}
    records = []
    t0 = time.perf_counter()
    for k, r in enumerate(planned):
        if on_progress:
            on_progress(k / len(planned), f"One at a time: {r.id}…")
        delay_s = r.arrival_s - (time.perf_counter() - t0)
        if delay_s > 0:
            time.sleep(delay_s)
        start_s = time.perf_counter() - t0
        trace = generate(
            lm, solo_request(r, stop_at_eos), device, warmup=False, prompt_token_ids=list(r.prompt_token_ids)
        )
        traces[r.id] = trace
        times = [start_s + p.token_s for p in trace.passes]  # token_s: after the request's own clock started
        records.append(
            RequestRecord(
                id=r.id,
                prompt_text=r.prompt_text,
                prompt_token_ids=r.prompt_token_ids,
                prefix_tokens=r.prefix_tokens,
                max_new_tokens=r.max_new_tokens,
                arrival_s=r.arrival_s,
                start_s=start_s,
                token_times_s=tuple(times),
                token_ids=trace.generated_token_ids,
                prefill_tokens_computed=trace.prompt_len,
            )
        )
    return ServedMode(SEQUENTIAL, tuple(records)), traces


# --- static batching -------------------------------------------------------------------------------------------------
@torch.inference_mode()
def padded_prefill(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: object
) -> torch.Tensor:
    # input_ids, attention_mask: (B, T), left-padded so every row's last position is real -> logits (B, vocab)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T): each row counts from its first real token
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,  # only the last position's logits pick the next token
    )
    return out.logits[:, -1, :]


@torch.inference_mode()
def padded_decode(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: object,
) -> torch.Tensor:
    # input_ids, position_ids: (B, 1); attention_mask: (B, T_cache + 1) -> logits (B, vocab)
    assert input_ids.shape[-1] == 1, "a decode pass computes exactly one new token per row"
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
    )
    return out.logits[:, -1, :]


def serve_static_batch(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    stop_at_eos: bool,
    on_progress: Progress | None = None,
) -> ServedMode:
    """One fixed batch of every request: it starts when the last one arrives and ends with the longest."""
    warm_up(lm)
    device = lm.torch_device
    batch, longest_prompt = len(planned), max(len(r.prompt_token_ids) for r in planned)
    longest_output = max(r.max_new_tokens for r in planned)
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0  # masked out: any id works
    input_ids = torch.full((batch, longest_prompt), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((batch, longest_prompt), dtype=torch.long)  # (B, T)
    for row, r in enumerate(planned):
        input_ids[row, longest_prompt - len(r.prompt_token_ids) :] = torch.tensor(r.prompt_token_ids)
        attention_mask[row, longest_prompt - len(r.prompt_token_ids) :] = 1
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    tokens: list[list[int]] = [[] for _ in planned]
    times: list[list[float]] = [[] for _ in planned]
    done = [False] * batch

    t0 = time.perf_counter()
    time.sleep(max(0.0, max(r.arrival_s for r in planned) - (time.perf_counter() - t0)))  # wait for the batch
    start_s = time.perf_counter() - t0
    cache = new_cache(lm.model)
    logits = padded_prefill(lm.model, input_ids, attention_mask, cache)
    positions = attention_mask.sum(-1, keepdim=True)  # (B, 1): the next position of every row
    for step in range(longest_output):
        next_ids = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        synchronize(device)
        now_s = time.perf_counter() - t0
        for row, r in enumerate(planned):
            if not done[row]:
                tokens[row].append(int(next_ids[row, 0]))
                times[row].append(now_s)
                done[row] = len(tokens[row]) >= r.max_new_tokens or (
                    stop_at_eos and tokens[row][-1] in lm.eos_token_ids
                )
        if all(done):
            break
        if on_progress:
            on_progress(step / longest_output, f"Static batching: decode step {step + 1} of {longest_output}…")
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, 1))], dim=-1)
        logits = padded_decode(lm.model, next_ids, attention_mask, positions, cache)
        positions = positions + 1
    records = tuple(
        RequestRecord(
            id=r.id,
            prompt_text=r.prompt_text,
            prompt_token_ids=r.prompt_token_ids,
            prefix_tokens=r.prefix_tokens,
            max_new_tokens=r.max_new_tokens,
            arrival_s=r.arrival_s,
            start_s=start_s,
            token_times_s=tuple(times[row]),
            token_ids=tuple(tokens[row]),
            prefill_tokens_computed=len(r.prompt_token_ids),
        )
        for row, r in enumerate(planned)
    )
    return ServedMode(STATIC, records)


# --- the token check -------------------------------------------------------------------------------------------------
def check_against_solo(
    records: Sequence[RequestRecord], solo: dict[str, Trace], tokenizer: object
) -> tuple[TokenCheck, ...]:
    return tuple(check_one(r, solo[r.id], tokenizer) for r in records)


def check_one(record: RequestRecord, trace: Trace, tokenizer: object) -> TokenCheck:
    """The first generated token where a served request and its solo greedy run differ, and why."""
    served, reference = record.token_ids, trace.generated_token_ids
    position = next((k for k, (a, b) in enumerate(zip(served, reference)) if a != b), None)
    if position is None:
        if len(served) == len(reference):
            return TokenCheck(record.id, True)
        shorter = "served" if len(served) < len(reference) else "solo"
        return TokenCheck(
            record.id,
            False,
            explanation=f"{record.id}: the same tokens, but the {shorter} run stopped after "
            f"{min(len(served), len(reference))} of them (an end-of-sequence token or fewer new tokens).",
        )
    got, want = served[position], reference[position]
    top = {t.token_id: t.prob for t in trace.passes[position].top_tokens}
    text = f"{record.id} token {position}: served {got} {tokenizer.decode([got])!r}, solo {want} "
    text += f"{tokenizer.decode([want])!r}. "
    if got in top:
        gap = top[want] - top[got]
        text += f"In the solo run they had probabilities {top[want]:.4f} and {top[got]:.4f} (gap {gap:.2g}): "
        if gap < NEAR_TIE:
            text += (
                "a near tie, which float rounding can flip: the server computes this position in a different "
                "kernel layout (packed requests with a block mask, or a padded batch) than one request alone, and "
                "its sums round differently. The tokens after it continue from different text."
            )
        else:
            text += "not a near tie, so more than float rounding differs here: worth a bug report."
    else:
        text += "The served token is not among the solo run's top 5: more than float rounding differs here."
    return TokenCheck(record.id, False, position, got, want, text)
