"""Why prefix sharing saved what it saved, computed from a run's workload and recorded steps, never assumed.

How transformers' engine (5.x, `continuous_batching`) shares a prefix, which the reasons below follow:
- reuse is in whole blocks: `search_prefix_match` returns matched blocks x tokens per block, and the match never
  covers a prompt's last token (one is always left to compute, for the logits);
- a request is matched once, when it is first scheduled (`Scheduler._infer_request_tokens`, status PENDING);
- a block can be matched only once its content is hashed, and `mark_complete_blocks` runs after the forward that
  fills it: a request scheduled in the same step as that forward cannot share it;
- blocks no request holds are kept for their content (`cached_blocks`) until memory pressure evicts them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from explorer.labs.schedule.workload import common_prefix_len

if TYPE_CHECKING:
    from explorer.labs.schedule.records import RequestRecord, ScheduleRun

OFF, ALONE, SHORTER_THAN_BLOCK, REUSED, SAME_STEP, EVICTED, NOT_FOUND = (
    "sharing off",
    "one request",
    "prefix shorter than a block",
    "reused in whole blocks",
    "prefilled in the same step",
    "blocks evicted",
    "not found",
)


@dataclass(frozen=True)
class RequestSharing:
    """One request's share: what it could have reused from an earlier request's prompt, and what it did."""

    request: str
    shared_tokens: int  # its prompt's longest common start with an earlier request's prompt
    shareable_blocks: int  # whole blocks of those, its last prompt token excluded (always computed)
    reused_blocks: int  # what the engine matched
    first_step: int | None  # the step that first scheduled it (where it was matched, or not)
    cause: str = ""  # why fewer blocks than shareable were reused: SAME_STEP, EVICTED or NOT_FOUND


@dataclass(frozen=True)
class SharingExplanation:
    """The run's reason in one word (`kind`) and one sentence, with each request's numbers behind it."""

    kind: str
    sentence: str
    requests: tuple[RequestSharing, ...] = ()


def first_step(run: ScheduleRun, request: str) -> int | None:
    return next((s.index for s in run.steps if any(e.request == request for e in s.entries)), None)


def filled_after(run: ScheduleRun, donor: RequestRecord, step: int) -> int:
    """Prompt positions of `donor` in the cache once `step`'s forward has run: its reused prefix, then its chunks."""
    start = first_step(run, donor.id)
    if start is None or start > step:
        return 0
    computed = sum(e.prefill_tokens for s in run.steps[: step + 1] for e in s.entries if e.request == donor.id)
    return donor.prefix_tokens_reused + computed


def donors_held_or_cached(run: ScheduleRun, donors: list[RequestRecord], step: int, blocks: int) -> bool:
    """Whether the shared blocks were still there when `step` was scheduled: a donor held them then (a request frees
    its blocks only after its last step), or the blocks kept for their content were enough to hold them."""
    record = run.steps[step]
    return any(h.request in {d.id for d in donors} for h in record.holdings) or record.cached_blocks >= blocks


def request_sharing(run: ScheduleRun, index: int) -> RequestSharing:
    """Request `index` against every request that arrived before it."""
    block = run.settings.block_size
    r = run.requests[index]
    donors = list(run.requests[:index])
    shared = max((common_prefix_len(r.prompt_token_ids, d.prompt_token_ids) for d in donors), default=0)
    shareable = min(shared, r.prompt_len - 1) // block
    reused = r.prefix_tokens_reused // block
    step = first_step(run, r.id)
    sharing = RequestSharing(r.id, shared, shareable, reused, step)
    if reused >= shareable or step is None:
        return sharing
    # The blocks earlier requests had filled and hashed before this one was scheduled, as far as it shares them.
    ready = max(
        min(common_prefix_len(r.prompt_token_ids, d.prompt_token_ids), filled_after(run, d, step - 1)) // block
        for d in donors
    )
    if reused >= min(ready, shareable):
        return replace(sharing, cause=SAME_STEP)
    return replace(sharing, cause=NOT_FOUND if donors_held_or_cached(run, donors, step, ready) else EVICTED)


def explain_sharing(run: ScheduleRun) -> SharingExplanation:
    """The reason prefix sharing saved what it saved in this run, from its workload and its recorded steps."""
    block = run.settings.block_size
    if not run.settings.prefix_sharing:
        return SharingExplanation(OFF, "prefix sharing was off in this run: every prompt token was computed.")
    if len(run.requests) < 2:
        return SharingExplanation(ALONE, "one request: no earlier prompt to share blocks with.")
    shares = tuple(request_sharing(run, i) for i in range(1, len(run.requests)))
    if all(s.shareable_blocks == 0 for s in shares):
        most_shared = max(s.shared_tokens for s in shares)
        prefix = run.requests[0].prefix_tokens
        of_which = f"the prefix is {prefix} of them" if prefix else "no shared prefix was set"
        return SharingExplanation(
            SHORTER_THAN_BLOCK,
            f"no prefill was saved: the prompts share at most their first {most_shared} tokens ({of_which}), fewer "
            f"than one {block}-token block, and reuse is in whole blocks; a shared start of at least {block} tokens "
            "(with a prompt token after it, which is always computed) or smaller blocks would share, not staggering "
            "the arrivals.",
            shares,
        )
    return reuse_explanation(shares, block)


def reuse_explanation(shares: tuple[RequestSharing, ...], block: int) -> SharingExplanation:
    """Some requests could share whole blocks: what they reused, and why the others did not."""
    reused = sum(s.reused_blocks for s in shares)
    missed = [s for s in shares if s.cause]
    reasons = {
        SAME_STEP: "scheduled before the forward that filled the shared blocks had run (transformers hashes a block "
        "only after the forward that fills it, so requests prefilled in the same step cannot share; stagger the "
        "arrivals or lower the token budget)",
        EVICTED: "the shared blocks had been filled but were evicted before it was scheduled (no request held them "
        "and too few were kept cached: more KV blocks would keep them)",
        NOT_FOUND: "the shared blocks were in the cache but not matched (a cause these records do not show)",
    }
    parts = [
        f"{', '.join(s.request for s in missed if s.cause == cause)}: {text}"
        for cause, text in reasons.items()
        if any(s.cause == cause for s in missed)
    ]
    if reused == 0:
        kind = missed[0].cause if len({s.cause for s in missed}) == 1 else NOT_FOUND
        return SharingExplanation(kind, "no prefill was saved: " + "; ".join(parts) + ".", shares)
    reusers = [s for s in shares if s.reused_blocks]
    each = ", ".join(
        f"{s.request} {s.reused_blocks} ({s.reused_blocks * block} of its {s.shared_tokens} shared tokens)"
        for s in reusers
    )
    sentence = (
        f"{reused} block{'s' if reused != 1 else ''} = {reused * block} tokens reused, in whole blocks of {block} "
        f"(blocks by request: {each}); "
        "shared tokens past the last whole block are computed"
    )
    return SharingExplanation(REUSED, sentence + ("; " + "; ".join(parts) if parts else "") + ".", shares)
