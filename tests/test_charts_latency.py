"""The Latency page's frames checked exactly against real traces of the tiny model: ITLs, SLO flags, percentiles."""

from __future__ import annotations

import json
from dataclasses import replace

import altair as alt
import pytest

from explorer.charts import latency
from explorer.charts.common import display_token
from explorer.engine import Request
from explorer.loading import LoadedModel
from explorer.measure import measure
from explorer.trace import Trace
from explorer.units import to_ms


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("abc", max_new_tokens=8))


@pytest.fixture(scope="module")
def one_token(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("abc", max_new_tokens=1))


def test_itl_frame_is_the_trace_gaps(trace: Trace) -> None:
    slo_s = sorted(trace.itl_s)[len(trace.itl_s) // 2]  # some gaps under, some at or over
    frame = latency.itl_frame(trace, slo_s)
    assert list(frame["token_index"]) == list(range(1, trace.new_tokens))
    assert list(frame["itl_ms"]) == [to_ms(gap) for gap in trace.itl_s]
    assert list(frame["token"]) == [display_token(p.token_text) for p in trace.decodes]
    assert list(frame["over_slo"]) == [not gap < slo_s for gap in trace.itl_s]
    assert frame["over_slo"].any() and not frame["over_slo"].all()
    assert list(frame["vs_slo"]) == [latency.SLO_DOMAIN[int(not gap < slo_s)] for gap in trace.itl_s]


def test_slo_frame_percentiles_and_flags(trace: Trace) -> None:
    frame = latency.slo_frame(trace, 1.0, 0.05)
    rows = {r["metric"]: r for r in frame.to_dict("records")}
    assert rows["TTFT"]["value_ms"] == to_ms(trace.ttft_s) and rows["TTFT"]["slo_ms"] == 1000.0
    assert rows["ITL p50"]["value_ms"] == to_ms(trace.itl_p50_s)
    assert rows["ITL p90"]["value_ms"] == to_ms(trace.itl_p90_s)
    assert rows["ITL p99"]["value_ms"] == to_ms(trace.itl_p99_s)
    assert rows["TTFT"]["passes"] == (trace.ttft_s < 1.0)
    assert rows["ITL p99"]["passes"] == (trace.itl_p99_s < 0.05)


def test_slo_is_a_strict_bound(trace: Trace) -> None:
    # An SLO exactly at the measured value fails ("p99 ITL < 50 ms"); just above, it passes.
    at = latency.slo_frame(trace, trace.ttft_s, trace.itl_p99_s).set_index("metric")["passes"]
    assert not at["TTFT"] and not at["ITL p99"]
    above = latency.slo_frame(trace, trace.ttft_s * 1.01, trace.itl_p99_s * 1.01).set_index("metric")["passes"]
    assert above["TTFT"] and above["ITL p99"]
    tiny = latency.slo_frame(trace, 1e-9, 1e-9).set_index("metric")["passes"]
    assert not tiny.any()


def test_slo_verdict_lines() -> None:
    assert latency.slo_verdict("ITL p99", 47.0, 50.0) == "ITL p99 47.00 ms < 50.00 ms: PASS"
    assert latency.slo_verdict("TTFT", 1200.0, 1000.0) == "TTFT 1200.00 ms ≥ 1000.00 ms: FAIL"
    assert latency.slo_verdict("ITL p99", 50.0, 50.0).endswith("FAIL")
    assert latency.slo_verdict("ITL p99", None, 50.0) == "ITL p99: n/a (no value in this run)"


def test_one_token_has_no_itl(one_token: Trace) -> None:
    assert one_token.itl_s == ()
    frame = latency.itl_frame(one_token, 0.05)
    assert frame.empty and "itl_ms" in frame.columns
    slos = latency.slo_frame(one_token, 1.0, 0.05).set_index("metric")
    assert slos.loc["TTFT", "passes"] == (one_token.ttft_s < 1.0)
    assert slos.loc[["ITL p50", "ITL p90", "ITL p99"], "passes"].isna().all()
    assert latency.itl_histogram_chart(frame, slos.reset_index()).to_dict()


def test_runs_frames(trace: Trace, one_token: Trace) -> None:
    # Another run: TTFT 2.5 s, every gap twice as long.
    first_s = trace.passes[0].token_s
    slower = tuple(replace(p, token_s=2.5 + 2 * (p.token_s - first_s)) for p in trace.passes)
    other = replace(trace, repeats=(slower,), shown_repeat=0)
    runs = [
        latency.LabelledTrace("run 1: *not* <b>markdown</b>", one_token),
        latency.LabelledTrace("run 2: b", other),
        latency.LabelledTrace("run 3: c", trace),
    ]
    itl = latency.runs_itl_frame(runs)
    assert len(itl) == len(other.itl_s) + len(trace.itl_s)  # the one-token run adds no ITL rows
    assert list(itl[itl["run"] == 2]["itl_ms"]) == [to_ms(gap) for gap in trace.itl_s]
    assert list(itl[itl["run"] == 1]["itl_ms"]) == [to_ms(2 * gap) for gap in trace.itl_s]
    assert set(itl[itl["current"]]["label"]) == {"run 3: c"}

    ttft = latency.runs_ttft_frame(runs, 1.0)
    assert list(ttft["label"]) == [r.label for r in runs]
    assert list(ttft["ttft_ms"]) == [to_ms(one_token.ttft_s), 2500.0, to_ms(trace.ttft_s)]
    assert list(ttft["passes"]) == [one_token.ttft_s < 1.0, False, trace.ttft_s < 1.0]
    assert list(ttft["current"]) == [False, False, True]
    assert list(ttft["prompt_tokens"]) == [r.trace.prompt_len for r in runs]


def test_run_colors_end_darkest_and_stay_distinct() -> None:
    for count in range(1, len(latency.RUN_RANGE) + 1):
        colors = latency.run_colors(count)
        assert len(colors) == count and colors[-1] == latency.RUN_RANGE[-1]
        assert len(set(colors)) == count
    assert latency.run_colors(0) == []


def test_charts_serialise_with_the_slo_rules(trace: Trace) -> None:
    itl = latency.itl_frame(trace, 0.05)
    slos = latency.slo_frame(trace, 1.0, 0.05)
    runs = [latency.LabelledTrace("run 1: a", trace), latency.LabelledTrace("run 2: b", trace)]
    charts = {
        "itl": latency.itl_chart(itl, 0.05),
        "histogram": latency.itl_histogram_chart(itl, slos),
        "runs_itl": latency.runs_itl_chart(latency.runs_itl_frame(runs), [r.label for r in runs], 0.05),
        "runs_ttft": latency.runs_ttft_chart(latency.runs_ttft_frame(runs, 1.0), 1.0),
    }
    specs = {}
    for name, chart in charts.items():
        assert isinstance(chart, alt.TopLevelMixin)
        specs[name] = json.dumps(chart.to_dict())
    assert "ITL SLO 50 ms" in specs["itl"] and "ITL SLO 50 ms" in specs["runs_itl"]
    assert "TTFT SLO 1000 ms" in specs["runs_ttft"]
