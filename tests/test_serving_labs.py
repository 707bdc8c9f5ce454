"""The serving labs on the tiny model: the naive loop and every batch give the same tokens as the engine alone."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from explorer.batch import BatchConfig, prompt_set, ridge_batch, run_batch_sweep
from explorer.batch import validate as validate_batch
from explorer.engine import Request
from explorer.errors import BadInput
from explorer.loading import LoadedModel
from explorer.nocache import run_nocache
from explorer.roofline import weight_bytes_read
from explorer.trace import DeviceProfile


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
    from explorer.roofline import pass_cost

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
        validate_batch(tiny_lm, cpu_figures, replace(BatchConfig(batch_sizes=(1, 2), new_tokens=8), **change))
