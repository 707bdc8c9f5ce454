"""A Room round of long prompts ("everyone send a long prompt now"): through the device owner on a tiny random model,
each prompt is made long, the prompts arrive in turn while the earlier ones decode, the round is served whole and then
chunked with no step over the budget; each person's TPOT against the SLO is marked where the round pushed it past;
and the presenter's controls on the Room page send all of it."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from explorer.charts import room as charts
from explorer.core.loaded_model import LoadedModel
from explorer.hosting.settings import HostedPolicy
from explorer.labs.room import run_round
from explorer.labs.room_records import (
    CHUNKED,
    NOT_CHUNKED,
    PASSAGE_WORDS,
    RoomRound,
    RoundAsk,
    RoundPrompt,
    split_passage,
)
from explorer.ui.room_view import room_store
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnerInThread, OwnersOfATest
from tests.test_room_app import assert_no_error, open_room, room_page, submit

PROMPTS = ("hello there", "the sea", "x")
LONG_TOKENS = 160  # the tiny model's context is 256 tokens (a byte tokenizer: a token a character)
NEW_TOKENS = 24  # enough decode steps that each earlier person is still decoding when the next long prompt comes
BUDGET = 32


def long_ask(chunk_budget: int | None, long_tokens: int | None = LONG_TOKENS, **kwargs: object) -> RoundAsk:
    numbered = tuple(RoundPrompt(k + 1, text) for k, text in enumerate(PROMPTS))
    return RoundAsk("K7QX2", 1, numbered, NEW_TOKENS, True, None, long_tokens, chunk_budget, **kwargs)  # type: ignore[arg-type]


def on_owner(owner: OwnerInThread, model: str, ask: RoundAsk) -> tuple[str, dict[str, object]]:
    body = {"model": model, "device": "cpu", "dtype": "float32", "round": ask.to_dict()}
    events = list(owner.client().job("room", body))
    return events[-1].name, events[-1].data


@pytest.fixture(scope="module")
def served(tiny_llama_dir: Path) -> tuple[RoomRound, RoomRound, int]:
    """The long round through the owner chunked at `BUDGET`, then without chunking; and the passes the owner logged."""
    owner = OwnerInThread()
    try:
        rounds = []
        for budget in (BUDGET, None):
            name, done = on_owner(owner, str(tiny_llama_dir), long_ask(budget))
            assert name == "done", done
            rounds.append(RoomRound.from_dict(done))  # type: ignore[arg-type]
        passes = sum(t.passes for t in owner.owner.queue.turns if t.what == "room")
    finally:
        owner.stop()
    return rounds[0], rounds[1], passes


def prefill_steps(steps: tuple, request: str) -> list:
    return [s for s in steps if any(e.request == request and e.prefill_tokens for e in s.entries)]


def test_every_prompt_is_made_long_and_stays_its_authors(served: tuple[RoomRound, RoomRound, int]) -> None:
    chunked, _, _ = served
    assert chunked.long_prompt_tokens == LONG_TOKENS and chunked.chunk_budget == BUDGET
    for lane, prompt in zip(chunked.lanes, PROMPTS):
        assert LONG_TOKENS - 8 < lane.prompt_tokens <= LONG_TOKENS  # the passage fills it to within a word
        passage, own = split_passage(lane.prompt_text)  # after the shared passage, their own prompt
        assert own == prompt and passage.startswith(" ".join(PASSAGE_WORDS[:5]))
        assert len(lane.token_times_s) == len(lane.chunked_token_times_s) == NEW_TOKENS
        assert lane.chunked_ttft_s is not None and 0 < lane.chunked_ttft_s <= lane.chunked_token_times_s[0]


def test_not_chunked_each_long_prefill_is_one_step_that_stalls_the_decodes_before_it(
    served: tuple[RoomRound, RoomRound, int],
) -> None:
    for run in served[:2]:  # the round's own serving is whole, chunking asked for or not
        assert run.settings.token_budget >= max(lane.prompt_tokens for lane in run.lanes) + len(run.lanes)
        for k, lane in enumerate(run.lanes):
            (step,) = prefill_steps(run.steps, lane.request)  # the whole prompt in one step
            (entry,) = [e for e in step.entries if e.request == lane.request]
            assert entry.prefill_tokens == lane.prompt_tokens
            if k:  # it arrived in turn: the people before it were decoding in the step that prefilled it
                assert any(e.decode_tokens for e in step.entries), (k, step.entries)
    _, whole, _ = served
    assert whole.chunk_budget is None and not whole.chunked_steps
    assert all(lane.chunked_token_times_s == () and lane.chunked_ttft_s is None for lane in whole.lanes)
    assert {m.serving for m in whole.tpot_marks(0.1)} == {NOT_CHUNKED}


def test_chunked_no_step_passes_the_budget_and_each_long_prefill_is_split(
    served: tuple[RoomRound, RoomRound, int],
) -> None:
    chunked, _, passes = served
    assert chunked.chunked_steps
    assert all(s.prefill_tokens + s.decode_tokens <= BUDGET for s in chunked.chunked_steps)
    for lane in chunked.lanes:
        steps = prefill_steps(chunked.chunked_steps, lane.request)
        assert len(steps) >= math.ceil(lane.prompt_tokens / BUDGET)
        computed = sum(e.prefill_tokens for s in steps for e in s.entries if e.request == lane.request)
        assert computed == lane.prompt_tokens
    later = prefill_steps(chunked.chunked_steps, chunked.lanes[1].request)
    assert sum(any(e.decode_tokens for e in s.entries) for s in later) >= 2  # chunks shared with a decode
    assert passes >= len(chunked.steps) + len(chunked.chunked_steps)  # the owner logged both servings in the turn
    assert RoomRound.from_json(chunked.to_json()) == chunked
    assert json.loads(chunked.to_json())["chunked_steps"][0]["kind"]


def timed(lane_times: dict[int, tuple[tuple[float, ...], tuple[float, ...]]], run: RoomRound) -> RoomRound:
    """`run` with each person's round and chunked token times set, and 10 ms between tokens alone."""
    alone = tuple(k * 0.010 for k in range(4))
    lanes = tuple(
        replace(
            lane,
            token_times_s=lane_times[lane.participant][0],
            chunked_token_times_s=lane_times[lane.participant][1],
            alone_token_times_s=alone,
        )
        for lane in run.lanes
    )
    return replace(run, lanes=lanes)


def test_the_chart_marks_whose_tpot_the_long_prefill_pushed_past_the_slo(
    served: tuple[RoomRound, RoomRound, int],
) -> None:
    even = (0.0, 0.01, 0.02, 0.03)
    run = timed(
        {
            1: ((0.0, 0.5, 0.51, 0.52), even),  # a 500 ms stall: TPOT 173 ms; chunked, 10 ms
            2: ((0.0, 0.01, 0.26, 0.27), (0.0, 0.02, 0.04, 0.06)),  # 90 ms: under a 100 ms SLO
            3: (even, even),
        },
        served[0],
    )
    marks = {(m.participant, m.serving): m for m in run.tpot_marks(0.100)}
    assert marks[1, NOT_CHUNKED].pushed and marks[1, NOT_CHUNKED].longest_gap_s == pytest.approx(0.5)
    assert not marks[1, CHUNKED].past_slo
    assert not any(marks[p, s].past_slo for p in (2, 3) for s in (NOT_CHUNKED, CHUNKED))
    sentence = run.tpot_sentence(0.100)
    assert "Not chunked" in sentence and "1 of 3 people's TPOT past the 100 ms SLO" in sentence
    assert "Chunked (32-token budget): 0 of 3" in sentence

    frame = charts.tpot_frame(run, 2, 0.100)
    pushed = frame[frame["pushed"]]
    assert set(zip(pushed["person"], pushed["serving"])) == {("participant 1", NOT_CHUNKED)}
    assert set(frame[frame["figure"] == charts.TPOT]["mark"]) == {"pushed past", ""}
    assert set(frame["figure"]) == {charts.TPOT, charts.LONGEST_GAP} and (frame["tpot_slo_ms"] == 100).all()
    assert frame["ttft_ms"].notna().all()  # the first token's wait, both ways: chunks delay it
    spec = charts.tpot_chart(frame, charts.lane_order(run, 2), 100.0).to_json()
    assert "pushed past" in spec and '"type": "log"' in spec and "participant 1" in spec
    slow_alone = replace(run, lanes=tuple(replace(lane, alone_token_times_s=(0.0, 0.2)) for lane in run.lanes))
    assert not any(m.pushed for m in slow_alone.tpot_marks(0.100))  # past it alone too: not the round's doing
    marked = charts.tpot_frame(slow_alone, 2, 0.100)
    assert set(marked[marked["past_slo"]]["mark"]) == {charts.PAST_ALONE_TOO}


def test_the_owner_holds_a_long_round_to_its_caps_before_anything_runs(tiny_llama_dir: Path) -> None:
    owner = OwnerInThread(HostedPolicy.from_env({"EXPLORER_HOSTED": "1"}))
    try:
        for ask, said in (
            (long_ask(BUDGET, 300), "A long prompt here is 1 to 256 tokens, not 300."),
            (long_ask(BUDGET, None), "ask for long prompts too"),
            (long_ask(8), "A chunk budget is 16 to"),
        ):
            name, refused = on_owner(owner, str(tiny_llama_dir), ask)
            assert name == "error" and said in str(refused["message"]), refused
        assert not owner.owner.queue.turns
    finally:
        owner.stop()


def test_the_presenters_long_prompt_and_chunking_controls_serve_the_round_both_ways(
    tiny_llama_dir: Path, fresh_device_owner: OwnersOfATest
) -> None:
    presenter, code = open_room(tiny_llama_dir)
    guest = room_page(new_app(), code)
    assert_no_error(submit(presenter, "one tree?"))
    assert_no_error(submit(guest, "one river?"))
    assert not [t for t in guest.toggle if t.key == "room-long"]  # only the presenter's panel has the controls
    assert not [n for n in presenter.number_input if n.key == "room-long-tokens"]  # shown once switched on
    presenter.number_input(key="room-new-tokens").set_value(8)
    presenter.toggle(key="room-long").set_value(True).run()
    assert_no_error(presenter)
    assert presenter.toggle(key="room-chunk").value  # chunked again by default: the lesson's second half
    presenter.number_input(key="room-long-tokens").set_value(LONG_TOKENS)
    presenter.number_input(key="room-chunk-budget").set_value(BUDGET)
    presenter.button(key="room-start").click().run()
    assert_no_error(presenter)

    (finished,) = room_store().view(code, "an observer").finished
    run = finished.result
    assert isinstance(run, RoomRound) and run.long_prompt_tokens == LONG_TOKENS and run.chunk_budget == BUDGET
    assert run.chunked_steps and all(s.prefill_tokens + s.decode_tokens <= BUDGET for s in run.chunked_steps)
    for at, mine in ((presenter, "one tree?"), (guest.run(), "one river?")):
        assert_no_error(at)
        said = [t.value for t in at.text if t.value.startswith("Your prompt (after a shared passage of ")]
        assert said and f": {mine}\nThe answer: " in said[0]  # their own prompt, the passage counted, not shown
        labels = [b.proto.label for b in at.get("download_button")]
        assert "Download data: room-tpot.csv" in labels and "Download data: room-chunked-steps.csv" in labels
        tpot = [c for c in at.get("vega_lite_chart") if "longest gap" in c.proto.spec]
        assert tpot and "TPOT SLO (ms)" in tpot[0].proto.spec


def test_a_hosted_presenter_picks_a_long_prompt_within_the_servers_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    presenter, _ = open_room()
    presenter.toggle(key="room-long").set_value(True).run()
    assert_no_error(presenter)
    long_tokens = presenter.number_input(key="room-long-tokens")
    assert long_tokens.max == 256 and long_tokens.value == 256  # the hosted prompt cap, chat template included
    assert presenter.number_input(key="room-chunk-budget").value == 64


@pytest.mark.slow
def test_on_the_embedded_model_chunking_shortens_the_longest_wait_a_long_prefill_caused(real_lm: LoadedModel) -> None:
    """The lesson measured on the real model: the first person's longest gap between tokens holds a later person's
    whole 256-token prefill; chunked at 32 tokens a step, it holds one chunk. Every prompt's tokens equal alone."""
    ask = RoundAsk("K7QX2", 1, tuple(RoundPrompt(k + 1, p) for k, p in enumerate(PROMPTS)), 10, True, None, 256, 32)
    run = run_round(real_lm, ask)
    first = {m.serving: m for m in run.tpot_marks(0.050) if m.participant == 1}
    whole, chunked = first[NOT_CHUNKED].longest_gap_s, first[CHUNKED].longest_gap_s
    assert whole is not None and chunked is not None and chunked < whole, (whole, chunked)
    assert run.all_same_tokens
    print(f"\n[room, long] {run.tpot_sentence(0.050)}")
