"""The Latency page's frames checked exactly against real traces of the tiny model: ITLs, SLO flags, percentiles."""

from __future__ import annotations

import json
from dataclasses import replace

import altair as alt
import pytest

from explorer.charts import latency
from explorer.charts.common import display_token
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace
from explorer.core.units import to_ms


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


def test_repeat_slo_frame_of_one_repeat_is_the_trace_figures(trace: Trace) -> None:
    frame = latency.repeat_slo_frame(trace, 1.0, 0.05)
    rows = {r["metric"]: r for r in frame.to_dict("records")}
    assert rows["TTFT"]["value_ms"] == to_ms(trace.ttft_s) and rows["TTFT"]["slo_ms"] == 1000.0
    assert rows["ITL p50"]["value_ms"] == to_ms(trace.itl_p50_s)
    assert rows["ITL p90"]["value_ms"] == to_ms(trace.itl_p90_s)
    assert rows["ITL p99"]["value_ms"] == to_ms(trace.itl_p99_s)
    assert rows["ITL p99"]["min_ms"] == rows["ITL p99"]["max_ms"] == to_ms(trace.itl_p99_s)
    assert {r["repeats"] for r in rows.values()} == {1}
    assert rows["TTFT"]["passes"] == (trace.ttft_s < 1.0)
    assert rows["ITL p99"]["passes"] == (trace.itl_p99_s < 0.05)


def with_token_times(trace: Trace, *times_s: tuple[float, ...]) -> Trace:
    """The trace's first passes, repeated once per tuple of token times (seconds after the request started)."""
    repeats = tuple(tuple(replace(p, token_s=t) for p, t in zip(trace.passes, times)) for times in times_s)
    return replace(trace, repeats=repeats, shown_repeat=0)


def test_repeat_slo_frame_takes_each_figure_per_repeat_then_the_median(trace: Trace) -> None:
    # Three repeats of three tokens, in binary fractions so every figure below is exact.
    # TTFTs 250, 500, 125 ms; gaps (62.5, 125), (62.5, 62.5), (125, 250) ms.
    repeated = with_token_times(trace, (0.25, 0.3125, 0.4375), (0.5, 0.5625, 0.625), (0.125, 0.25, 0.5))
    frame = latency.repeat_slo_frame(repeated, 0.25, 0.1).set_index("metric")
    assert list(frame.index) == ["TTFT", "ITL p50", "ITL p90", "ITL p99"]
    assert frame.loc["TTFT", ["value_ms", "min_ms", "max_ms"]].tolist() == [250.0, 125.0, 500.0]
    # p50 per repeat: 93.75, 62.5, 187.5 ms; p90: 118.75, 62.5, 237.5 ms (62.5 + 0.9 x 62.5, 125 + 0.9 x 125).
    assert frame.loc["ITL p50", ["value_ms", "min_ms", "max_ms"]].tolist() == [93.75, 62.5, 187.5]
    assert frame.loc["ITL p90", ["value_ms", "min_ms", "max_ms"]].tolist() == pytest.approx([118.75, 62.5, 237.5])
    assert frame.loc["ITL p99", "value_ms"] == pytest.approx(124.375)  # 62.5 + 0.99 x 62.5, the middle repeat
    assert frame["repeats"].tolist() == [3, 3, 3, 3]
    assert frame["slo_ms"].tolist() == [250.0, 100.0, 100.0, 100.0]
    # Strict bounds: a TTFT median exactly at its SLO fails.
    assert frame["passes"].tolist() == [False, True, False, False]


def test_pooled_percentiles_pool_every_repeats_gaps(trace: Trace) -> None:
    repeated = with_token_times(trace, (0.25, 0.3125, 0.4375), (0.5, 0.5625, 0.625), (0.125, 0.25, 0.5))
    pooled = latency.pooled_percentiles_frame(repeated)
    assert list(pooled.columns) == ["metric", "value_ms"] and list(pooled["metric"]) == [
        "ITL p50",
        "ITL p90",
        "ITL p99",
    ]
    # The six gaps sorted: 62.5, 62.5, 62.5, 125, 125, 250 ms; p90 sits at 4.5 of 5, p99 at 4.95.
    assert pooled["value_ms"].tolist() == pytest.approx([93.75, 187.5, 243.75])
    per_repeat = latency.repeat_slo_frame(repeated, 1.0, 0.1).set_index("metric")["value_ms"]
    assert pooled["value_ms"][1] != pytest.approx(per_repeat["ITL p90"])  # why the page says they can differ


def test_slo_is_a_strict_bound(trace: Trace) -> None:
    # An SLO exactly at the measured value fails ("p99 ITL < 50 ms"); just above, it passes.
    at = latency.repeat_slo_frame(trace, trace.ttft_s, trace.itl_p99_s).set_index("metric")["passes"]
    assert not at["TTFT"] and not at["ITL p99"]
    above = latency.repeat_slo_frame(trace, trace.ttft_s * 1.01, trace.itl_p99_s * 1.01).set_index("metric")["passes"]
    assert above["TTFT"] and above["ITL p99"]
    tiny = latency.repeat_slo_frame(trace, 1e-9, 1e-9).set_index("metric")["passes"]
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
    slos = latency.repeat_slo_frame(one_token, 1.0, 0.05).set_index("metric")
    assert slos.loc["TTFT", "passes"] == (one_token.ttft_s < 1.0)
    assert slos.loc[["ITL p50", "ITL p90", "ITL p99"], "passes"].isna().all()
    assert slos.loc[["ITL p50", "ITL p90", "ITL p99"], "repeats"].tolist() == [0, 0, 0]
    pooled = latency.pooled_percentiles_frame(one_token)
    assert pooled.empty and list(pooled.columns) == ["metric", "value_ms"]
    assert latency.itl_histogram_chart(latency.itl_distribution_frame(one_token), pooled, 0.05).to_dict()


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
    pooled = latency.pooled_percentiles_frame(trace)
    runs = [latency.LabelledTrace("run 1: a", trace), latency.LabelledTrace("run 2: b", trace)]
    charts = {
        "itl": latency.itl_chart(itl, 0.05),
        "histogram": latency.itl_histogram_chart(latency.itl_distribution_frame(trace), pooled, 0.05),
        "runs_itl": latency.runs_itl_chart(latency.runs_itl_frame(runs), [r.label for r in runs], 0.05),
        "runs_ttft": latency.runs_ttft_chart(latency.runs_ttft_frame(runs, 1.0), 1.0),
    }
    specs = {}
    for name, chart in charts.items():
        assert isinstance(chart, alt.TopLevelMixin)
        specs[name] = json.dumps(chart.to_dict())
    assert "ITL SLO 50 ms" in specs["itl"] and "ITL SLO 50 ms" in specs["runs_itl"]
    assert "TTFT SLO 1,000 ms" in specs["runs_ttft"]
    assert '"line": "ITL SLO 50 ms"' in specs["histogram"] and '"metric": "ITL p99"' in specs["histogram"]
    assert latency.HISTOGRAM_TITLE in specs["histogram"]


def test_what_a_decode_gap_waits_on_is_computed_at_this_context_and_the_maximum() -> None:
    """SmolLM2 by hand: at 100 tokens DynamicCache moves 3 x 100 x 46,080 B = 13.82 MB of KV traffic against 538.06 MB
    of weights (2.5 %); at 8,192 tokens 3 x 8,192 x 46,080 B = 1.13 GB (68 %). Not 'roughly flat': it depends. Issue
    42: that figure is traffic, said beside the cache it moves through (100 x 46,080 B = 4.61 MB; 8,192 x 46,080 B =
    377.5 MB, the KV cache page's figure), never as the cache itself."""
    from types import SimpleNamespace

    from explorer.core.roofline import pass_cost
    from explorer.core.trace import DeviceProfile
    from tests.test_roofline import smollm2_by_hand

    model, device = smollm2_by_hand(), DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")
    last = SimpleNamespace(
        cache_len_after=100, kv_cache_bytes=100 * 46_080, cost=pass_cost(model, device, 1, cache_len_before=99)
    )
    run = SimpleNamespace(model=model, device=device, decodes=[last])
    assert latency.decode_bytes_sentence(run) == (  # type: ignore[arg-type]
        "Modelled, this run's last decode pass (at 100 tokens) moved 13.82 MB of KV traffic (= 3.0x the 4.61 MB "
        "cache) against 538.1 MB of weights (2.5% KV); at the model's maximum of 8,192 tokens, 1.13 GB of KV traffic "
        "(= 3.0x the 377.5 MB cache) against 538.1 MB of weights (68% KV)."
    )
    assert latency.decode_bytes_sentence(SimpleNamespace(model=model, device=device, decodes=[])).startswith(  # type: ignore[arg-type]
        "Modelled, a decode pass of this model at the model's maximum of 8,192 tokens would move 1.13 GB of KV traffic"
    )
    assert "of KV cache" not in latency.decode_bytes_sentence(run)  # type: ignore[arg-type]


def test_kv_traffic_is_named_as_traffic_with_its_multiple_of_the_cache() -> None:
    """Issue 42: Cost's decode read "6.91 MB of KV cache" when the cache held 2.30 MB. A concatenating cache's decode
    reads (old T - 1 + new 1) + T positions and writes T: 3T, so 3.0x; the figure names itself traffic."""
    from explorer.charts.kv import kv_traffic_multiple, kv_traffic_text

    per_position, held = 46_080, 50  # SmolLM2: 2 x 30 layers x 3 KV heads x 64 x 4 B; 50 positions
    moved = (49 + 1 + 50) * per_position + 50 * per_position
    assert kv_traffic_multiple(moved, held * per_position) == 3.0
    assert kv_traffic_text(moved, held * per_position) == "6.91 MB of KV traffic (= 3.0x the 2.30 MB cache)"
    assert kv_traffic_multiple(10, 0) is None and kv_traffic_text(10, 0) == "10 B of KV traffic"


def test_the_histogram_has_a_title_and_names_its_lines_in_a_legend_not_over_the_bars(trace: Trace) -> None:
    """Issue 31: the histogram had no title and its p50/p90 labels sat on the bars and on the SLO line."""
    pooled = latency.pooled_percentiles_frame(trace)
    spec = latency.itl_histogram_chart(latency.itl_distribution_frame(trace), pooled, 0.05).to_dict()
    assert spec["title"] == latency.HISTOGRAM_TITLE
    assert not any(layer["mark"]["type"] == "text" for layer in spec["layer"])
    stroke = spec["layer"][1]["encoding"]["stroke"]
    assert stroke["legend"]["orient"] == "top" and stroke["scale"]["domain"][-1] == "ITL SLO 50 ms"
    assert [name.split(" ")[1] for name in stroke["scale"]["domain"][:-1]] == ["p50", "p90", "p99"]
