"""Runs on the GPU in float32, bfloat16 and float16: the same tokens as transformers' generate() in the same dtype,
every pass timed by CUDA events, attention captured, the profiler's GPU-idle remainder, and memory given back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch

from explorer.checks.greedy_reference import generate_tokens
from explorer.core.attention import capture_attention
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.profiler import CUDA_REMAINDER, KV_UPDATE, LINEAR, profile_pass
from explorer.core.roofline import kv_cache_bytes
from explorer.core.units import human_bytes
from explorer.models.loading import load_model
from tests.gpu import requires_cuda
from tests.test_attention import assert_attention_structure
from tests.test_profiler import assert_adds_up, op_count

pytestmark = requires_cuda

PROMPT = "What is the capital of France?"
NEW_TOKENS = 8


def free_gpu_memory() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


@pytest.fixture(scope="module", params=["float32", "bfloat16", "float16"])
def lm_in(request: pytest.FixtureRequest, cuda_lm: LoadedModel, gpu_model_name: str) -> Iterator[LoadedModel]:
    dtype = request.param
    if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    if dtype == "float32":
        yield cuda_lm
        return
    lm = load_model(gpu_model_name, device="cuda", dtype=dtype)
    yield lm
    del lm
    free_gpu_memory()


def test_a_run_in_each_dtype_matches_generate_and_is_timed_by_cuda_events(
    lm_in: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    timing_events: list[bool] = []
    real_event = torch.cuda.Event

    def counting_event(*args: object, **kwargs: object) -> torch.cuda.Event:
        timing_events.append(bool(kwargs.get("enable_timing")))
        return real_event(*args, **kwargs)

    monkeypatch.setattr(torch.cuda, "Event", counting_event)
    trace = measure(lm_in, Request(PROMPT, max_new_tokens=NEW_TOKENS, stop_at_eos=False, repeats=2))
    dtype = lm_in.info.dtype
    assert trace.device.kind == "cuda" and trace.device.dtype == dtype and trace.model.device == "cuda"
    passes = sum(len(run) for run in trace.repeats)
    assert len(timing_events) >= 2 * passes and all(timing_events)  # a start and an end event around every pass
    assert trace.new_tokens == NEW_TOKENS and trace.same_tokens_every_repeat
    assert all(0 <= t < lm_in.info.vocab_size for t in trace.generated_token_ids) and trace.generated_text.strip()
    assert trace.generated_token_ids == generate_tokens(lm_in, trace.prompt_token_ids, NEW_TOKENS)
    assert lm_in.info.kv_bytes_per_token == (46_080 if dtype == "float32" else 23_040)
    for p in trace.passes:
        assert p.kv_cache_bytes == kv_cache_bytes(trace.model, p.cache_len_after) and 0 < p.wall_s < 5
    assert trace.ttft_s >= trace.prefill.wall_s


def test_attention_is_captured_on_the_gpu_and_the_model_left_as_it_was(cuda_lm: LoadedModel) -> None:
    request = Request("Name three colours.", max_new_tokens=6)
    trace = measure(cuda_lm, request)
    assert_attention_structure(cuda_lm, trace, layers=[0, 14, 29])  # maps come back to the CPU as float16
    assert cuda_lm.model.config._attn_implementation == "sdpa"
    assert measure(cuda_lm, request).generated_token_ids == trace.generated_token_ids


@pytest.mark.parametrize("pass_index", [0, 1])
def test_the_profiler_names_the_gpu_idle_remainder(cuda_lm: LoadedModel, pass_index: int) -> None:
    request = Request("The cat sat on the", max_new_tokens=3, use_chat_template=False, decode_path="eager")
    trace = measure(cuda_lm, request)  # the profiler replays the eager path
    profile = profile_pass(cuda_lm, trace, pass_index)
    assert_adds_up(profile)  # kernel times by group plus the remainder make the profiled wall, as on a CPU
    assert profile.device_kind == "cuda" and profile.time_kind == "GPU kernel time"
    assert profile.remainder_name == CUDA_REMAINDER  # what no kernel took: the GPU idling between launches
    assert op_count(profile, LINEAR, "aten::linear") == 7 * cuda_lm.info.layers
    if pass_index > 0:  # a decode's cache update concatenates onto a real cache: a kernel per K and V per layer
        assert profile.group(KV_UPDATE).self_s > 0
    assert profile.replay_argmax_token_id == trace.passes[pass_index].token_id


def test_a_run_gives_its_gpu_memory_back(cuda_lm: LoadedModel) -> None:
    request = Request(PROMPT, max_new_tokens=16)
    # First a run and a capture as they will be measured: lazy, kept-by-design allocations (cuBLAS workspaces) happen
    # there, not in the run being checked.
    capture_attention(cuda_lm, measure(cuda_lm, request), [0])
    free_gpu_memory()
    start = torch.cuda.memory_allocated()
    trace = measure(cuda_lm, request)
    capture_attention(cuda_lm, trace, [0])
    free_gpu_memory()
    held = torch.cuda.memory_allocated() - start
    assert held == 0, f"{human_bytes(held)} still allocated after a run of {trace.new_tokens} tokens and its capture"
