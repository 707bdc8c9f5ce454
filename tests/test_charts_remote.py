"""The Endpoint page's builders on a hand-made sweep: exact values, SLO colouring, failures kept, charts valid."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from explorer.charts import remote as charts
from explorer.cli.remote import format_sweep
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.remote import records
from explorer.remote.endpoint import make_endpoint

TTFT_SLO_S, ITL_SLO_S = 0.25, 0.05


def record(index: int, start_s: float, arrivals: tuple[float, ...], tokens: tuple[int, ...]) -> records.RequestRecord:
    return records.RequestRecord(
        index=index,
        start_s=start_s,
        ttft_s=arrivals[0],
        e2e_s=arrivals[-1],
        chunk_arrivals_s=arrivals,
        chunk_tokens=tokens,
        output_tokens=sum(tokens),
        output_tokens_from="usage",
        chunk_tokens_from="chunks",
        prompt_tokens=5,
        finish_reason="length",
        text="t" * len(arrivals),
    )


FAILED = records.RequestRecord(2, 0.0, None, None, (), (), 0, "chunks", "chunks", None, None, "", "connection reset")


@pytest.fixture
def result() -> records.SweepResult:
    one = records.LevelResult(
        1,
        1.0,
        (record(0, 0.0, (0.1, 0.14, 0.18), (1, 1, 1)), record(1, 0.2, (0.2, 0.26, 0.32), (1, 1, 1))),
    )
    # at 2 in flight: TTFTs 300 and 100 ms, one 3-token chunk after 90 ms (3 gaps of 30 ms), and a failure
    two = records.LevelResult(
        2, 0.5, (record(0, 0.0, (0.3, 0.35), (1, 1)), record(1, 0.0, (0.1, 0.19), (1, 3)), FAILED)
    )
    return records.SweepResult(
        endpoint=make_endpoint("http://127.0.0.1:8000/v1", "m"),
        prompt="p",
        max_tokens=4,
        requests_per_level=2,
        ttft_slo_s=TTFT_SLO_S,
        itl_slo_s=ITL_SLO_S,
        levels=(one, two),
        warmup=None,
        created_at="2026-01-01T00:00:00+00:00",
    )


def test_levels_frame_values(result: records.SweepResult) -> None:
    frame = charts.levels_frame(result, TTFT_SLO_S, ITL_SLO_S)
    assert list(frame["concurrency"]) == [1, 2]
    first, second = frame.iloc[0], frame.iloc[1]
    assert first["ttft_p50_ms"] == pytest.approx(150.0)  # median of 100 and 200 ms
    assert first["itl_p50_ms"] == pytest.approx(50.0)  # gaps 40, 40, 60, 60
    assert first["total_output_tokens_per_s"] == pytest.approx(6 / 1.0)
    assert first["goodput_requests"] == 1  # the second request's 60 ms gaps miss the 50 ms ITL SLO
    assert (second["succeeded"], second["failed"]) == (2, 1)
    assert second["itl_p50_ms"] == pytest.approx(30.0)  # 50 ms, then 30, 30, 30
    assert second["total_output_tokens_per_s"] == pytest.approx(6 / 0.5)
    assert second["goodput_requests"] == 1 and second["goodput_pct"] == pytest.approx(100 / 3)


def test_percentiles_frame_is_long_and_complete(result: records.SweepResult) -> None:
    frame = charts.percentiles_frame(result)
    assert len(frame) == 2 * 2 * 3  # levels x (TTFT, ITL) x (p50, p90, p99)
    ttft_p99 = frame.query("concurrency == 2 and metric == 'TTFT' and percentile == 'p99'")["value_ms"].item()
    assert ttft_p99 == pytest.approx(100 + 0.99 * 200)


def test_tradeoff_frame_labels_goodput(result: records.SweepResult) -> None:
    frame = charts.tradeoff_frame(result, TTFT_SLO_S, ITL_SLO_S)
    assert list(frame["label"]) == ["c=1 · 1/2 good", "c=2 · 1/3 good"]
    assert set(frame["goodput"]) == {charts.GOODPUT_DOMAIN[1]}
    relaxed = charts.tradeoff_frame(result, 1.0, 1.0)
    assert list(relaxed["goodput"]) == [charts.GOODPUT_DOMAIN[0], charts.GOODPUT_DOMAIN[1]]  # the failure never counts


def test_requests_frame_keeps_failures(result: records.SweepResult) -> None:
    frame = charts.requests_frame(result, TTFT_SLO_S, ITL_SLO_S)
    assert len(frame) == 5
    failed = frame[frame["error"] != ""]
    assert list(failed["error"]) == ["connection reset"] and not failed["meets_slos"].item()
    assert frame.iloc[3]["tpot_ms"] == pytest.approx(90 / 3)  # (190 - 100) / (4 - 1)


def test_charts_build(result: records.SweepResult) -> None:
    for chart in (
        charts.percentiles_chart(charts.percentiles_frame(result), TTFT_SLO_S, ITL_SLO_S),
        charts.tradeoff_chart(charts.tradeoff_frame(result, TTFT_SLO_S, ITL_SLO_S), TTFT_SLO_S, ITL_SLO_S),
    ):
        spec = chart.to_dict()
        assert len(spec["hconcat"]) == 2


def test_local_run_sits_beside_the_remote_levels(result: records.SweepResult, tiny_lm: LoadedModel) -> None:
    assert list(charts.local_vs_remote_frame(result, None)["where"]) == [
        "remote, concurrency 1",
        "remote, concurrency 2",
    ]
    trace = measure(tiny_lm, Request(prompt="hi", max_new_tokens=3))
    frame = charts.local_vs_remote_frame(result, trace)
    assert frame.iloc[0]["where"].startswith("local instrumented run")
    assert frame.iloc[0]["ttft_p50_ms"] == pytest.approx(trace.ttft_s * 1e3)
    assert frame.iloc[0]["itl_p50_ms"] == pytest.approx(trace.itl_p50_s * 1e3)


def test_chunk_counts_that_miss_the_servers_total_are_flagged(result: records.SweepResult) -> None:
    assert result.disagreeing_records == () and result.tokens_note == ""
    short = replace(record(0, 0.0, (0.1, 0.2), (1, 1)), output_tokens=4)  # one token per chunk; usage says 4
    flagged = replace(result, levels=(records.LevelResult(1, 1.0, (short,)), *result.levels[1:]))
    assert flagged.disagreeing_records == (short,)
    assert "sum to 2, but the server's usage says 4 (request 0)" in flagged.tokens_note
    frame = charts.requests_frame(flagged, TTFT_SLO_S, ITL_SLO_S)
    assert list(frame["tokens_disagree"]) == [True, False, False, False]  # a failed request is never flagged
    assert list(frame["chunk_tokens_total"])[:2] == [2, 2]
    data = json.loads(flagged.to_json())
    assert data["tokens_disagree_requests"] == 1 and data["tokens_note"] == flagged.tokens_note
    assert data["levels"][0]["records"][0]["summary"]["tokens_disagree"] is True
    assert records.SweepResult.from_json(flagged.to_json()).disagreeing_records == (short,)
    assert "warning: 1 of 4 requests" in format_sweep(flagged)


def test_an_unstreamed_stop_token_is_not_a_disagreement() -> None:
    """transformers serve (and vLLM) count the end-of-sequence token that stopped a request in its usage, and stream
    no text for it: one token more than the chunks is expected then, and only then."""
    chunks = record(0, 0.0, (0.1, 0.2, 0.3), (1, 1, 1))
    stopped = replace(chunks, output_tokens=4, finish_reason="stop")
    assert not stopped.tokens_disagree
    assert replace(stopped, finish_reason="length").tokens_disagree  # cut by max_tokens: every token was streamed
    assert replace(stopped, output_tokens=5).tokens_disagree  # two unexplained tokens
