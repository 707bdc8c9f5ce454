"""Why prefix sharing saved what it saved: each cause computed from hand-made records of a run (pure, no model)."""

from __future__ import annotations

import pytest

from explorer.labs.schedule.records import BlockHolding, PrefixHit, RequestRecord, ScheduleRun, StepEntry, StepRecord
from explorer.labs.schedule.sharing import (
    ALONE,
    EVICTED,
    NOT_FOUND,
    OFF,
    REUSED,
    SAME_STEP,
    SHORTER_THAN_BLOCK,
    explain_sharing,
)
from explorer.labs.schedule.workload import EngineSettings, Workload

PREFIX = tuple(range(100, 140))  # a 40-token system prompt


def prompt(shared: int, own: int, seed: int) -> tuple[int, ...]:
    return PREFIX[:shared] + tuple(1000 * seed + k for k in range(own))


def request(index: int, ids: tuple[int, ...], reused: int = 0, prefix_tokens: int = 40) -> RequestRecord:
    return RequestRecord(
        f"r{index}", "", ids, prefix_tokens, 4, 0.0, 0.0, (1.0,), (7,), len(ids) - reused, prefix_tokens_reused=reused
    )


def prefill(index: int, tokens: int) -> StepEntry:
    return StepEntry(f"r{index}", tokens, 0, 1, True)


def decode(index: int) -> StepEntry:
    return StepEntry(f"r{index}", 0, 1, 0, False)


def step(
    index: int, entries: list[StepEntry], holders: tuple[int, ...] = (), cached: int = 0, hits: tuple = ()
) -> StepRecord:
    holdings = tuple(BlockHolding(f"r{h}", (h,), 1) for h in holders)
    return StepRecord(index, 0.1 * index, 0.1, 0.0, 0.0, tuple(entries), holdings, 10, cached, hits)


def run_of(requests: list[RequestRecord], steps: list[StepRecord], sharing: bool = True) -> ScheduleRun:
    settings = EngineSettings(block_size=16, prefix_sharing=sharing)
    return ScheduleRun(
        Workload(requests=len(requests)), settings, "hand", "float32", "cpu", 8, 64, tuple(steps), tuple(requests)
    )


def test_a_prefix_shorter_than_a_block_names_the_block_size_not_the_arrivals() -> None:
    """The audit's run: a 9-token prefix, 16-token blocks, requests prefilled in different steps."""
    requests = [request(i, prompt(9, 20, i), prefix_tokens=9) for i in range(4)]
    steps = [step(i, [prefill(i, 29)], holders=(i,)) for i in range(4)]
    explanation = explain_sharing(run_of(requests, steps))
    assert explanation.kind == SHORTER_THAN_BLOCK
    assert "share at most their first 9 tokens (the prefix is 9 of them), fewer than one 16-token block" in (
        explanation.sentence
    )
    assert "hashes a block" not in explanation.sentence and "stagger" not in explanation.sentence.split("not ")[0]


def test_requests_prefilled_in_the_same_step_cannot_share() -> None:
    requests = [request(i, prompt(40, 10, i)) for i in range(3)]
    steps = [step(0, [prefill(i, 50) for i in range(3)], holders=(0, 1, 2)), step(1, [decode(i) for i in range(3)])]
    explanation = explain_sharing(run_of(requests, steps))
    assert explanation.kind == SAME_STEP
    assert explanation.sentence.startswith("no prefill was saved: r1, r2: scheduled before the forward that filled")
    assert "hashes a block only after the forward that fills it" in explanation.sentence
    assert [(r.shareable_blocks, r.reused_blocks) for r in explanation.requests] == [(2, 0), (2, 0)]


def test_staggered_requests_reuse_whole_blocks() -> None:
    """40 shared tokens = 2 whole 16-token blocks (32 tokens); the other 8 are computed."""
    requests = [request(0, prompt(40, 10, 0)), request(1, prompt(40, 10, 1), reused=32)]
    steps = [
        step(0, [prefill(0, 50)], holders=(0,)),
        step(1, [decode(0), prefill(1, 18)], holders=(0, 1), hits=(PrefixHit("r1", 32, 2),)),
    ]
    explanation = explain_sharing(run_of(requests, steps))
    assert explanation.kind == REUSED
    assert explanation.sentence.startswith(
        "2 blocks = 32 tokens reused, in whole blocks of 16 (blocks by request: r1 2"
    )
    assert "(32 of its 40 shared tokens)" in explanation.sentence


def test_blocks_evicted_before_the_next_request_came() -> None:
    """r0 filled the blocks and finished; by the time r1 was scheduled no request held them and none were cached."""
    requests = [request(0, prompt(40, 10, 0)), request(1, prompt(40, 10, 1))]
    steps = [
        step(0, [prefill(0, 50)], holders=(0,)),
        step(1, [decode(0)], holders=(0,)),
        step(2, [prefill(1, 50)], holders=(1,), cached=0),
    ]
    explanation = explain_sharing(run_of(requests, steps))
    assert explanation.kind == EVICTED and "evicted before it was scheduled" in explanation.sentence


def test_blocks_held_but_not_matched_say_the_records_do_not_show_why() -> None:
    requests = [request(0, prompt(40, 10, 0)), request(1, prompt(40, 10, 1))]
    steps = [step(0, [prefill(0, 50)], holders=(0,)), step(1, [decode(0), prefill(1, 50)], holders=(0, 1))]
    assert explain_sharing(run_of(requests, steps)).kind == NOT_FOUND


def test_a_chunked_donor_shares_only_the_blocks_it_had_filled() -> None:
    """r0's 50 tokens in chunks of 16 and 34: when r1 is scheduled in step 1 only r0's first block is hashed, so
    r1's one reused block is all it could get then, and its second shareable block was in the same step."""
    requests = [request(0, prompt(40, 10, 0)), request(1, prompt(40, 10, 1), reused=16)]
    steps = [
        step(0, [prefill(0, 16)], holders=(0,)),
        step(1, [prefill(0, 34), prefill(1, 34)], holders=(0, 1), hits=(PrefixHit("r1", 16, 1),)),
    ]
    explanation = explain_sharing(run_of(requests, steps))
    assert explanation.kind == REUSED and explanation.requests[0].cause == SAME_STEP
    assert "1 block = 16 tokens reused" in explanation.sentence and "r1: scheduled before the forward" in (
        explanation.sentence
    )


@pytest.mark.parametrize(("requests", "sharing", "kind"), [(2, False, OFF), (1, True, ALONE)])
def test_sharing_off_and_a_lone_request(requests: int, sharing: bool, kind: str) -> None:
    records = [request(i, prompt(40, 10, i)) for i in range(requests)]
    steps = [step(0, [prefill(i, 50) for i in range(requests)])]
    assert explain_sharing(run_of(records, steps, sharing)).kind == kind
