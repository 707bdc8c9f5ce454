"""Captured attention: the causal mask in prefill, one growing row per decode, the same tokens as the timed run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from explorer.core.attention import AttentionCapExceeded, AttentionReplay, attention_bytes, capture_attention
from explorer.core.engine import Request
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace


def assert_attention_structure(lm: LoadedModel, trace: Trace, layers: list[int] | None = None) -> None:
    maps = capture_attention(lm, trace, layers)
    assert maps.same_tokens_as(trace)  # the eager replay re-derives the timed run's greedy tokens
    T = trace.prompt_len
    assert maps.layers == tuple(layers if layers is not None else range(trace.model.layers))
    assert len(maps.tokens_text) == T + trace.new_tokens
    for layer in maps.layers:
        pre = maps.prefill[layer].astype(np.float32)
        assert pre.shape == (trace.model.heads, T, T) and maps.prefill[layer].dtype == np.float16
        assert np.all(pre[:, np.triu_indices(T, k=1)[0], np.triu_indices(T, k=1)[1]] == 0.0)  # masked: exactly 0
        np.testing.assert_allclose(pre.sum(-1), 1.0, atol=1e-3)
        rows = maps.decode[layer]
        assert len(rows) == len(trace.decodes)
        for row, p in zip(rows, trace.decodes):
            assert row.shape == (trace.model.heads, p.cache_len_after)  # one query over every cached key
            np.testing.assert_allclose(row.astype(np.float32).sum(-1), 1.0, atol=1e-3)


def test_tiny_llama_attention(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("attention!", max_new_tokens=6))
    assert_attention_structure(tiny_lm, trace)


def test_tiny_gpt2_attention(tiny_gpt2: LoadedModel) -> None:
    trace = measure(tiny_gpt2, Request("attention!", max_new_tokens=4))
    assert_attention_structure(tiny_gpt2, trace, layers=[1])


def test_real_model_attention_and_same_tokens(real_lm: LoadedModel) -> None:
    request = Request("Name three colours.", max_new_tokens=8)
    trace = measure(real_lm, request)
    assert_attention_structure(real_lm, trace, layers=[0, 14, 29])
    again = measure(real_lm, request)  # capture left the model as it was: the same greedy tokens
    assert again.generated_token_ids == trace.generated_token_ids
    assert real_lm.model.config._attn_implementation == "sdpa"


def test_capture_refuses_past_the_cap(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("a longer prompt for the cap", max_new_tokens=3))
    needed = attention_bytes(2, 4, trace.prompt_len, [p.cache_len_after for p in trace.decodes])
    with pytest.raises(AttentionCapExceeded, match="over the .* cap"):
        capture_attention(tiny_lm, trace, cap_bytes=needed - 1)
    assert capture_attention(tiny_lm, trace, cap_bytes=needed).nbytes == needed


def test_capture_rejects_unknown_layers(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("abc", max_new_tokens=2))
    with pytest.raises(BadInput, match="between 0 and 1"):
        capture_attention(tiny_lm, trace, layers=[2])


def test_a_replay_that_makes_way_lets_another_replay_use_the_twin(tiny_lm: LoadedModel) -> None:
    """A replay's section may make way for other jobs (a Run's capture lets a Next token through), and that token's
    own attention row replays on the same eager twin: it must get the twin, not wait for the replay that made way
    (the workshop of 8 stuck there, both waiting)."""
    prompt = list(range(3, 9))
    other = AttentionReplay(tiny_lm, [0])
    let_through: list[bool] = []

    def make_way() -> Iterator[None]:
        done = threading.Event()
        threading.Thread(target=lambda: (other.step(prompt), done.set()), daemon=True).start()
        let_through.append(done.wait(10.0))  # made way: the other replay runs meanwhile, and ends
        yield

    AttentionReplay(tiny_lm, [0]).step(prompt, section=contextmanager(make_way))
    assert let_through == [True]
    assert set(other.prefill) == {0}  # it ran its pass, maps kept
