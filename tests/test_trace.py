"""The Trace contract: JSON round trip, CSV rows, derived summary figures."""

from __future__ import annotations

import csv
import io
import json

import pytest

from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import SCHEMA_VERSION, Trace, percentile


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request('quote " comma , <script>', max_new_tokens=7))


def test_json_round_trip(trace: Trace) -> None:
    text = trace.to_json()
    data = json.loads(text)
    assert data["schema"] == SCHEMA_VERSION
    assert data["summary"]["new_tokens"] == 7 and data["summary"]["ttft_s"] == trace.ttft_s
    assert Trace.from_json(text) == trace


def test_json_keeps_the_read_bandwidth_and_loads_traces_from_before_it(trace: Trace) -> None:
    data = json.loads(trace.to_json())
    device = data["device"]
    assert device["read_bandwidth_bytes_per_s"] == trace.device.read_bandwidth_bytes_per_s > 0
    assert device["read_bandwidth_source"] == "measured" and len(device["read_bandwidth_samples"]) == 5
    assert Trace.from_json(trace.to_json()).device.read_bandwidth_samples == trace.device.read_bandwidth_samples
    for key in ("read_bandwidth_bytes_per_s", "read_bandwidth_source", "measured_read_bandwidth_bytes_per_s"):
        del device[key]
    del device["read_bandwidth_samples"], device["read_bytes"]
    old = Trace.from_dict(data).device  # a trace written before the read-only figure existed
    assert old.read_bandwidth_from_copy and old.read_bandwidth_bytes_per_s is None
    assert old.effective_read_bandwidth_bytes_per_s == old.bandwidth_bytes_per_s


def test_json_refuses_other_schemas(trace: Trace) -> None:
    data = trace.to_dict()
    data["schema"] = 999
    with pytest.raises(ValueError, match="schema"):
        Trace.from_dict(data)


def test_csv_has_a_row_per_pass(trace: Trace) -> None:
    rows = list(csv.DictReader(io.StringIO(trace.passes_csv())))
    assert len(rows) == trace.new_tokens
    assert rows[0]["phase"] == "prefill" and all(r["phase"] == "decode" for r in rows[1:])
    assert float(rows[3]["wall_s"]) == trace.passes[3].wall_s
    assert int(rows[0]["kv_cache_bytes"]) == trace.passes[0].kv_cache_bytes
    assert json.loads(rows[0]["top_tokens"])[0]["token_id"] == trace.passes[0].top_tokens[0].token_id
    assert "overhead_s" in rows[0] and "arithmetic_intensity" in rows[0]


def test_summary_figures(trace: Trace) -> None:
    assert trace.decode_tokens_per_s == pytest.approx(len(trace.itl_s) / sum(trace.itl_s))
    assert trace.itl_p50_s <= trace.itl_p90_s <= trace.itl_p99_s <= max(trace.itl_s)
    assert trace.generated_token_ids == tuple(p.token_id for p in trace.passes)


def test_percentile_matches_hand_values() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0, 20.0], 90) == pytest.approx(19.0)
    assert percentile([], 50) is None


def test_per_layer_bytes_add_up(trace: Trace) -> None:
    for p in trace.passes:
        assert len(p.kv_layer_bytes) == trace.model.layers
        assert sum(p.kv_layer_bytes) == p.kv_cache_bytes
        assert set(p.kv_layer_bytes) == {trace.model.kv_bytes_per_token_per_layer * p.cache_len_after}
