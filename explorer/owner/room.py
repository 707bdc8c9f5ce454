"""A Room round on the device owner: the round's prompts served together, then each alone (`explorer.labs.room`), in
one turn; the round's record comes back as the "done" data (`RoomRound.to_dict`). The room itself (its members, rounds
and results) stays in the web tier that asked (`explorer.labs.room_store`): the owner sees only the prompts of the
round it serves, numbered, never who typed them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from explorer.core.errors import BadInput
from explorer.hosting.settings import HostedPolicy
from explorer.labs.room import run_round
from explorer.labs.room_records import BLOCK_SIZE, MAX_LONG_PROMPT_TOKENS, RoomRound, RoundAsk
from explorer.labs.room_store import MAX_ROUND_SIZE
from explorer.owner.run import model_of

if TYPE_CHECKING:
    from explorer.owner.job import Job


def checked_ask(ask: RoundAsk, policy: HostedPolicy) -> RoundAsk:
    """The round held to this owner's own limits, whatever the web tier that sent it checked: it may serve several.
    The prompt-token cap is the stricter of the ask's and the owner's."""
    limit = min(MAX_ROUND_SIZE, policy.max_room_size or MAX_ROUND_SIZE)
    if not ask.prompts:
        raise BadInput(f"Round {ask.number} has no prompts: nothing ran.")
    if len(ask.prompts) > limit:
        raise BadInput(f"Round {ask.number} has {len(ask.prompts)} prompts; this device serves at most {limit}.")
    if ask.max_new_tokens < 1:
        raise BadInput("A room round makes at least 1 new token per answer.")
    if policy.max_new_tokens is not None and ask.max_new_tokens > policy.max_new_tokens:
        raise BadInput(f"This server makes at most {policy.max_new_tokens} new tokens per answer: lower it.")
    for prompt in ask.prompts:
        policy.check_prompt_chars(prompt.text)
    caps = [cap for cap in (ask.max_prompt_tokens, policy.max_prompt_tokens) if cap is not None]
    cap = min(caps) if caps else None
    check_long(ask, MAX_LONG_PROMPT_TOKENS if cap is None else min(cap, MAX_LONG_PROMPT_TOKENS))
    return replace(ask, max_prompt_tokens=cap)


def check_long(ask: RoundAsk, most_tokens: int) -> None:
    """A long round's length within the prompt cap, and its chunk budget at least one KV block (the engine's least)."""
    if ask.long_prompt_tokens is not None and not 1 <= ask.long_prompt_tokens <= most_tokens:
        raise BadInput(f"A long prompt here is 1 to {most_tokens:,} tokens, not {ask.long_prompt_tokens:,}.")
    if ask.chunk_budget is not None:
        if ask.long_prompt_tokens is None:
            raise BadInput("Chunked prefill is served again for a round of long prompts: ask for long prompts too.")
        if not BLOCK_SIZE <= ask.chunk_budget <= MAX_LONG_PROMPT_TOKENS:
            raise BadInput(f"A chunk budget is {BLOCK_SIZE} to {MAX_LONG_PROMPT_TOKENS:,} tokens per step.")


def room_job(job: Job) -> dict[str, Any]:
    """Body: model, device, dtype, round (`RoundAsk.to_dict`). Events: "progress" as the round moves. Done: the
    round's record (`RoomRound.to_dict`). A client that leaves stops it at its next progress report."""
    ask = checked_ask(RoundAsk.from_dict(job.body.get("round") or {}), job.owner.policy)
    with job.turn("room") as turn:
        lm = model_of(job)
        served: RoomRound = run_round(lm, ask, job.progress)  # it warms up itself; no figures: nothing is costed
        alone_steps = [t for lane in served.lanes for t in lane.alone_decode_step_s]
        round_steps = [s.wall_s for s in (*served.steps, *served.chunked_steps)]
        turn.ran(len(round_steps) + len(alone_steps), sum(round_steps) + sum(alone_steps))
    return served.to_dict()
