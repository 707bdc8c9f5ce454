"""Attention page builders on a real run of the tiny Llama: the mask, the decode staircase, and the cell bounds."""

from __future__ import annotations

from dataclasses import replace

import altair as alt
import numpy as np
import pytest

from explorer.charts import attention as charts
from explorer.charts.common import position_label
from explorer.core.attention import AttentionMaps, capture_attention
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def run(tiny_lm: LoadedModel) -> tuple[Trace, AttentionMaps]:
    trace = measure(tiny_lm, Request("a a b: attention!", max_new_tokens=NEW_TOKENS))
    return trace, capture_attention(tiny_lm, trace)


@pytest.fixture(scope="module")
def long_run(tiny_lm: LoadedModel) -> tuple[Trace, AttentionMaps]:
    """~200 prompt tokens (the tiny model's context is 256): long enough to need windows and pooling."""
    prompt = "The quick brown fox jumps over the lazy dog. " * 5  # byte-level tokenizer: 225 tokens
    trace = measure(tiny_lm, Request(prompt[:200], max_new_tokens=40, use_chat_template=False))
    return trace, capture_attention(tiny_lm, trace)


def test_prefill_frame_masks_exactly_the_upper_triangle(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    T = trace.prompt_len
    frame = charts.prefill_frame(maps, layer=1, head=2)
    assert len(frame) == T * T
    upper = frame["key_pos"] > frame["query_pos"]
    assert (frame["masked"] == upper).all()
    assert (frame.loc[upper, "cell"] == charts.MASKED).all() and (frame.loc[~upper, "cell"] == charts.ATTENDED).all()
    assert (frame.loc[upper, "prob"] == 0.0).all()  # the causal mask gives exactly 0, not a small number
    assert frame.loc[~upper, "prob"].gt(0).all()
    np.testing.assert_allclose(frame.groupby("query_pos")["prob"].sum(), 1.0, atol=1e-3)
    # Labels keep duplicate tokens ("a" twice) apart: one label per position.
    assert frame["query"].nunique() == T
    assert frame.loc[frame["query_pos"] == 3, "query"].iloc[0] == position_label(3, maps.tokens_text[3])


def test_prefill_window_keeps_its_block(run: tuple[Trace, AttentionMaps]) -> None:
    _, maps = run
    start, stop = charts.window_bounds(maps.prompt_len, 5, size=4)
    assert (start, stop) == (5, 9)
    assert charts.window_bounds(maps.prompt_len, 10_000, size=4) == (maps.prompt_len - 4, maps.prompt_len)
    frame = charts.prefill_frame(maps, 0, 0, start, stop)
    assert len(frame) == 16 and set(frame["query_pos"]) == set(range(5, 9))
    expected = maps.prefill[0][0, 5:9, 5:9].astype(np.float32).ravel()
    np.testing.assert_array_equal(frame["prob"].to_numpy(), expected)


def test_mask_facts(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    T = trace.prompt_len
    facts = charts.mask_facts(maps, 0)
    assert facts.masked_cells == maps.heads * T * (T - 1) // 2
    assert facts.max_masked_prob == 0.0
    assert facts.max_row_sum_error < 1e-2


def test_decode_frame_is_a_staircase_of_cache_len_cells(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    frame = charts.decode_frame(maps, layer=0, head=1)
    assert sorted(frame["step"].unique()) == list(range(len(trace.decodes)))
    for step, p in enumerate(trace.decodes):
        rows = frame[frame["step"] == step]
        assert len(rows) == p.cache_len_after == trace.prompt_len + step + 1  # one cell per cached key, no mask
        assert list(rows["key_start"]) == list(range(p.cache_len_after))
        np.testing.assert_allclose(rows["prob"].sum(), 1.0, atol=1e-3)
        fed = position_label(p.cache_len_after - 1, maps.tokens_text[p.cache_len_after - 1])
        assert rows["row"].iloc[0] == f"step {step} · feeds {fed}"
        assert maps.tokens_text[p.cache_len_after - 1] == trace.passes[step].token_text  # the token fed back


def test_max_pool_and_block_size() -> None:
    probs = np.arange(25, dtype=np.float32).reshape(5, 5)
    assert charts.block_size(5, 2) == 3 and charts.block_size(5, 64) == 1
    np.testing.assert_array_equal(charts.max_pool(probs, 3), [[12, 14], [22, 24]])


def test_pooled_frame_masks_only_whole_future_blocks(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    frame = charts.pooled_frame(maps, 0, list(range(maps.heads)), max_side=4, kv_heads=trace.model.kv_heads)
    block = charts.block_size(trace.prompt_len, 4)
    assert (frame["block"] == block).all()
    assert frame.groupby("head").size().max() <= 16
    assert (frame.loc[frame["masked"], "prob_max"] == 0.0).all()
    assert (frame["masked"] == (frame["key_start"] > frame["query_stop"] - 1)).all()
    group = maps.heads // trace.model.kv_heads
    assert (frame["kv_head"] == frame["head"] // group).all()  # GQA: query heads 0, 1 read KV head 0
    assert frame["head_label"].iloc[0] == "head 0 (KV head 0)"


def test_long_prompt_views_stay_under_the_cell_bound(long_run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = long_run
    T = trace.prompt_len
    assert T > charts.WINDOW_POSITIONS
    start, stop = charts.window_bounds(T, 50)
    window = charts.prefill_frame(maps, 0, 0, start, stop)
    assert len(window) == charts.WINDOW_POSITIONS**2 <= charts.MAX_CELLS
    pooled = charts.pooled_frame(maps, 0, [0], charts.POOLED_SIDE, trace.model.kv_heads)
    assert len(pooled) <= charts.POOLED_SIDE**2 and pooled["key_stop"].max() == T
    heads = charts.pooled_frame(maps, 0, list(range(maps.heads)), charts.HEAD_OVERVIEW_SIDE, trace.model.kv_heads)
    assert len(heads) <= charts.MAX_CELLS
    lens = charts.decode_cache_lens(maps, 0)
    key_bin = charts.decode_key_bin(lens, max_cells=2_000)  # 39 rows x ~220 keys > 2,000: must pool
    assert key_bin > 1
    decode = charts.decode_frame(maps, 0, 0, key_bin=key_bin)
    assert len(decode) <= 2_000
    assert (decode.groupby("step").size() == [-(-n // key_bin) for n in lens]).all()
    assert charts.decode_key_bin(lens) == 1  # ~8,000 cells fit the default bound unpooled


@pytest.mark.parametrize("kind", ["prefill", "pooled", "heads", "decode"])
def test_charts_build(run: tuple[Trace, AttentionMaps], kind: str) -> None:
    trace, maps = run
    if kind == "prefill":
        chart = charts.prefill_chart(charts.prefill_frame(maps, 0, 0))
    elif kind == "pooled":
        chart = charts.pooled_chart(charts.pooled_frame(maps, 0, [0], 8, trace.model.kv_heads))
    elif kind == "heads":
        chart = charts.heads_chart(charts.pooled_frame(maps, 1, [0, 1, 2, 3], 8, trace.model.kv_heads))
    else:
        chart = charts.decode_chart(charts.decode_frame(maps, 1, 3), maps.prompt_len)
    assert isinstance(chart, alt.TopLevelMixin)
    spec = chart.to_dict()
    assert "$schema" in spec


def test_the_head_overview_stays_under_the_cell_bound_for_many_heads() -> None:
    assert charts.head_overview_side(9) == charts.HEAD_OVERVIEW_SIDE  # 9 x 32 x 32 = 9,216 cells
    side = charts.head_overview_side(32)
    assert 32 * side**2 <= charts.MAX_CELLS < 32 * (side + 1) ** 2  # the finest blocks that fit: 17 x 17
    assert charts.head_overview_side(10_000) == charts.HEAD_OVERVIEW_MIN_SIDE


def test_heads_caption_names_grouped_query_attention_only_when_heads_share(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    assert "grouped-query attention 2 query heads read each KV head" in charts.heads_caption(trace.model)
    mha = replace(trace.model, kv_heads=trace.model.heads)
    assert "grouped-query" not in charts.heads_caption(mha)
    frame = charts.pooled_frame(maps, 0, [0, 1], 8, kv_heads=mha.kv_heads)
    assert list(frame.drop_duplicates("head")["head_label"]) == ["head 0", "head 1"]  # no KV head to name


def test_the_first_token_column_is_explained_as_an_attention_sink(run: tuple[Trace, AttentionMaps]) -> None:
    _, maps = run
    sink = np.zeros((1, 8, 8), dtype=np.float16)  # every query after the first puts 0.7 on token 0
    sink[0, 0, 0] = 1.0
    for q in range(1, 8):
        sink[0, q, 0] = 0.7
        sink[0, q, 1 : q + 1] = 0.3 / q
    sinking = replace(maps, prefill={0: sink})
    share, even = charts.first_token_share(sinking, 0, 0)
    assert share == pytest.approx(0.7, abs=1e-3) and even == pytest.approx(sum(1 / (q + 1) for q in range(1, 8)) / 7)
    text = charts.sink_sentence(sinking, 0, 0, "recorded")
    assert text.startswith("The bright first column is an attention sink") and "70% of their attention" in text
    assert "recorded" in text and "https://arxiv.org/abs/2309.17453" in text
    even_rows = np.tril(np.ones((4, 4), dtype=np.float32))
    even_rows /= even_rows.sum(-1, keepdims=True)
    flat = replace(maps, prefill={0: even_rows[None].astype(np.float16)})
    assert "does not lean on it" in charts.sink_sentence(flat, 0, 0)
