"""A Room round on the engine: every person's tokens equal their prompt run alone with greedy `generate()` (a tiny
model, and the embedded model), the steps account for every token, the record goes to JSON and back, each person sees
only their own text, and the Room's chart builders draw what the round recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.charts import room as charts
from explorer.core.engine import tokenize
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.hosting.settings import HostedPolicy
from explorer.labs.room import run_round
from explorer.labs.room_records import RoomRound, RoundAsk, RoundPrompt
from tests.owner_support import OwnerInThread
from tests.test_engine import hf_greedy_tokens

TINY_PROMPTS = ("hello there", "a much longer prompt about the sea and the ships upon it", "x")
TINY_NEW_TOKENS = 6


def ask_for(prompts: tuple[str, ...], new_tokens: int, **kwargs: object) -> RoundAsk:
    """Participants 1, 2, 3 ... each with one prompt (numbers as the room store gives them)."""
    numbered = tuple(RoundPrompt(k + 1, text) for k, text in enumerate(prompts))
    return RoundAsk("K7QX2", 1, numbered, new_tokens, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tiny_round(tiny_lm: LoadedModel) -> RoomRound:
    return run_round(tiny_lm, ask_for(TINY_PROMPTS, TINY_NEW_TOKENS))


def test_every_persons_round_tokens_equal_their_prompt_alone_with_greedy_generate(
    tiny_lm: LoadedModel, tiny_round: RoomRound
) -> None:
    assert [lane.participant for lane in tiny_round.lanes] == [1, 2, 3]
    for lane, prompt in zip(tiny_round.lanes, TINY_PROMPTS):
        ids = tuple(tokenize(tiny_lm, prompt, use_chat_template=True))
        assert lane.prompt_tokens == len(ids)
        assert list(lane.token_ids) == hf_greedy_tokens(tiny_lm, ids, TINY_NEW_TOKENS)
        assert lane.same_tokens and lane.difference == ""  # and equal to the same prompt served alone
    assert tiny_round.all_same_tokens


def test_the_steps_carry_every_prompt_and_new_token_and_the_room_shares_them(tiny_round: RoomRound) -> None:
    for lane in tiny_round.lanes:
        entries = [e for s in tiny_round.steps for e in s.entries if e.request == lane.request]
        assert sum(e.prefill_tokens for e in entries) == lane.prompt_tokens
        assert sum(e.decode_tokens for e in entries) == lane.new_tokens - 1  # the first comes with the prefill
        assert len(lane.token_times_s) == lane.new_tokens == TINY_NEW_TOKENS
        assert lane.ttft_s > 0 and lane.alone_ttft_s > 0 and len(lane.alone_decode_step_s) == TINY_NEW_TOKENS - 1
    shared = [s for s in tiny_round.steps if s.kind == "decode" and len(s.entries) == 3]
    assert shared, "no decode step carried all three people"
    seat = tiny_round.seat(2)
    assert seat is not None and seat.batch == 3 and seat.steps == tuple(s.index for s in tiny_round.steps_of(2))
    assert "in a batch of 3" in seat.sentence() and "alone" in seat.sentence()
    assert seat.steps_text == f"0–{len(tiny_round.steps) - 1}"  # every step, from the shared prefill on
    assert tiny_round.decode_steps_by_batch()[3] and "A decode step of 3 requests" in tiny_round.batch_sentence()


def test_the_round_goes_to_json_and_back(tiny_round: RoomRound) -> None:
    data = json.loads(tiny_round.to_json())
    assert data["summary"] == {"lanes": 3, "steps": len(tiny_round.steps), "all_same_tokens": True}
    assert data["lanes"][0]["request"] == "p1" and "itl_p50_s" in data["lanes"][0]
    assert RoomRound.from_json(tiny_round.to_json()) == tiny_round


def test_each_person_sees_only_their_own_prompt_and_answer(tiny_round: RoomRound) -> None:
    seen = tiny_round.seen_by(2)
    mine, others = seen.lane_of(2), [lane for lane in seen.lanes if lane.participant != 2]
    assert mine is not None and mine.prompt_text == TINY_PROMPTS[1] and mine.token_ids
    assert others and all(lane.prompt_text == lane.answer_text == "" and lane.token_ids == () for lane in others)
    assert all(lane.new_tokens == TINY_NEW_TOKENS and lane.token_times_s for lane in others)  # times stay
    text = seen.to_json()
    assert TINY_PROMPTS[0] not in text and TINY_PROMPTS[2] not in json.loads(text)["lanes"][2]["prompt_text"]
    assert all(lane.prompt_text for lane in tiny_round.seen_by(1, show_prompts=True).lanes)  # the presenter's choice


def test_a_prompt_over_the_token_cap_is_left_out_with_one_line(tiny_lm: LoadedModel) -> None:
    long_prompt = "word " * 80
    ask = ask_for(("short one", long_prompt), 2, max_prompt_tokens=40)
    served = run_round(tiny_lm, ask)
    assert [lane.participant for lane in served.lanes] == [1]
    left = served.left_out_of(2)
    assert left is not None and "over this server's 40" in left.reason and long_prompt not in left.reason
    with pytest.raises(BadInput, match="No prompt of round 1 can be served"):
        run_round(tiny_lm, ask_for((long_prompt,), 2, max_prompt_tokens=40))


def round_on_owner(owner: OwnerInThread, model: str, ask: RoundAsk) -> tuple[list[str], dict[str, object]]:
    """The "room" job as the Room page sends it: the events' names, and the last event's data."""
    body = {"model": model, "device": "cpu", "dtype": "float32", "round": ask.to_dict()}
    events = list(owner.client().job("room", body))
    return [e.name for e in events], events[-1].data


def test_a_round_on_the_device_owner_comes_back_as_the_record_the_page_keeps(tiny_llama_dir: Path) -> None:
    owner = OwnerInThread()
    try:
        ask = ask_for(TINY_PROMPTS, TINY_NEW_TOKENS)
        assert RoundAsk.from_dict(json.loads(json.dumps(ask.to_dict()))) == ask  # the body survives the wire
        names, done = round_on_owner(owner, str(tiny_llama_dir), ask)
        assert names[-1] == "done" and "progress" in names, names
        served = RoomRound.from_dict(done)  # type: ignore[arg-type]
        assert [lane.participant for lane in served.lanes] == [1, 2, 3] and served.all_same_tokens
        assert [lane.prompt_text for lane in served.lanes] == list(TINY_PROMPTS)
        assert all(lane.new_tokens == TINY_NEW_TOKENS for lane in served.lanes)
        room_turns = [t for t in owner.owner.queue.turns if t.what == "room"]
        assert len(room_turns) == 1 and room_turns[0].passes >= len(served.steps)  # one turn, its passes logged
    finally:
        owner.stop()


def test_the_owner_holds_a_round_to_its_own_room_size_and_caps_before_anything_runs(tiny_llama_dir: Path) -> None:
    policy = HostedPolicy.from_env({"EXPLORER_HOSTED": "1", "EXPLORER_MAX_ROOM_SIZE": "2"})
    owner = OwnerInThread(policy)
    try:
        names, refused = round_on_owner(owner, str(tiny_llama_dir), ask_for(TINY_PROMPTS, 2))
        assert names[-1] == "error" and "this device serves at most 2" in str(refused["message"])
        too_many = (policy.max_new_tokens or 0) + 1
        names, refused = round_on_owner(owner, str(tiny_llama_dir), ask_for(TINY_PROMPTS[:2], too_many))
        assert names[-1] == "error" and "new tokens per answer" in str(refused["message"])
        assert not owner.owner.queue.turns and not owner.owner.models  # refused before any turn or load
        names, refused = round_on_owner(owner, str(tiny_llama_dir), ask_for((), 2))
        assert names[-1] == "error" and "no prompts" in str(refused["message"])
    finally:
        owner.stop()


def test_the_builders_draw_a_lane_per_person_with_the_viewers_own_first(tiny_round: RoomRound) -> None:
    assert charts.lane_order(tiny_round, 2) == ["you", "participant 1", "participant 3"]
    lanes = charts.lanes_frame(tiny_round, 2)
    assert set(lanes["lane"]) == {"you", "participant 1", "participant 3"}
    assert lanes[lanes["you"]]["lane"].eq("you").all() and len(lanes) == sum(len(s.entries) for s in tiny_round.steps)
    spec = charts.lanes_chart(lanes, charts.lane_order(tiny_round, 2)).to_dict()
    assert spec["layer"][1]["transform"] == [{"filter": "datum.you"}]  # the viewer's own row outlined
    tokens = charts.tokens_frame(tiny_round, 2)
    assert charts.tokens_chart(tokens).to_dict() and charts.step_times_chart(tokens).to_dict()
    assert tokens.groupby("request")["tokens"].sum().to_dict() == {
        charts.lane_label(lane.participant, 2): lane.prompt_tokens + lane.new_tokens - 1 for lane in tiny_round.lanes
    }
    batches = charts.batch_frame(tiny_round)
    assert set(batches[batches["run"] == charts.ALONE]["batch"]) == {1} and 3 in set(batches["batch"])
    assert charts.batch_chart(batches).to_dict()
    seats = charts.seats_frame(tiny_round, 2)
    assert list(seats["person"]) == ["you", "participant 1", "participant 3"] and seats["same_tokens_as_alone"].all()
    assert list(charts.prompts_frame(tiny_round.seen_by(2), 2)["person"]) == ["you"]
    assert charts.lane_order(tiny_round, None) == ["participant 1", "participant 2", "participant 3"]


# --- the embedded model ----------------------------------------------------------------------------------------------
EMBEDDED_PROMPTS = ("Name one fruit.", "What is the capital of France?", "Count from one to five.")


@pytest.mark.slow
def test_a_round_of_three_on_the_embedded_model_gives_each_its_greedy_generate_tokens(real_lm: LoadedModel) -> None:
    """The issue's correctness claim on the real model: each person's round tokens equal their chat-template prompt
    run alone with transformers' `generate(do_sample=False)` (both stop at the end-of-sequence token)."""
    served = run_round(real_lm, ask_for(EMBEDDED_PROMPTS, 8))
    for lane, prompt in zip(served.lanes, EMBEDDED_PROMPTS):
        ids = tuple(tokenize(real_lm, prompt, use_chat_template=True))
        assert list(lane.token_ids) == hf_greedy_tokens(real_lm, ids, 8), lane.difference
        assert lane.same_tokens, lane.difference
    assert "Paris" in served.lane_of(2).answer_text  # type: ignore[union-attr]
    seat = served.seat(1)
    print(f"\n[room] {served.batch_sentence()}\n[room] participant 1: {seat.sentence() if seat else ''}")
