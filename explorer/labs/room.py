"""A Room round on the device: the room's prompts served together by transformers' continuous batching engine
(instrumented, `explorer.labs.schedule.engine`), then each prompt alone through the same engine, every person's round
tokens checked against their alone run.

Why alone through the same engine, not the explorer's own loop: the two runs then differ only in the batch (the same
paged cache, kernels and step overhead), so "your ITL in a batch of 3 against alone" measures batching and nothing
else. Both runs are greedy, stop at the model's end-of-sequence token and keep prefix sharing off (every chat-template
prompt starts with the same system text, which a shared block would make cheaper in the round than alone).

What holds the device: the caller's one turn for the whole round (the batched run and every alone run); nothing
here passes it on. Progress reports only move the bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
import transformers

from explorer.core.cpu_facts import cpu_name
from explorer.core.engine import tokenize, warm_up
from explorer.core.errors import BadInput
from explorer.core.lab_progress import Report, part_of, silent
from explorer.core.loaded_model import LoadedModel
from explorer.labs.room_records import (
    BLOCK_SIZE,
    PASSAGE_END,
    PASSAGE_WORDS,
    Lane,
    LeftOut,
    RoomRound,
    RoundAsk,
    participant_of,
    request_id,
)
from explorer.labs.schedule import engine
from explorer.labs.schedule.records import RequestRecord, StepRecord
from explorer.labs.schedule.run import load_average
from explorer.labs.schedule.workload import EngineSettings, PlannedRequest, blocks_needed, check_fits

TOKEN_BUDGET = 256  # tokens one step may compute: a hosted prompt (256 tokens at most) is prefilled in one step
MIN_BLOCKS = 16
STOP_AT_EOS = True  # answers end where the model ends them: people leave the batch, and the batch shrinks


def long_text(lm: LoadedModel, text: str, target_tokens: int, chat_template: bool) -> str:
    """The person's prompt after a shared passage (the Scheduling lab's corpus, repeated), with as many of its words
    as keep the whole within `target_tokens`, chat template included: everyone's prompt long, each still their own.
    A prompt already that long is kept as typed."""

    def with_words(n: int) -> str:
        passage = " ".join(PASSAGE_WORDS[k % len(PASSAGE_WORDS)] for k in range(n))
        return passage + PASSAGE_END + text if n else text

    fewest, most = 0, target_tokens  # every word is at least one token: more words than the target cannot fit
    while fewest < most:  # the most words that fit, by bisection: a tokenization per halving, not per word
        middle = (fewest + most + 1) // 2
        if len(tokenize(lm, with_words(middle), chat_template)) <= target_tokens:
            fewest = middle
        else:
            most = middle - 1
    return with_words(fewest)


def plan(lm: LoadedModel, ask: RoundAsk) -> tuple[tuple[PlannedRequest, ...], tuple[LeftOut, ...]]:
    """Each prompt tokenized (with the chat template when asked; long, `long_text`, when the presenter asked everyone
    for a long prompt), all arriving at once (a long round's in turn: `run_round`); a prompt over the token cap or the
    model's context is left out with one line saying why, so one long prompt never stops the room's round."""
    planned, left_out = [], []
    for prompt in ask.prompts:
        text = prompt.text
        if ask.long_prompt_tokens is not None:
            text = long_text(lm, text, ask.long_prompt_tokens, ask.chat_template)
        ids = tokenize(lm, text, ask.chat_template)
        who = f"Participant {prompt.participant}'s prompt"
        if not ids:
            left_out.append(LeftOut(prompt.participant, f"{who} produced no tokens: it was left out."))
        elif ask.max_prompt_tokens is not None and len(ids) > ask.max_prompt_tokens:
            reason = (
                f"{who} is {len(ids):,} tokens (chat template included), over this server's {ask.max_prompt_tokens:,}: "
                "it was left out of the round."
            )
            left_out.append(LeftOut(prompt.participant, reason))
        elif len(ids) + ask.max_new_tokens > lm.info.max_context:
            reason = f"{who} and its new tokens pass {lm.info.display_name}'s context: it was left out of the round."
            left_out.append(LeftOut(prompt.participant, reason))
        else:
            planned.append(PlannedRequest(request_id(prompt.participant), text, tuple(ids), 0, ask.max_new_tokens, 0.0))
    if not planned:
        raise BadInput(f"No prompt of round {ask.number} can be served. {left_out[0].reason if left_out else ''}")
    return tuple(planned), tuple(left_out)


def settings_for(planned: Sequence[PlannedRequest]) -> EngineSettings:
    """Blocks for every request at its longest (so the engine never has to evict one), prefix sharing off, and a
    budget that holds the longest prompt whole beside every other request's decode token: the round's prefills are
    never chunked (a long round is served chunked again at the presenter's budget, `run_round`)."""
    need = sum(blocks_needed(len(r.prompt_token_ids) + r.max_new_tokens, BLOCK_SIZE) for r in planned)
    budget = max(TOKEN_BUDGET, max(len(r.prompt_token_ids) for r in planned) + len(planned))
    return EngineSettings("fifo", budget, BLOCK_SIZE, max(MIN_BLOCKS, need), prefix_sharing=False)


def serve_alone(
    lm: LoadedModel, planned: Sequence[PlannedRequest], progress: Report
) -> dict[str, tuple[RequestRecord, tuple[StepRecord, ...]]]:
    """Each request served alone by the engine, one after another: its record and its steps."""
    alone = {}
    for k, r in enumerate(planned):
        progress(k / len(planned), f"Alone: prompt {k + 1} of {len(planned)}…")
        steps, (record,), _ = engine.serve(lm, [r], settings_for([r]), STOP_AT_EOS)
        alone[r.id] = (record, steps)
    return alone


def difference(served: RequestRecord, alone: RequestRecord, tokenizer: object) -> str:
    """Where the round's tokens and the alone run's first differ; "" when they are the same."""
    a, b = served.token_ids, alone.token_ids
    position = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if position is None:
        if len(a) == len(b):
            return ""
        shorter = "round" if len(a) < len(b) else "alone run"
        return f"The same tokens, but the {shorter} stopped after {min(len(a), len(b))} of them."
    got, want = a[position], b[position]
    return (
        f"Token {position}: the round made {got} {tokenizer.decode([got])!r}, alone {want} "  # type: ignore[attr-defined]
        f"{tokenizer.decode([want])!r}. A near tie can flip when prompts are packed together (the sums round "  # type: ignore[attr-defined]
        "differently); otherwise more than rounding differs."
    )


def lane(
    lm: LoadedModel,
    served: RequestRecord,
    alone: tuple[RequestRecord, tuple[StepRecord, ...]],
    chunked: RequestRecord | None = None,
) -> Lane:
    record, steps = alone
    return Lane(
        participant=participant_of(served.id),
        prompt_text=served.prompt_text,
        answer_text=lm.tokenizer.decode(list(served.token_ids), skip_special_tokens=True),
        prompt_tokens=served.prompt_len,
        token_ids=served.token_ids,
        new_tokens=len(served.token_ids),
        ttft_s=served.ttft_s,
        token_times_s=served.token_times_s,
        alone_ttft_s=record.ttft_s,
        alone_token_times_s=record.token_times_s,
        alone_decode_step_s=tuple(s.wall_s for s in steps if s.kind == "decode"),
        same_tokens=served.token_ids == record.token_ids,
        difference=difference(served, record, lm.tokenizer),
        chunked_token_times_s=() if chunked is None else chunked.token_times_s,
        chunked_ttft_s=None if chunked is None else chunked.ttft_s,
    )


def device_name(device: torch.device) -> str:
    """The device by name: nothing in a round is costed against the device's figures, so none are measured."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def run_round(lm: LoadedModel, ask: RoundAsk, progress: Report = silent) -> RoomRound:
    """Serve the round's prompts together, then each alone; the record of both. The caller holds the device."""
    planned, left_out = plan(lm, ask)
    settings = settings_for(planned)
    check_fits(lm, planned, settings)
    progress(0.0, "Warming up…")
    warm_up(lm)  # the first forwards of a process pay for kernel set-up: the explorer's path, then the engine's
    engine.warm_up(lm, settings)
    # Long prompts arrive in turn, each once the ones before it decode: handed in at once they would all prefill in
    # the first step, before anyone decodes, and no prefill could stall anyone's tokens.
    long = ask.long_prompt_tokens is not None
    again = long and ask.chunk_budget is not None
    steps, served, _ = engine.serve(
        lm, planned, settings, STOP_AT_EOS, part_of(progress, 0.05, 0.3 if again else 0.45), in_turn=long
    )
    chunked_steps: tuple[StepRecord, ...] = ()
    chunked: dict[str, RequestRecord] = {}
    if again:  # the same prompts, arriving the same way, with each step's tokens capped at the presenter's budget
        chunking = replace(settings, token_budget=ask.chunk_budget)
        chunked_steps, records, _ = engine.serve(
            lm, planned, chunking, STOP_AT_EOS, part_of(progress, 0.3, 0.55), in_turn=True
        )
        chunked = {r.id: r for r in records}
    alone = serve_alone(lm, planned, part_of(progress, 0.55 if again else 0.45, 1.0))
    progress(1.0, "Done.")
    return RoomRound(
        code=ask.code,
        number=ask.number,
        model=lm.info.display_name,
        dtype=lm.info.dtype,
        device=device_name(lm.torch_device),
        settings=settings,
        max_new_tokens=ask.max_new_tokens,
        chat_template=ask.chat_template and lm.has_chat_template,
        steps=steps,
        lanes=tuple(lane(lm, r, alone[r.id], chunked.get(r.id)) for r in served),
        left_out=left_out,
        load_avg_1m=load_average(),
        transformers_version=transformers.__version__,
        long_prompt_tokens=ask.long_prompt_tokens,
        chunk_budget=ask.chunk_budget if again else None,
        chunked_steps=chunked_steps,
    )
