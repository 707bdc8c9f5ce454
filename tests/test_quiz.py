"""The quiz: well-formed questions, grading, evidence computed from a tiny model's real run, and the page."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from explorer.core.attention import AttentionMaps, capture_attention
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, Trace
from explorer.core.units import human_bytes, ms
from explorer.teach import quiz
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

PAGE = "pages/check_yourself.py"
NEW_TOKENS = 8


# --- the questions --------------------------------------------------------------------------------------------------
def test_questions_are_well_formed() -> None:
    assert 6 <= len(quiz.QUESTIONS) <= 10
    assert len({q.key for q in quiz.QUESTIONS}) == len(quiz.QUESTIONS)
    assert set(quiz.EVIDENCE) == {q.key for q in quiz.QUESTIONS}  # every question can be checked against a run
    for q in quiz.QUESTIONS:
        assert len(q.choices) == 4 and len(set(q.choices)) == 4
        assert 0 <= q.correct < 4 and q.common_wrong != q.correct
        assert q.common_wrong is None or 0 <= q.common_wrong < 4
        assert q.explanation and q.origin and "seed" not in q.origin  # plain words a visitor can read
    # The right answer is not always in the same place.
    assert len({q.correct for q in quiz.QUESTIONS}) == 4


def test_the_named_wrong_answers_are_among_the_choices() -> None:
    wrong = {q.key: q.choices[q.common_wrong] for q in quiz.QUESTIONS if q.common_wrong is not None}
    # Only where a source names one: interview answers to avoid and three common misconceptions.
    assert set(wrong) == {
        "decode-mask",
        "prefill-like-training",
        "decode-slow",
        "decode-cheap",
        "prefill-once",
        "same-model",
    }
    assert quiz.grade(quiz.question("score-shapes"), 0) == quiz.Verdict(False, False, "Not quite.")
    assert "every attention call applies the same lower triangle" in wrong["decode-mask"]
    assert "bidirectional" in wrong["prefill-like-training"]
    assert "recomputes the whole prompt" in wrong["decode-slow"]
    assert "cost is in its prefill" in wrong["decode-cheap"]  # "decode is cheap"
    assert "negligible" in wrong["prefill-once"]  # "prefill doesn't matter because it runs once"
    assert "a decode model writes the answer" in wrong["same-model"]  # "different models"


def test_grading() -> None:
    q = quiz.question("decode-mask")
    assert quiz.grade(q, q.correct) == quiz.Verdict(True, False, "Right.")
    common = quiz.grade(q, q.common_wrong)
    assert not common.correct and common.common_wrong
    assert common.headline == "That is a wrong answer commonly given (it appears in interview Q&A on LLM inference)."
    other = next(i for i in range(4) if i not in (q.correct, q.common_wrong))
    assert quiz.grade(q, other) == quiz.Verdict(False, False, "Not quite.")
    with pytest.raises(ValueError, match="not one of the 4 answers"):
        quiz.grade(q, 4)
    bound = quiz.question("bound")
    assert quiz.score({"decode-mask": q.correct, "bound": (bound.correct + 1) % 4}) == (1, 2)
    assert quiz.score({}) == (0, 0)


# --- evidence from a real run ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> tuple[Trace, AttentionMaps]:
    trace = generate(tiny_lm, check_request(tiny_lm, Request("Check yourself", max_new_tokens=NEW_TOKENS)), cpu_figures)
    return trace, capture_attention(tiny_lm, trace)


def one_token(trace: Trace) -> Trace:
    return replace(trace, repeats=(trace.passes[:1],), shown_repeat=0)


def test_no_run_no_evidence() -> None:
    assert all(quiz.evidence(q.key, None) is None for q in quiz.QUESTIONS)


def test_the_example_decode_pass_is_pass_5_or_the_last(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    assert quiz.example_decode(trace) is trace.passes[5]
    short = replace(trace, repeats=(trace.passes[:3],), shown_repeat=0)
    assert quiz.example_decode(short) is short.passes[2]
    assert quiz.example_decode(one_token(trace)) is None


def test_mask_evidence_quotes_the_runs_shapes(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    T, H, p5 = trace.prompt_len, trace.model.heads, trace.passes[5]
    text = quiz.evidence("decode-mask", trace, maps).text
    assert f"Your prefill's scores were [1, {H}, {T}, {T}]: {T * (T - 1) // 2:,} of each head's {T * T:,}" in text
    assert p5.cache_len_after == T + 5  # the fed token's own key is in the cache it attends over
    assert f"Your decode pass 5 had scores [1, {H}, 1, {T + 5}]" in text
    assert text.endswith("the largest probability above the diagonal is 0.")  # exactly zero, captured
    without_maps = quiz.evidence("decode-mask", trace, None).text
    assert "captured" not in without_maps and "[1, 4, 1," in without_maps


def test_shape_evidence(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    T, H = trace.prompt_len, trace.model.heads
    last = trace.passes[-1]
    assert quiz.evidence("score-shapes", trace).text == (
        f"Your prompt had {T} tokens: prefill scores [1, {H}, {T}, {T}], first decode pass [1, {H}, 1, {T + 1}], "
        f"last decode pass (pass {last.index}) [1, {H}, 1, {last.cache_len_after}]."
    )
    assert "no decode pass followed" in quiz.evidence("score-shapes", one_token(trace)).text


def test_cost_evidence_uses_the_modelled_cost(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    p5 = trace.passes[5]
    slow = quiz.evidence("decode-slow", trace).text
    assert f"read {human_bytes(p5.cost.weight_bytes_read)} of weights" in slow
    moved = f"moved {human_bytes(p5.cost.kv_bytes_moved)} of KV traffic (= "  # traffic, beside the cache (issue 42)
    assert moved in slow and f"the {human_bytes(p5.kv_cache_bytes)} cache)" in slow and f"took {ms(p5.wall_s)}" in slow
    bound = quiz.evidence("bound", trace).text
    assert f"ridge point is {trace.device.ridge_point_flops_per_byte:.1f} FLOP/byte" in bound
    assert f"Your prefill: {trace.prefill.cost.arithmetic_intensity:.1f} FLOP/byte, {trace.prefill.cost.bound}" in bound
    assert f"decode pass 5: {p5.cost.arithmetic_intensity:.2f} FLOP/byte, memory-bound" in bound
    once = quiz.evidence("prefill-once", trace).text
    assert f"{trace.prefill.cost.flops / p5.cost.flops:.0f}× the FLOPs of your decode pass 5" in once


def test_decode_evidence_says_how_far_above_its_memory_floor_each_pass_ran(run: tuple[Trace, AttentionMaps]) -> None:
    """The explanation states the floor as the general rule; the run's own passes say how far above it they sat."""
    trace, _ = run
    p5 = trace.passes[5]
    factors = [p.wall_s / p.cost.t_memory_s for p in trace.decodes]
    slow = quiz.evidence("decode-slow", trace).text
    assert f"took {ms(p5.wall_s)}, {p5.wall_s / p5.cost.t_memory_s:.1f}× its memory floor." in slow
    assert f"took {min(factors):.1f}×–{max(factors):.1f}× their memory floor (median {np.median(factors):.1f}×)" in slow
    explanation = quiz.question("decode-slow").explanation
    assert "lasts as long as the bytes" not in explanation and "in general (the roofline model)" in explanation
    faster = tuple(replace(p, wall_s=p.cost.t_memory_s / 2) for p in trace.passes)
    busy = quiz.evidence("decode-slow", replace(trace, repeats=(faster,), shown_repeat=0)).text
    assert "0.5×–0.5×" in busy and "faster than the device figures predict: the figures may have been taken" in busy


def test_bound_evidence_says_when_even_the_prefill_is_memory_bound(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    prefill = trace.prefill
    compute_heavy = replace(prefill, cost=replace(prefill.cost, t_compute_s=prefill.cost.t_memory_s * 2))
    memory_heavy = replace(prefill, cost=replace(prefill.cost, t_compute_s=prefill.cost.t_memory_s / 2))
    for p, bound in ((compute_heavy, "compute"), (memory_heavy, "memory")):
        text = quiz.evidence_bound(replace(trace, repeats=((p, *trace.decodes),), shown_repeat=0), None).text
        assert f"FLOP/byte, {bound}-bound. Your decode pass 5" in text
        assert ("even the prefill sits below the ridge" in text) == (bound == "memory")


def test_time_evidence_adds_up(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    text = quiz.evidence("decode-cheap", trace).text
    after_first = sum(trace.itl_s)
    assert f"the {NEW_TOKENS - 1} decode steps after it took {ms(after_first)} together" in text
    assert f"{after_first / trace.e2e_s:.0%} of the {ms(trace.e2e_s)} end to end" in text
    assert after_first + trace.ttft_s == pytest.approx(trace.e2e_s)


def test_kv_growth_evidence_is_measured_per_pass(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    m = trace.model
    text = quiz.evidence("kv-growth", trace).text
    assert f"grew by exactly {m.kv_bytes_per_token:,} bytes at every decode pass" in text
    assert f"2 × {m.layers} × {m.kv_heads} × {m.head_dim} × {m.bytes_per_element} = {m.kv_bytes_per_token:,}" in text
    uneven = replace(trace.passes[2], kv_cache_bytes=trace.passes[2].kv_cache_bytes + 1)
    odd = replace(trace, repeats=(trace.passes[:2] + (uneven,) + trace.passes[3:],), shown_repeat=0)
    assert "exactly" not in quiz.evidence("kv-growth", odd).text  # a wrong measurement is shown, not hidden


def test_kv_growth_speaks_of_grouped_query_attention_only_for_a_model_that_groups(
    run: tuple[Trace, AttentionMaps],
) -> None:
    trace, _ = run
    assert trace.model.is_gqa  # the tiny Llama: 4 query heads share 2 KV heads
    assert "4 query heads share 2 KV heads" in quiz.evidence("kv-growth", trace).text
    mha = replace(trace, model=replace(trace.model, kv_heads=trace.model.heads))
    assert "grouped-query" not in quiz.evidence("kv-growth", mha).text
    assert "grouped-query" not in quiz.question("kv-growth").explanation  # the same text for every model


def test_same_model_evidence(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    text = quiz.evidence("same-model", trace).text
    assert f"All {NEW_TOKENS} passes of your run used one model, {trace.model.display_name}" in text
    # The tiny Llama's embedding table is not tied: each pass reads only the rows of the tokens it feeds.
    assert not trace.model.tied_embeddings and "apart from the embedding rows" in text
    tied = replace(trace, repeats=(tuple(replace(p, cost=trace.decodes[0].cost) for p in trace.passes),))
    assert f"Each pass read the same {human_bytes(trace.decodes[0].cost.weight_bytes_read)}" in (
        quiz.evidence("same-model", tied).text
    )


def test_every_question_has_evidence_for_a_one_token_run(run: tuple[Trace, AttentionMaps]) -> None:
    trace = one_token(run[0])
    for q in quiz.QUESTIONS:
        found = quiz.evidence(q.key, trace)
        assert found is not None and found.text
    assert quiz.evidence("decode-slow", trace).text.startswith("Your run made one token")


# --- the page -------------------------------------------------------------------------------------------------------
def test_page_without_a_run_grades_and_explains() -> None:
    at = open_page(PAGE)
    assert len(at.radio) == len(quiz.QUESTIONS) and all(r.value is None for r in at.radio)
    q0, q1 = quiz.QUESTIONS[0], quiz.QUESTIONS[1]
    at.radio(key=f"quiz-{q0.key}-0").set_value(q0.correct).run()
    at.radio(key=f"quiz-{q1.key}-0").set_value(q1.common_wrong).run()
    assert [s.value for s in at.success] == ["Right."]
    assert at.warning[0].value.startswith("That is a wrong answer commonly given (it appears in")
    assert q1.choices[q1.correct] in at.warning[0].value
    markdown = [m.value for m in at.markdown]
    assert q0.explanation in markdown and q1.explanation in markdown
    assert f"**1 of 2** answered right · {len(quiz.QUESTIONS) - 2} to go" in markdown
    assert not at.text  # no run, no evidence
    at.button(key="quiz-start-over").click().run()
    assert len(at.radio) == len(quiz.QUESTIONS) and all(r.value is None for r in at.radio)


def test_page_shows_evidence_from_the_run(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    at = open_page(PAGE, ui_state.RunResult(trace, maps, "", "run 1: check"))
    for i, q in enumerate(quiz.QUESTIONS):
        at.radio[i].set_value(q.correct).run()
    assert not at.exception and not at.error
    assert [t.value for t in at.text] == [quiz.evidence(q.key, trace, maps).text for q in quiz.QUESTIONS]
    assert f"**{len(quiz.QUESTIONS)} of {len(quiz.QUESTIONS)}** answered right · 0 to go" in [
        m.value for m in at.markdown
    ]
