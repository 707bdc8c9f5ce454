"""KV cache page builders on a real run of the tiny Llama: formula = measured bytes, projections by hand."""

from __future__ import annotations

import altair as alt
import pytest

from explorer.charts import kv as charts
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace
from explorer.core.units import GB

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("some prompt", max_new_tokens=NEW_TOKENS))


def test_tiny_model_bytes_per_token(trace: Trace) -> None:
    # 2 (K, V) x 2 layers x 2 KV heads x head_dim 16 x 4 B (float32)
    assert trace.model.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4 == 512


def test_growth_frame_measured_equals_formula(trace: Trace) -> None:
    frame = charts.growth_frame(trace)
    assert list(frame["pass"]) == list(range(NEW_TOKENS))
    assert list(frame["cache_len"]) == [trace.prompt_len + k for k in range(NEW_TOKENS)]
    assert (frame["measured_bytes"] == frame["modelled_bytes"]).all()
    assert list(frame["modelled_bytes"]) == [512 * n for n in frame["cache_len"]]
    assert charts.growth_check_text(frame) == f"Measured and modelled agree to the byte at all {NEW_TOKENS} passes."


def test_layers_frame(trace: Trace) -> None:
    last = trace.passes[-1]
    frame = charts.layers_frame(trace, NEW_TOKENS - 1)
    assert list(frame["layer"]) == [0, 1]
    assert (frame["measured_bytes"] == 256 * last.cache_len_after).all()  # per layer: 2 x 2 x 16 x 4 B per token
    assert (frame["measured_bytes"] == frame["modelled_bytes"]).all()
    assert frame["measured_bytes"].sum() == last.kv_cache_bytes


def test_formula_text_and_frame(trace: Trace) -> None:
    n = trace.passes[-1].cache_len_after
    text = charts.formula_text(trace.model, n)
    assert text.startswith("2 (K and V) × 2 layers × 2 KV heads × 16 head dim × 4 B (float32) = 512 B per token")
    assert f"= {512 * n:,} B" in text
    frame = charts.formula_frame(trace.model, n)
    assert list(frame["value"]) == [2, 2, 2, 16, 4, 512, n, 512 * n]
    assert frame["value"].iloc[-1] == trace.final_kv_cache_bytes  # the formula filled in equals the measured cache


def test_gqa_text(trace: Trace) -> None:
    n = trace.passes[-1].cache_len_after
    text = charts.gqa_text(trace.model, n)
    assert "4 query heads share 2 KV heads (2 each)" in text
    assert "1,024 B per token" in text and "2× as much" in text  # 4 KV heads instead of 2


def test_weights_frame(trace: Trace) -> None:
    frame = charts.weights_frame(trace)
    weights = trace.model.weight_bytes
    assert list(frame["bytes"]) == [weights, trace.final_kv_cache_bytes, 512 * trace.model.max_context]
    assert list(frame["source"]) == ["measured", "measured", "modelled"]
    assert frame["percent_of_weights"].iloc[0] == 100.0
    assert f"{100 * trace.final_kv_cache_bytes / weights:.2f}%" in charts.weights_ratio_text(trace)


def test_projection_matches_hand_computed_bytes(trace: Trace) -> None:
    context, batch = 200, 3
    frame = charts.projection_frame(trace.model, context, batch)
    assert sorted(frame["batch"].unique()) == [1, 3, 8, 32]
    chosen = frame[(frame["batch"] == batch) & (frame["context_len"] == context)]
    assert chosen["kv_bytes"].tolist() == [512 * 200 * 3]  # 307,200 B
    assert chosen["chosen"].all() and not frame.loc[frame["batch"] == 8, "chosen"].any()
    assert frame["context_len"].max() == context and frame["context_len"].min() == 0
    assert (frame["kv_gb"] == frame["kv_bytes"] / GB).all()
    assert charts.projection_text(trace.model, context, batch).startswith(
        "At 200 tokens × batch 3 this model needs 307.2 kB of KV cache"
    )
    assert "of this device's" in charts.projection_text(trace.model, context, batch, device_memory_bytes=2**30)


def test_charts_build(trace: Trace) -> None:
    growth = charts.growth_frame(trace)
    projection = charts.projection_frame(trace.model, 256, 32)
    built = [
        charts.growth_chart(growth),
        charts.layers_chart(charts.layers_frame(trace, 0)),
        charts.weights_chart(charts.weights_frame(trace)),
        charts.projection_chart(projection, charts.references_frame(trace.model)),
    ]
    for chart in built:
        assert isinstance(chart, alt.TopLevelMixin)
        assert "$schema" in chart.to_dict()


def test_the_layers_legend_names_only_the_kinds_of_layer_the_model_has(trace: Trace) -> None:
    """Issue 31: the legend listed "sliding-window layers" for a model with none."""
    assert not trace.model.sliding_layers
    color = charts.layers_chart(charts.layers_frame(trace, 0)).to_dict()["layer"][0]["encoding"]["color"]
    assert color["scale"]["domain"] == [charts.FULL_LAYERS]
