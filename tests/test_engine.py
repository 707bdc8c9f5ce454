"""The instrumented loop: same tokens as generate(), one prefill then one-token decodes, honest timing invariants."""

from __future__ import annotations

import pytest
import torch

from explorer.core import engine as engine_module
from explorer.core.engine import OnPass, Request, check_request, generate, tokenize
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import DeviceProfile, Sampling, Trace


def hf_greedy_tokens(lm: LoadedModel, prompt_ids: tuple[int, ...], new_tokens: int) -> list[int]:
    ids = torch.tensor([list(prompt_ids)])
    out = lm.model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0
    )
    return out[0, ids.shape[1] :].tolist()


def assert_pass_invariants(trace: Trace) -> None:
    m = trace.model
    for p in trace.passes:
        assert p.kv_cache_bytes == 2 * m.layers * m.kv_heads * m.head_dim * p.cache_len_after * m.bytes_per_element
        grown = p.cache_len_after - p.cache_len_before
        assert grown == (trace.prompt_len if p.is_prefill else 1)
        assert p.tokens_in == grown
    assert [p.phase for p in trace.passes] == ["prefill"] + ["decode"] * (trace.new_tokens - 1)
    assert trace.passes[0].cache_len_before == 0
    for before, after in zip(trace.passes, trace.passes[1:]):
        assert after.cache_len_before == before.cache_len_after
        assert after.input_token_ids == (before.token_id,)  # each decode feeds back the token just sampled


def assert_timing_invariants(trace: Trace) -> None:
    assert trace.ttft_s >= trace.prefill.wall_s > 0
    assert sum(p.wall_s for p in trace.passes) <= trace.e2e_s
    assert len(trace.itl_s) == trace.new_tokens - 1
    assert all(gap > 0 for gap in trace.itl_s)
    assert trace.e2e_s >= trace.ttft_s + sum(trace.itl_s) - 1e-9
    assert trace.warmup_ran


@pytest.mark.parametrize("fixture", ["tiny_lm", "tiny_gpt2"])
def test_tiny_models_match_generate_and_keep_invariants(fixture: str, request: pytest.FixtureRequest) -> None:
    lm = request.getfixturevalue(fixture)
    trace = measure(lm, Request("hello <b>world</b>", max_new_tokens=12, use_chat_template=False))
    assert trace.new_tokens == 12 and trace.stop_reason == "max_new_tokens"
    assert list(trace.generated_token_ids) == hf_greedy_tokens(lm, trace.prompt_token_ids, 12)
    assert_pass_invariants(trace)
    assert_timing_invariants(trace)


def test_tiny_llama_is_grouped_query(tiny_lm: LoadedModel) -> None:
    assert (tiny_lm.info.heads, tiny_lm.info.kv_heads, tiny_lm.info.head_dim) == (4, 2, 16)
    assert tiny_lm.info.is_gqa


def test_chat_template_is_used_and_switchable(tiny_lm: LoadedModel) -> None:
    with_template = tokenize(tiny_lm, "hi", use_chat_template=True)
    raw = tokenize(tiny_lm, "hi", use_chat_template=False)
    assert len(with_template) > len(raw) == 2
    trace = measure(tiny_lm, Request("hi", max_new_tokens=2))
    assert trace.chat_template_used and list(trace.prompt_token_ids) == with_template


def test_real_model_matches_generate_and_keeps_invariants(real_lm: LoadedModel) -> None:
    info = real_lm.info
    assert (info.layers, info.heads, info.kv_heads, info.head_dim, info.hidden_size) == (30, 9, 3, 64, 576)
    assert info.kv_bytes_per_token == 46_080  # 2 x 30 x 3 x 64 x 4 bytes (float32)
    trace = measure(real_lm, Request("The capital of France is", max_new_tokens=16))
    assert trace.chat_template_used
    n = trace.new_tokens
    assert list(trace.generated_token_ids) == hf_greedy_tokens(real_lm, trace.prompt_token_ids, n)
    assert_pass_invariants(trace)
    assert_timing_invariants(trace)
    assert len(trace.prompt_tokens_text) == trace.prompt_len
    assert all(len(p.top_tokens) == 5 for p in trace.passes)
    assert all(p.top_tokens[0].token_id == p.token_id for p in trace.passes)  # greedy picks the top token


def test_eos_stops_the_run(real_lm: LoadedModel) -> None:
    trace = measure(real_lm, Request("Reply with one word: yes or no?", max_new_tokens=64))
    assert trace.stop_reason == "eos" and trace.passes[-1].token_id in real_lm.eos_token_ids
    assert trace.new_tokens < 64


def test_sampling_is_reproducible_with_a_seed(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    def run(request: Request) -> Trace:
        return generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)

    sampled = Sampling(temperature=1.0, top_k=20, seed=1234)
    a = run(Request("abc", max_new_tokens=10, sampling=sampled))
    b = run(Request("abc", max_new_tokens=10, sampling=sampled, repeats=2))
    assert a.generated_token_ids == b.generated_token_ids and b.same_tokens_every_repeat  # each repeat re-seeds
    unseeded = run(Request("abc", max_new_tokens=3, sampling=Sampling(1.0)))
    assert unseeded.sampling.seed is not None  # recorded so the run can be replayed
    top1 = run(Request("abc", max_new_tokens=6, sampling=Sampling(1.0, top_k=1, seed=3)))
    greedy = run(Request("abc", max_new_tokens=6))
    assert top1.generated_token_ids == greedy.generated_token_ids


def test_on_pass_streams_every_pass_in_order(tiny_lm: LoadedModel) -> None:
    seen: list[int] = []
    trace = measure(tiny_lm, Request("abc", max_new_tokens=5), on_pass=OnPass(see=lambda p: seen.append(p.index)))
    assert seen == [p.index for p in trace.passes] == [0, 1, 2, 3, 4]


@pytest.mark.device_figures  # the microbenchmarks must really run, to report their progress
def test_a_measured_run_is_checked_and_warmed_up_once_and_says_what_it_is_doing(
    tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """measure() checks the request and warms up once, whatever the repeats; generate() repeats neither."""
    calls = {"warm_up": 0, "validate": 0}
    real_warm_up, real_validate = engine_module.warm_up, engine_module.validate

    def counting_warm_up(*args: object, **kwargs: object) -> None:
        calls["warm_up"] += 1
        real_warm_up(*args, **kwargs)

    def counting_validate(*args: object, **kwargs: object) -> None:
        calls["validate"] += 1
        real_validate(*args, **kwargs)

    monkeypatch.setattr(engine_module, "warm_up", counting_warm_up)
    monkeypatch.setattr("explorer.core.measure.warm_up", counting_warm_up)
    monkeypatch.setattr(engine_module, "validate", counting_validate)
    said: list[str] = []
    request = Request("abc", max_new_tokens=3, repeats=2)
    trace = measure(tiny_lm, request, progress=lambda _f, text: said.append(text))  # a new store: figures measured
    assert calls == {"warm_up": 1, "validate": 1}
    assert trace.warmup_ran and trace.repeat_count == 2
    # A set of figures judged taken under load (the other test worker busy) is taken again, and says so: those
    # retake lines are not this test's concern, the order of the steps is.
    said = [text for text in said if "(again: " not in text]
    assert said[:4] == [
        "Measuring the device: matmul peak…",
        "Measuring the device: copy bandwidth…",
        "Measuring the device: read-only bandwidth…",
        "Warming up (first passes are slow)…",
    ]


@pytest.mark.parametrize(
    ("prompt", "max_new_tokens", "message"),
    [("", 4, "empty"), ("   \n\t", 4, "empty"), ("abc", 0, "max new tokens"), ("abc", 5000, "max new tokens")],
)
def test_bad_requests_are_refused(tiny_lm: LoadedModel, prompt: str, max_new_tokens: int, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        measure(tiny_lm, Request(prompt, max_new_tokens=max_new_tokens))


def test_prompt_beyond_context_is_refused(tiny_lm: LoadedModel) -> None:
    with pytest.raises(BadInput, match="exceeds .* context of 256 tokens"):
        measure(tiny_lm, Request("x" * 300, max_new_tokens=4, use_chat_template=False))
