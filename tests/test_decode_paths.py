"""The decode paths beside the eager one: the static cache runs on a CPU with generate()'s tokens and reports what it
holds beside what it reserves; the graph path is refused off CUDA in one line; its pool of captured graphs keeps a
bounded number per model; the cost model follows the cache's layout."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from explorer.checks.greedy_reference import generate_tokens
from explorer.core import graph_decode
from explorer.core.engine import LiveRequest, Request, check_request, generate, run_to_end
from explorer.core.errors import BadInput
from explorer.core.figure_correction import recost
from explorer.core.graph_decode import (
    CAPACITY_STEP,
    CacheShape,
    GraphPool,
    default_decode_path,
    graph_refusal,
    static_capacity,
)
from explorer.core.loaded_model import LoadedModel
from explorer.core.report import format_trace
from explorer.core.roofline import kv_cache_bytes, kv_traffic_bytes, pass_cost, pass_flops
from explorer.core.trace import DeviceProfile, Trace
from explorer.models.loading import load_model
from tests.tiny_zoo import BY_NAME, save_tiny

PROMPT = "The cat sat on the mat and the dog"


def static_run(lm: LoadedModel, figures: DeviceProfile, new_tokens: int = 8) -> Trace:
    request = Request(PROMPT, max_new_tokens=new_tokens, use_chat_template=False, stop_at_eos=False)
    return generate(lm, check_request(lm, replace(request, decode_path="static")), figures)


def test_the_static_path_makes_generates_tokens_and_says_what_it_holds_and_reserves(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    trace = static_run(tiny_lm, cpu_figures)
    assert trace.decode_path == "static" and trace.kv_cache_capacity == CAPACITY_STEP
    assert trace.generated_token_ids == generate_tokens(tiny_lm, trace.prompt_token_ids, 8)
    per_position = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads of 16, float32
    for p in trace.passes:  # held: the positions written so far, as the growing cache would hold them
        assert p.kv_cache_bytes == kv_cache_bytes(trace.model, p.cache_len_after) == per_position * p.cache_len_after
        assert p.cost.kv_bytes_written == per_position * p.tokens_in  # written in place, not re-copied
    assert trace.allocated_kv_cache_bytes == per_position * CAPACITY_STEP  # reserved whole before the prefill
    text = format_trace(trace)
    assert f"decode  static: a StaticCache of {CAPACITY_STEP} positions per layer" in text
    assert f"allocated 131.1 kB (measured: a static cache reserves its {CAPACITY_STEP} positions up front)" in text


def test_the_embedded_model_on_the_static_path_matches_generate(
    real_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    request = Request("What is the capital of France?", max_new_tokens=6, stop_at_eos=False, decode_path="static")
    trace = generate(real_lm, check_request(real_lm, request), cpu_figures)
    assert trace.decode_path == "static"
    assert trace.generated_token_ids == generate_tokens(real_lm, trace.prompt_token_ids, 6)


@pytest.mark.parametrize("name", ["mistral-sliding", "qwen3-moe", "gpt2"])
def test_other_architectures_on_the_static_path_match_generate(
    name: str, tmp_path: Path, cpu_figures: DeviceProfile
) -> None:
    """A sliding-window model (its static layers hold at most their window), a mixture of experts, GPT-2."""
    lm = load_model(str(save_tiny(BY_NAME[name], tmp_path)), device="cpu", dtype="float32")
    trace = static_run(lm, cpu_figures, new_tokens=6)
    assert trace.generated_token_ids == generate_tokens(lm, trace.prompt_token_ids, 6)
    assert trace.final_kv_cache_bytes <= trace.allocated_kv_cache_bytes


def test_the_graph_path_is_refused_off_cuda_and_the_default_there_is_eager(tiny_lm: LoadedModel) -> None:
    with pytest.raises(BadInput, match="^CUDA graphs need a CUDA GPU and this model runs on cpu: choose the static"):
        check_request(tiny_lm, Request("abc", decode_path="graph"))
    assert default_decode_path(tiny_lm.info, tiny_lm.torch_device) == "eager"
    checked = check_request(tiny_lm, Request("abc", max_new_tokens=4))
    assert checked.request.decode_path == "eager" and checked.cache_capacity is None
    with pytest.raises(BadInput, match="Unknown decode path 'fast': use one of eager, static, graph"):
        check_request(tiny_lm, Request("abc", decode_path="fast"))  # type: ignore[arg-type]


def test_graphs_are_refused_where_a_replay_cannot_advance_the_cache(tiny_lm: LoadedModel) -> None:
    import torch

    cuda = torch.device("cuda")
    assert graph_refusal(tiny_lm.info, cuda) is None
    sliding = replace(tiny_lm.info, layer_windows=(4, 0))
    assert "sliding-window layers keep a host-side position count" in (graph_refusal(sliding, cuda) or "")
    assert default_decode_path(sliding, cuda) == "eager"


def test_a_static_cache_reserves_whole_steps_within_the_context() -> None:
    assert static_capacity(1, 8192) == static_capacity(CAPACITY_STEP, 8192) == CAPACITY_STEP
    assert static_capacity(CAPACITY_STEP + 1, 8192) == 2 * CAPACITY_STEP
    assert static_capacity(300, 260) == 260  # never past the model's context


def test_a_stepped_static_cache_forgets_one_position_and_writes_it_again(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    """Step mode's untimed twin: a decode, then `rewind_one`; the real pass then writes the same position."""
    checked = check_request(tiny_lm, Request("abc", max_new_tokens=4, use_chat_template=False, decode_path="static"))
    live = LiveRequest(tiny_lm, checked, cpu_figures, checked.request.sampling)
    live.step()
    kv = live.kv
    assert kv is not None and kv.rewindable
    length = kv.length
    import torch

    from explorer.core.engine import forward_on

    forward, on = forward_on(kv, first=False)
    forward(tiny_lm.model, torch.tensor([[live.passes[-1].token_id]]), on)
    assert kv.length == length + 1
    kv.rewind_one()
    assert kv.length == length
    run_to_end(live)
    assert tuple(p.token_id for p in live.passes) == generate_tokens(tiny_lm, checked.prompt_ids, 4)


@dataclass
class FakeCache:
    resets: int = 0

    def reset(self) -> None:
        self.resets += 1


@dataclass
class FakeCapture:
    shape: CacheShape
    cache: FakeCache


def test_the_pool_keeps_idle_graphs_per_shape_and_drops_the_least_recently_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = GraphPool(compile_steps=False)
    captured: list[CacheShape] = []

    def capture(_model: object, shape: CacheShape, _step: object = None) -> FakeCapture:
        captured.append(shape)
        return FakeCapture(shape, FakeCache())

    monkeypatch.setattr(graph_decode, "CapturedDecode", capture)
    said: list[str] = []
    first = pool.lease(None, CacheShape(1, 256), lambda _f, text: said.append(text))  # type: ignore[arg-type]
    assert "Capturing the decode step as a CUDA graph for 1 x 256 cache positions" in said[0]
    second = pool.lease(None, CacheShape(1, 256))  # type: ignore[arg-type]  # the first is leased: its own
    assert first is not second and pool.captures == 2
    pool.give_back(first)  # type: ignore[arg-type]
    assert first.cache.resets == 1
    assert pool.lease(None, CacheShape(1, 256)) is first and pool.captures == 2  # type: ignore[arg-type]
    for capacity in range(1, graph_decode.MAX_IDLE_GRAPHS + 2):
        pool.give_back(FakeCapture(CacheShape(1, capacity), FakeCache()))  # type: ignore[arg-type]
    kept = pool.idle_shapes()
    assert len(kept) == graph_decode.MAX_IDLE_GRAPHS and CacheShape(1, 1) not in kept


def test_the_cost_follows_the_cache_layout_by_hand(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    """Tiny Llama: 2 layers, 4 query heads, 2 KV heads of 16, float32: 256 bytes per layer and position."""
    info = tiny_lm.info
    # A decode at cache length 30 (31 positions after it).
    assert kv_traffic_bytes(info, 1, 30) == (2 * 2 * 31 * 256, 2 * 31 * 256)  # concatenating: re-copied
    assert kv_traffic_bytes(info, 1, 30, 1, "read_once") == (2 * 31 * 256, 2 * 1 * 256)
    assert kv_traffic_bytes(info, 1, 30, 1, "static", 256) == (2 * 256 * 256, 2 * 1 * 256)  # every reserved slot
    static = pass_cost(info, cpu_figures, 1, 30, cache_layout="static", cache_capacity=256)
    assert (static.kv_bytes_read, static.kv_bytes_written) == (131_072, 512)
    # FLOPs count the useful (causal) pairs on every layout (roofline's convention): the masked reserved slots a
    # static cache's kernel also runs over are bytes read, not work the model counts.
    assert static.flops == pass_cost(info, cpu_figures, 1, 30).flops == pass_flops(info, 1, 31)
    assert pass_cost(info, cpu_figures, 1, 30) == pass_cost(info, cpu_figures, 1, 30, cache_layout="concatenating")


def test_a_static_trace_keeps_its_layout_when_recosted_and_through_json(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    trace = static_run(tiny_lm, cpu_figures, new_tokens=4)
    halved = replace(cpu_figures, bandwidth_bytes_per_s=cpu_figures.bandwidth_bytes_per_s / 2)
    again = recost(trace, halved)
    assert [p.cost.kv_bytes_read for p in again.passes] == [p.cost.kv_bytes_read for p in trace.passes]
    back = Trace.from_json(trace.to_json())
    assert (back.decode_path, back.kv_cache_capacity) == ("static", CAPACITY_STEP) and back == trace
    data = json.loads(trace.to_json())
    assert data["summary"]["decode_path"] == "static"
    assert data["summary"]["kv_cache_allocated_bytes"] == trace.allocated_kv_cache_bytes
    for key in ("decode_path", "kv_cache_capacity", "kv_cache_allocated_bytes"):  # a trace from before them
        del data[key]
    old = Trace.from_dict(data)
    assert old.decode_path == "eager" and old.allocated_kv_cache_bytes == old.final_kv_cache_bytes


def test_a_pool_compiles_one_step_per_model_and_captures_uncompiled_once_a_compile_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[object] = []
    monkeypatch.setattr(graph_decode, "compiled_forward", lambda model: compiled.append(model) or "compiled step")
    steps: list[object] = []

    def capture(_model: object, shape: CacheShape, step: object = None) -> FakeCapture:
        steps.append(step)
        fake = FakeCapture(shape, FakeCache())
        fake.compiled, fake.why_uncompiled = False, "BackendCompilerFailed: no Triton for this GPU"  # type: ignore[attr-defined]
        return fake

    monkeypatch.setattr(graph_decode, "CapturedDecode", capture)
    pool = GraphPool(compile_steps=True)
    said: list[str] = []
    pool.lease("model", CacheShape(1, 256), lambda _f, text: said.append(text))  # type: ignore[arg-type]
    assert steps == ["compiled step"] and compiled == ["model"]
    assert "its kernels compiled by torch.compile first" in said[0]
    assert pool.why_uncompiled == "BackendCompilerFailed: no Triton for this GPU"
    pool.lease("model", CacheShape(1, 512), lambda _f, text: said.append(text))  # type: ignore[arg-type]
    assert steps[-1] is None and compiled == ["model"] and "takes a few seconds" in said[-1]  # not compiled again
    monkeypatch.setenv(graph_decode.COMPILE_ENV, "0")
    assert GraphPool().compile_steps is False
