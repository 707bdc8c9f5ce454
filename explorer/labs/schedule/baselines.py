"""The two baselines continuous batching is measured against, and the token check against solo greedy runs.

- One at a time: the explorer's own engine (`core.engine.generate`) serves each request alone, in arrival order;
  a request that arrives while another is served waits. Its runs are also the solo greedy reference tokens.
- Static batching: wait for the whole batch, prefill every prompt in one padded forward, then decode every row
  until the longest request is done (finished rows keep computing, as in a fixed batch): the explorer's batched loop,
  on its path for prompts of different lengths (`explorer.core.batched.PaddedBatch`: left padding, mask and positions).

Each mode is one wall-clock span (arrival times kept): nothing in it gives the device away. Only the solo reference
runs, whose timings are unused, let anyone waiting go first between them. The lab's caller has warmed up once
(`explorer.core.measure.prepare_device`); the engine's run of the workload has gone before: no mode warms up again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from explorer.core.batched import PaddedBatch
from explorer.core.engine import Request, check_request, generate
from explorer.core.lab_progress import MakeWay, nobody_waits
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, Trace
from explorer.labs.schedule.records import SEQUENTIAL, STATIC, RequestRecord, ServedMode, TokenCheck
from explorer.labs.schedule.workload import PlannedRequest
from explorer.models.loading import Progress

NEAR_TIE = 0.02  # solo probabilities of the two tokens closer than this: a tie float rounding can flip


# --- one at a time ---------------------------------------------------------------------------------------------------
def solo_trace(lm: LoadedModel, r: PlannedRequest, device: DeviceProfile, stop_at_eos: bool) -> Trace:
    """One planned request alone through the explorer's engine, on its planned token ids."""
    request = Request(r.prompt_text, max_new_tokens=r.max_new_tokens, use_chat_template=False, stop_at_eos=stop_at_eos)
    return generate(lm, check_request(lm, request, r.prompt_token_ids), device, warmed_up=True)


def solo_traces(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    device: DeviceProfile,
    stop_at_eos: bool,
    on_progress: Progress | None = None,
    make_way: MakeWay = nobody_waits,
) -> dict[str, Trace]:
    """Each request alone through the explorer's engine, for its reference tokens (timings unused, so the device may
    pass to another session between them)."""
    traces = {}
    for k, r in enumerate(planned):
        if on_progress:
            on_progress(k / len(planned), f"Solo greedy reference for {r.id}…")
        traces[r.id] = solo_trace(lm, r, device, stop_at_eos)
        make_way()
    return traces


def serve_one_at_a_time(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    device: DeviceProfile,
    stop_at_eos: bool,
    on_progress: Progress | None = None,
) -> tuple[ServedMode, dict[str, Trace]]:
    """A server that runs one request to completion before it starts the next, arrivals as in the workload."""
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
        trace = solo_trace(lm, r, device, stop_at_eos)
        traces[r.id] = trace
        times = [start_s + p.token_s for p in trace.passes]  # token_s: after the request's own clock started
        records.append(
            RequestRecord.of(
                r, arrival_s=r.arrival_s, start_s=start_s, token_times_s=times, token_ids=trace.generated_token_ids
            )
        )
    return ServedMode(SEQUENTIAL, tuple(records)), traces


# --- static batching -------------------------------------------------------------------------------------------------
def serve_static_batch(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    stop_at_eos: bool,
    on_progress: Progress | None = None,
) -> ServedMode:
    """One fixed batch of every request: it starts when the last one arrives and ends with the longest."""
    longest_output = max(r.max_new_tokens for r in planned)
    tokens: list[list[int]] = [[] for _ in planned]
    times: list[list[float]] = [[] for _ in planned]
    done = [False] * len(planned)
    batch = PaddedBatch(lm, [r.prompt_token_ids for r in planned])

    t0 = time.perf_counter()
    time.sleep(max(0.0, max(r.arrival_s for r in planned) - (time.perf_counter() - t0)))  # wait for the batch
    start_s = time.perf_counter() - t0
    for step in range(longest_output):
        next_ids = batch.step()  # the prefill first, then one decode for every row, finished or not
        now_s = time.perf_counter() - t0
        for row, r in enumerate(planned):
            if not done[row]:
                tokens[row].append(next_ids[row])
                times[row].append(now_s)
                done[row] = len(tokens[row]) >= r.max_new_tokens or (
                    stop_at_eos and tokens[row][-1] in lm.eos_token_ids
                )
        if all(done):
            break
        if on_progress:  # the bar only: this batch is one measured span
            on_progress(step / longest_output, f"Static batching: decode step {step + 1} of {longest_output}…")
    records = tuple(
        RequestRecord.of(r, arrival_s=r.arrival_s, start_s=start_s, token_times_s=times[row], token_ids=tokens[row])
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
