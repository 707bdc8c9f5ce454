"""The serving labs on the tiny model: the naive loop and every batch give the same tokens as the engine alone, the
padded path gives each row its solo tokens, the estimates count what runs, and the device is passed on only between
individually timed passes, with the request's clock paused."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from explorer.charts.serving import growth_sentence, nocache_frame
from explorer.core.batched import PaddedBatch, run_batched
from explorer.core.engine import Request
from explorer.core.errors import BadInput
from explorer.core.lab_progress import LabProgress
from explorer.core.loading import LoadedModel
from explorer.core.roofline import weight_bytes_read
from explorer.core.trace import DeviceProfile
from explorer.labs.batch import (
    ESTIMATE_SLACK,
    BatchConfig,
    mismatch_note,
    one_run_s,
    plan_sweep,
    prompt_set,
    ridge_batch,
    run_batch_sweep,
)
from explorer.labs.batch import validate as validate_batch
from explorer.labs.nocache import NoCacheResult, Step, run_nocache


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
    assert set(projected) == {"500", "2000"}  # modelled from the measured steps: positive, no ordering asserted
    assert all(v > 0 for by_loop in projected.values() for v in by_loop.values())


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

    batch = ridge_batch(tiny_lm, cpu_figures, 20)
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


def steps_with(times_ms: list[float], prompt_len: int = 4) -> tuple[Step, ...]:
    return tuple(Step(prompt_len + k, 1, t / 1e3, 1, 1, 7) for k, t in enumerate(times_ms))


def hand_result(cached_ms: list[float], uncached_ms: list[float]) -> NoCacheResult:
    no_passes = SimpleNamespace(passes=())  # the frames and sentences read no trace
    return NoCacheResult(4, steps_with(cached_ms), steps_with(uncached_ms), no_passes, estimate_s=1.5)  # type: ignore[arg-type]


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


class BetweenUnitsSpy:
    """Counts the hand-overs and makes each one slow, as if another session ran meanwhile."""

    def __init__(self, wait_s: float) -> None:
        self.calls, self.wait_s = 0, wait_s

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(self.wait_s)


def test_the_labs_pass_the_device_on_between_passes_only_with_the_clock_paused(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    spy = BetweenUnitsSpy(wait_s=0.2)
    result = run_nocache(
        tiny_lm,
        cpu_figures,
        Request("hello", max_new_tokens=4, use_chat_template=False),
        progress=LabProgress(lambda _fraction, _text: None, spy),
    )
    assert spy.calls == 8  # after each pass of both loops
    assert max(result.cached_trace.itl_s) < spy.wait_s  # the waits are not in the cached loop's latencies
    assert max(s.wall_s for s in (*result.cached, *result.uncached)) < spy.wait_s

    spy = BetweenUnitsSpy(wait_s=0.2)
    reports: list[float] = []
    progress = LabProgress(lambda fraction, _text: reports.append(fraction), spy)
    sweep = run_batch_sweep(
        tiny_lm,
        cpu_figures,
        BatchConfig(batch_sizes=(1, 2), prompt_tokens=8, new_tokens=3),
        progress,
    )
    assert spy.calls == 3 * 4 and reports  # 2 solo references + 2 batch sizes, 3 passes each; reports do not pass on
    assert all(max(run.itl_s) < spy.wait_s for run in sweep.runs)
