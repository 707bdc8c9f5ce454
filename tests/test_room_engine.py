"""The Room served by an engine, without one: the alone answer's shapes, where a round's answer first differs and how
near a tie it was, the record's JSON both ways and what another person may see of it."""

from __future__ import annotations

import json

from explorer.labs.room_engine import Alone, EngineLane, EngineRound, difference, parse_alone
from explorer.remote import wire
from explorer.remote.endpoint import make_endpoint


def lane(participant: int, **changes: object) -> EngineLane:
    values = dict(
        participant=participant, prompt_text=f"prompt {participant}", answer_text="The sea.", ttft_s=0.2,
        chunk_arrivals_s=(0.2, 0.25, 0.32), output_tokens=3, prompt_tokens=34, cached_tokens=0,
        alone_text="The sea.", same_tokens=True,
    )  # fmt: skip
    return EngineLane(**{**values, **changes})  # type: ignore[arg-type]


def test_the_chat_and_completions_shapes_give_text_tokens_and_top_logprobs() -> None:
    chat = {
        "choices": [
            {
                "message": {"content": "The sea"},
                "logprobs": {
                    "content": [
                        {"token": "The", "logprob": -0.1, "top_logprobs": [{"token": "The", "logprob": -0.1},
                                                                          {"token": "A", "logprob": -2.5}]},
                        {"token": " sea", "logprob": -0.3, "top_logprobs": [{"token": " sea", "logprob": -0.3}]},
                    ]
                },
            }
        ]
    }  # fmt: skip
    got = parse_alone(chat, "chat")
    assert got == Alone("The sea", ("The", " sea"), ((("The", -0.1), ("A", -2.5)), ((" sea", -0.3),)))
    completions = {
        "choices": [{"text": " of", "logprobs": {"tokens": [" of"], "top_logprobs": [{" the": -1.3, " of": -1.2}]}}]
    }
    assert parse_alone(completions, "completions") == Alone(" of", (" of",), (((" of", -1.2), (" the", -1.3)),))


def test_the_first_difference_names_the_alone_token_and_how_near_the_tie_was() -> None:
    alone = Alone("The sea is", ("The", " sea", " is"), ((), ((" sea", -0.50), (" ocean", -0.52)), ()))
    assert difference("The sea is", alone) == ""
    said = difference("The ocean is", alone)
    assert said.startswith("Character 4 (the alone answer's token 1): the round wrote 'ocean is', alone 'sea is'.")
    assert "by 0.0200 in log-probability: a near tie" in said
    far = Alone("The sea is", alone.tokens, ((), ((" sea", -0.1), (" ocean", -3.0)), ()))
    assert "no near tie there" in difference("The ocean is", far)
    assert difference("The sea", alone) == "The same text, but the round's answer stopped after 7 characters."


def test_a_round_goes_to_json_and_back_and_hides_others_text() -> None:
    run = EngineRound("ABCD", 1, "http://127.0.0.1:8017/v1", "embedded", "chat", 12, 1.5, (lane(1), lane(2)))
    data = json.loads(run.to_json())
    assert data["kind"] == "engine" and data["lanes"][0]["itl_p50_s"] == run.lanes[0].itl_p50_s
    assert EngineRound.from_json(run.to_json()) == run
    seen = run.seen_by(2)
    assert seen.lane_of(2) == run.lane_of(2)
    other = seen.lane_of(1)
    assert other is not None and (other.prompt_text, other.answer_text, other.alone_text) == ("", "", "")
    assert other.ttft_s == 0.2 and other.cached_tokens == 0
    assert run.lanes[0].itl_s == (0.25 - 0.2, 0.32 - 0.25)


def test_fixed_length_asks_for_exactly_max_tokens() -> None:
    endpoint = make_endpoint("http://127.0.0.1:8017/v1", "embedded", "completions")
    fixed = json.loads(wire.StreamRequest(endpoint, "Hi", 24, fixed_length=True).body())
    assert (fixed["min_tokens"], fixed["ignore_eos"], fixed["max_tokens"]) == (24, True, 24)
    plain = json.loads(wire.StreamRequest(endpoint, "Hi", 24).body())
    assert "min_tokens" not in plain and "ignore_eos" not in plain


def test_a_lane_past_the_rounds_time_is_kept_but_not_compared() -> None:
    """The round's time limit covers its alone runs too: a lane reached after it keeps its own figures and says why
    it was not compared, with no request sent (no client is needed)."""
    from explorer.labs.room_engine import ROUND_LIMIT_S, lane_of
    from explorer.labs.room_records import RoundPrompt
    from explorer.remote.answer import Stream

    endpoint = make_endpoint("http://127.0.0.1:9/v1", "embedded", "chat")
    served = Stream((0.2, 0.3), ("Hello", " there"), (None, None), 2, 30, "length", cached_tokens=16)
    lane = lane_of(RoundPrompt(1, "Hi"), served, endpoint, 2, client=None, compare=False)  # type: ignore[arg-type]
    assert lane.same_tokens is None and lane.answer_text == "Hello there" and lane.ttft_s == 0.2
    assert lane.difference == f"Not compared: the round's {ROUND_LIMIT_S:.0f} s were used up."


def test_a_rounds_step_mix_is_the_engines_own_from_its_metrics() -> None:
    """The round's step mix is the /metrics delta's (a real vLLM pair), in the page's words; none without metrics."""
    from explorer.labs.room_engine import round_step_mix
    from explorer.remote.metrics import ServerDelta, parse_metrics
    from tests.test_metrics import VLLM_AFTER, VLLM_BEFORE

    delta = ServerDelta.between(parse_metrics(VLLM_BEFORE), parse_metrics(VLLM_AFTER))
    mix = delta.step_mix(max_in_flight=2)
    found = round_step_mix(delta, 2)
    assert mix is not None and found is not None
    assert found["steps with a prefill chunk"] == mix.with_prefill and found["decode-only steps"] == mix.decode_only
    assert sum(found.values()) == mix.steps > 0
    assert round_step_mix(None, 2) is None
