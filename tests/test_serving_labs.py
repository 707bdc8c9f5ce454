"""The serving labs on the tiny model: the naive loop and every batch give the same tokens as the engine alone, the
padded path gives each row its solo tokens, the estimates count what runs, and the device is passed on only between
individually timed passes, with the request's clock paused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from explorer.charts.serving import growth_sentence, nocache_frame
from explorer.core.batched import PaddedBatch, run_batched
from explorer.core.engine import Request, warm_up
from explorer.core.errors import BadInput
from explorer.core.lab_progress import LabProgress
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import ridge_batch, weight_bytes_read
from explorer.core.trace import DeviceProfile
from explorer.labs import nocache_result
from explorer.labs.batch import (
    ESTIMATE_SLACK,
    BatchConfig,
    mismatch_note,
    one_run_s,
    plan_sweep,
    prompt_set,
    run_batch_sweep,
)
from explorer.labs.batch import validate as validate_batch
from explorer.labs.nocache import NoCacheResult, Step, estimate_s, loop_floors_s, run_nocache
from tests.test_roofline import smollm2_by_hand


def test_the_naive_loop_makes_the_same_tokens_and_processes_the_whole_sequence(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    result = run_nocache(tiny_lm, cpu_figures, Request("hello", max_new_tokens=10, use_chat_template=False))
    assert result.same_tokens and len(result.cached) == len(result.uncached) == 10
    assert [s.tokens_processed for s in result.uncached] == list(range(result.prompt_len, result.prompt_len + 10))
    assert [s.tokens_processed for s in result.cached] == [result.prompt_len] + [1] * 9
    # Modelled FLOPs: without a cache every step recomputes the whole sequence, so the sums grow much faster.
    assert sum(s.flops for s in result.uncached) > 3 * sum(s.flops for s in result.cached)
    data = json.loads(result.to_json())
    assert data["cached"]["token_ids"] == data["uncached"]["token_ids"]
    assert len(data["cached"]["step_s"]) == len(data["uncached"]["step_s"]) == 10
    assert data["kv_cache_bytes"] == [tiny_lm.info.kv_bytes_per_token * s.position for s in result.cached]
    projected = data["projection_s_modelled"]
    assert set(projected) == {"500", "2000"}
    assert all(0 < by_loop["cached"] <= by_loop["uncached"] for by_loop in projected.values())
    assert data["projection_method"].startswith("modelled: each step's FLOPs and bytes up to N new tokens")
    assert "past this model's context of 256 tokens" in data["projection_method"]  # the tiny model's 256


def test_the_naive_loop_refuses_what_it_cannot_do(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    with pytest.raises(BadInput, match="context"):
        run_nocache(tiny_lm, cpu_figures, Request("hello", max_new_tokens=300, use_chat_template=False))
    with pytest.raises(BadInput, match="budget"):
        run_nocache(tiny_lm, cpu_figures, Request("hello", max_new_tokens=200), budget_s=1e-9)


@pytest.mark.parametrize("distinct", [True, False])
def test_every_request_in_a_batch_gets_its_solo_tokens(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, distinct: bool
) -> None:
    config = BatchConfig(batch_sizes=(1, 3, 4), prompt_tokens=8, new_tokens=6, distinct_prompts=distinct)
    result = run_batch_sweep(tiny_lm, cpu_figures, config)
    assert result.every_request_matches_solo
    assert len(result.prompts) == (4 if distinct else 1)
    for run in result.runs:
        assert len(run.token_ids) == run.batch_size and all(len(t) == 6 for t in run.token_ids)
        assert len(run.decode_step_s) == 5 and run.tokens_per_s > 0
        assert all(p.batch == run.batch_size for p in run.passes)
        # One cache of batch B: B x the bytes of one sequence, measured from the real tensors.
        assert run.kv_cache_bytes == run.batch_size * tiny_lm.info.kv_bytes_per_token * (8 + 5)
        # Weights are read once per step whatever B is (only the B embedding rows gathered differ); KV and FLOPs grow.
        assert run.passes[1].cost.weight_bytes_read == weight_bytes_read(tiny_lm.info, run.batch_size)
        assert weight_bytes_read(tiny_lm.info, run.batch_size) < 1.01 * weight_bytes_read(tiny_lm.info, 1)
        assert run.passes[1].cost.flops == run.batch_size * result.runs[0].passes[1].cost.flops
    data = json.loads(result.to_json())
    assert [r["batch_size"] for r in data["results"]] == [1, 3, 4]
    assert {"prefill_s", "decode_step_s", "tokens_per_s", "token_ids"} <= set(data["results"][0])


def test_prompts_are_equal_length_and_distinct(tiny_lm: LoadedModel) -> None:
    rows = prompt_set(tiny_lm, 16, 5, distinct=True)
    assert {len(r) for r in rows} == {16} and len({tuple(r) for r in rows}) == 5
    assert len({tuple(r) for r in prompt_set(tiny_lm, 16, 5, distinct=False)}) == 1


def test_the_ridge_batch_is_where_decode_turns_compute_bound(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    from explorer.core.roofline import pass_cost

    batch = ridge_batch(lambda b: pass_cost(tiny_lm.info, cpu_figures, 1, 20, batch=b))
    if batch is not None:
        assert pass_cost(tiny_lm.info, cpu_figures, 1, 20, batch=batch).bound == "compute"
        assert batch == 1 or pass_cost(tiny_lm.info, cpu_figures, 1, 20, batch=batch - 1).bound == "memory"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_sizes": (0, 2)}, "between 1 and"),
        ({"batch_sizes": ()}, "between 1 and"),
        ({"new_tokens": 1}, "2 new tokens"),
        ({"prompt_tokens": 250}, "context"),
        ({"kv_cap_bytes": 10}, "cap"),
        ({"budget_s": 1e-9}, "budget"),
    ],
)
def test_bad_batch_input_is_refused_before_anything_runs(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, change: dict[str, object], message: str
) -> None:
    with pytest.raises(BadInput, match=message):
        validate_batch(tiny_lm.info, cpu_figures, replace(BatchConfig(batch_sizes=(1, 2), new_tokens=8), **change))


def test_the_naive_loop_needs_two_decode_steps(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    with pytest.raises(BadInput, match="at least 3 new tokens"):
        run_nocache(tiny_lm, cpu_figures, Request("hello", max_new_tokens=2, use_chat_template=False))


HAND_DEVICE = DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")


def steps_with(times_ms: list[float], prompt_len: int = 4) -> tuple[Step, ...]:
    return tuple(Step(prompt_len + k, 1, t / 1e3, 1, 1, 7) for k, t in enumerate(times_ms))


def hand_result(cached_ms: list[float], uncached_ms: list[float], estimate_s: float = 1.5) -> NoCacheResult:
    """SmolLM2's shapes on a device of 1 TFLOP/s and 100 GB/s; the frames and sentences read no pass of the trace."""
    trace = SimpleNamespace(passes=(), model=smollm2_by_hand(), device=HAND_DEVICE, to_dict=dict)  # JSON: {}
    return NoCacheResult(4, steps_with(cached_ms), steps_with(uncached_ms), trace, estimate_s)  # type: ignore[arg-type]


def floors_ms(steps: int, cached: bool) -> list[float]:
    return [f * 1e3 for f in loop_floors_s(smollm2_by_hand(), HAND_DEVICE, 4, steps, cached)]


def test_the_projection_scales_each_steps_floor_by_the_rate_the_run_achieved() -> None:
    """Steps measured at 1.5x (cached) and 2x (naive) their floor: the projection is those floors to N times 1.5 and
    2, so at N = the measured steps it gives back the measured totals."""
    cached, naive = [1.5 * f for f in floors_ms(10, True)], [2 * f for f in floors_ms(10, False)]
    result = hand_result(cached, naive)
    assert (result.cached_scale, result.uncached_scale) == (pytest.approx(1.5), pytest.approx(2.0))
    at_ten = result.project(10)
    assert at_ten.cached_s == pytest.approx(sum(cached) / 1e3) and at_ten.uncached_s == pytest.approx(sum(naive) / 1e3)
    at_500 = result.project(500)
    assert at_500.uncached_s == pytest.approx(2 * sum(floors_ms(500, False)) / 1e3)
    assert at_500.cached_s == pytest.approx(1.5 * sum(floors_ms(500, True)) / 1e3) and at_500.clamped_steps == 0
    assert "took 1.50x their floor with the cache and 2.00x without" in result.projection_method


def test_a_cached_step_is_never_projected_slower_than_the_naive_one() -> None:
    """A run whose cached steps were all overhead (30x their floor) beside a naive loop at 1x: early cached steps
    would be projected slower than the naive steps at the same length; they are held at the naive step's time."""
    result = hand_result([30 * f for f in floors_ms(10, True)], floors_ms(10, False))
    for n in (10, 500, 2000):
        projected = result.project(n)
        assert projected.cached_s <= projected.uncached_s and projected.clamped_steps > 0
    assert "is held at the naive step's time" in result.projection_method
    assert json.loads(result.to_json())["projection_clamped_steps"]["500"] == result.project(500).clamped_steps


def test_a_page_asking_for_the_same_projection_again_does_its_arithmetic_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A No-cache page asks for the 2,000-token projection for its chart, caption, plain line and JSON on every draw:
    each step's floor is worked out the first time only."""
    result = hand_result([1.5 * f for f in floors_ms(10, True)], [2 * f for f in floors_ms(10, False)])
    first = result.project(2000)
    worked: list[int] = []
    for floor in ("cached_floor_s", "naive_floor_s"):
        original = getattr(nocache_result, floor)
        monkeypatch.setattr(nocache_result, floor, lambda *a, original=original: worked.append(1) or original(*a))
    assert result.project(2000) == first
    assert result.projection_s(2000) == {"cached": first.cached_s, "uncached": first.uncached_s}
    assert worked == []
    result.project(2001)  # a length not asked before: each loop's floors are worked out
    assert len(worked) == 2 * 2001


@pytest.mark.parametrize(
    ("took_s", "words"),
    [
        (42.0, "the naive loop took 42.0 s against an estimate of 4.1 s (10.2x): its passes ran below the device's"),
        (2.0, "took 2.0 s against an estimate of 4.1 s: faster than the device figures predict: the figures may"),
    ],
)
def test_the_result_says_how_the_naive_loop_compared_with_its_estimate(took_s: float, words: str) -> None:
    result = hand_result([10.0] * 4, [took_s * 1e3 / 4] * 4, estimate_s=4.1)
    assert words in result.estimate_note and json.loads(result.to_json())["estimate_note"] == result.estimate_note


def test_the_estimate_is_the_naive_loops_floor_at_the_device_figures() -> None:
    assert estimate_s(smollm2_by_hand(), HAND_DEVICE, 4, 10) == pytest.approx(sum(floors_ms(10, False)) / 1e3)


def spin_for(seconds: float) -> subprocess.Popen[bytes]:
    """A CPU-bound process beside the test: the machine is busy while the lab runs, bounded if the test dies."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def test_the_naive_loop_is_projected_to_outgrow_the_cached_one_on_a_busy_machine(
    real_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    """The issue's command, with a spinning process beside it: the naive projection exceeds the cached one at 500
    and 2,000 new tokens, and its lead at 2,000 is at least twice its lead at 500 (the naive loop's total grows with
    the square of the length, the cached one's about linearly)."""
    warm_up(real_lm)
    spinner = spin_for(300)
    try:
        request = Request("The history of the printing press", max_new_tokens=24, use_chat_template=False)
        result = run_nocache(real_lm, cpu_figures, request)
    finally:
        spinner.kill()
        spinner.wait()
    at_500, at_2000 = result.project(500), result.project(2000)
    assert at_500.uncached_s > at_500.cached_s and at_2000.uncached_s > at_2000.cached_s
    assert at_2000.uncached_s / at_2000.cached_s >= 2 * at_500.uncached_s / at_500.cached_s
    assert f"its 24 measured steps took {result.cached_scale:.2f}x their floor" in result.projection_method


@pytest.mark.parametrize(
    ("cached_growth_ms", "uncached_growth_ms", "clearly"),
    [(0.1, 5.0, True), (0.0, 0.5, False), (3.0, 5.0, False), (-1.0, 1.5, True)],
)
def test_clearly_more_means_a_stated_margin(cached_growth_ms: float, uncached_growth_ms: float, clearly: bool) -> None:
    """Over 2x the cached growth and over 1 ms, not any positive difference; the sentence shows both numbers."""
    first, last = [10.0] * 9, [10.0] * 8  # a prefill, 8 early decode steps, 8 late ones: 16 decode steps
    result = hand_result(
        [*first, *(t + cached_growth_ms for t in last)], [*first, *(t + uncached_growth_ms for t in last)]
    )
    assert result.compares_edges and result.grows_clearly_more is clearly
    sentence = growth_sentence(result)
    assert f"{uncached_growth_ms:+.2f} ms against {cached_growth_ms:+.2f} ms" in sentence
    assert ("grew by clearly more" in sentence) is clearly and "over 2x the cached growth and over 1 ms" in sentence


def test_short_runs_say_why_they_are_not_compared() -> None:
    result = hand_result([10.0] * 10, [10.0 + k for k in range(10)])
    assert not result.compares_edges and not result.grows_clearly_more
    sentence = growth_sentence(result)
    assert "only 9 decode steps" in sentence and "first 8 decode steps" not in sentence
    assert json.loads(result.to_json())["growth_last8_minus_first8_s"] is None


def test_the_nocache_frame_has_modelled_bytes(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    result = run_nocache(tiny_lm, cpu_figures, Request("hello", max_new_tokens=4, use_chat_template=False))
    frame = nocache_frame(result)
    assert frame["bytes_moved"].tolist() == [s.bytes_moved for s in (*result.cached, *result.uncached)]
    assert result.estimate_s > 0 and json.loads(result.to_json())["estimate_s_modelled"] == result.estimate_s


def test_the_sweep_estimate_counts_one_solo_run_per_distinct_prompt(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    config = BatchConfig(batch_sizes=(1, 4, 8), prompt_tokens=8, new_tokens=6)
    distinct, repeated = (
        plan_sweep(tiny_lm.info, cpu_figures, config),
        plan_sweep(tiny_lm.info, cpu_figures, replace(config, distinct_prompts=False)),
    )
    assert (distinct.solo_runs, repeated.solo_runs) == (8, 1)
    solo_s = ESTIMATE_SLACK * one_run_s(tiny_lm.info, cpu_figures, config, 1)
    assert distinct.estimate_s - repeated.estimate_s == pytest.approx(7 * solo_s)
    assert distinct.largest_kv_cache_bytes == 8 * tiny_lm.info.kv_bytes_per_token * (8 + 6)


def solo_tokens(lm: LoadedModel, device: DeviceProfile, prompt: list[int], new_tokens: int) -> tuple[int, ...]:
    return tuple(p.token_id for p in run_batched(lm, device, [prompt], new_tokens).passes)


def test_the_padded_path_gives_every_row_its_solo_tokens(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    """Prompts of different lengths: left padding, the mask and the positions make each row compute what it would
    alone; prompts of one length give what the engine's batched step gives."""
    rows = [list(range(1, 4)), list(range(10, 22)), list(range(30, 37))]
    batch = PaddedBatch(tiny_lm, rows)
    steps = [batch.step() for _ in range(6)]
    for r, row in enumerate(rows):
        assert tuple(step[r] for step in steps) == solo_tokens(tiny_lm, cpu_figures, row, 6), r
    equal = [list(range(1, 9)), list(range(20, 28))]
    padded = PaddedBatch(tiny_lm, equal)
    padded_steps = [padded.step() for _ in range(5)]
    engine = run_batched(tiny_lm, cpu_figures, equal, 5)
    assert [list(p.batch_token_ids) for p in engine.passes] == padded_steps


def test_a_batched_token_that_differs_is_named_with_the_reason(tiny_lm: LoadedModel) -> None:
    note = mismatch_note(4, 2, (5, 6, 7), (5, 6, 9), tiny_lm.tokenizer)
    assert note.startswith("batch 4, request 2: token 2 is 7 ") and "9 " in note and "round differently" in note


class MakeWaySpy:
    """Counts the hand-overs and makes each one slow, as if another session ran meanwhile."""

    def __init__(self, wait_s: float) -> None:
        self.calls, self.wait_s = 0, wait_s

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(self.wait_s)


def test_the_labs_pass_the_device_on_between_passes_only_with_the_clock_paused(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    spy = MakeWaySpy(wait_s=0.2)
    result = run_nocache(
        tiny_lm,
        cpu_figures,
        Request("hello", max_new_tokens=4, use_chat_template=False),
        progress=LabProgress(lambda _fraction, _text: None, spy),
    )
    assert spy.calls == 8  # after each pass of both loops
    assert max(result.cached_trace.itl_s) < spy.wait_s  # the waits are not in the cached loop's latencies
    assert max(s.wall_s for s in (*result.cached, *result.uncached)) < spy.wait_s

    spy = MakeWaySpy(wait_s=0.2)
    reports: list[float] = []
    progress = LabProgress(lambda fraction, _text: reports.append(fraction), spy)
    sweep = run_batch_sweep(
        tiny_lm,
        cpu_figures,
        BatchConfig(batch_sizes=(1, 2), prompt_tokens=8, new_tokens=3),
        progress,
    )
    assert spy.calls == 3 * 4 and reports  # 2 solo references + 2 batch sizes, 3 passes each; reports do not pass on
    assert len(sweep.runs) == 2 and all(max(run.itl_s) < spy.wait_s for run in sweep.runs)
