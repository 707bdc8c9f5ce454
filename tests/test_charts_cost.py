"""The Cost page's time split (explorer.charts.cost) checked exactly against a tiny model's real trace, and its takeaway
computed from the run."""

from __future__ import annotations

import json
from dataclasses import replace

import altair as alt
import pytest

from explorer.charts import cost
from explorer.charts.roofline import prefill_ridge_sentence
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import prefill_ridge_tokens
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import to_ms
from tests.cost_support import tiny_run


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return tiny_run(tiny_lm)


SEGMENTS = ["weight_read_ms", "kv_ms", "compute_not_hidden_ms", "overhead_ms"]


def with_walls(trace: Trace, walls_s: list[float]) -> Trace:
    """The same trace with chosen measured times, to reach branches a real run only reaches by chance."""
    return with_passes(trace, tuple(replace(p, wall_s=w) for p, w in zip(trace.passes, walls_s, strict=True)))


def with_passes(trace: Trace, passes: tuple[PassRecord, ...]) -> Trace:
    """One repeat with these passes."""
    return replace(trace, repeats=(passes,), shown_repeat=0)


def test_time_split_segments_are_the_modelled_times_and_the_overhead(trace: Trace) -> None:
    frame = cost.time_split_frame(trace)
    assert list(frame["pass"]) == [p.index for p in trace.passes]
    assert list(frame["phase"]) == ["prefill"] + ["decode"] * (trace.new_tokens - 1)
    for row, p in zip(frame.itertuples(index=False), trace.passes, strict=True):
        assert row.weight_read_ms == to_ms(p.cost.t_weight_read_s)
        assert row.kv_ms == to_ms(p.cost.t_kv_s)
        assert row.compute_not_hidden_ms == to_ms(max(0.0, p.cost.t_compute_s - p.cost.t_memory_s))
        assert row.overhead_ms == to_ms(p.overhead_s)
        assert row.wall_ms == to_ms(p.wall_s)
        assert row.roofline_ms == to_ms(p.cost.roofline_time_s)
        assert row.bound == p.cost.bound
        assert row.faster_than_model == (p.wall_s < p.cost.roofline_time_s)


def test_segments_sum_to_the_wall_time_when_the_pass_is_slower_than_the_model(trace: Trace) -> None:
    # Both cases by construction: compute hidden behind memory (decode), compute beyond it (a compute-heavy prefill).
    slow = with_walls(trace, [p.cost.roofline_time_s * 3 + 1e-3 for p in trace.passes])
    heavy_cost = replace(slow.prefill.cost, t_compute_s=slow.prefill.cost.t_memory_s * 5)
    slow = with_passes(slow, (replace(slow.prefill, cost=heavy_cost), *slow.decodes))
    frame = cost.time_split_frame(slow)
    assert frame.loc[0, "compute_not_hidden_ms"] > 0 and (frame.loc[1:, "compute_not_hidden_ms"] == 0).all()
    for row, p in zip(frame.itertuples(index=False), slow.passes, strict=True):
        assert sum(getattr(row, s) for s in SEGMENTS) == pytest.approx(to_ms(p.wall_s), rel=1e-12)
        assert not row.faster_than_model


def test_a_pass_faster_than_the_model_is_flagged_not_hidden(trace: Trace) -> None:
    fast = with_walls(trace, [p.cost.roofline_time_s / 2 for p in trace.passes])
    frame = cost.time_split_frame(fast)
    assert frame["faster_than_model"].all()
    assert (frame["overhead_ms"] == 0).all()
    # The bar shows the model's time, the tick the (shorter) measured one.
    modelled = frame[SEGMENTS].sum(axis=1)
    assert (frame["wall_ms"] < modelled).all()
    assert list(modelled) == pytest.approx(list(frame["roofline_ms"]), rel=1e-12)


def test_time_split_range(trace: Trace) -> None:
    assert list(cost.time_split_frame(trace, 2, 4)["pass"]) == [2, 3, 4]
    assert list(cost.time_split_frame(trace, 0, 0)["phase"]) == ["prefill"]


def test_predicted_frame_is_the_raw_model(trace: Trace) -> None:
    frame = cost.predicted_frame(trace)
    assert len(frame) == trace.new_tokens
    for row, p in zip(frame.to_dict("records"), trace.passes, strict=True):
        assert row["flops"] == p.cost.flops
        assert row["weight_bytes_read"] == p.cost.weight_bytes_read and row["kv_bytes_read"] == p.cost.kv_bytes_read
        assert row["t_compute_ms"] == to_ms(p.cost.t_compute_s)
        assert row["t_weight_read_ms"] == to_ms(p.cost.t_weight_read_s)
        assert row["t_kv_ms"] == to_ms(p.cost.t_kv_s) and row["roofline_ms"] == to_ms(p.cost.roofline_time_s)
        assert row["overhead_ms"] == to_ms(p.overhead_s) and row["wall_ms"] == to_ms(p.wall_s)
        assert row["wall_over_roofline"] == p.wall_s / p.cost.roofline_time_s


def test_median_decode_index(trace: Trace) -> None:
    walls = [0.5, 0.04, 0.01, 0.03, 0.07, 0.02, 0.06, 0.05]  # decodes sorted: 0.01 0.02 0.03 0.04 0.05 0.06 0.07
    assert cost.median_decode_index(with_walls(trace, walls)) == 1  # 0.04 s is pass 1
    even = with_passes(trace, with_walls(trace, walls).passes[:5])  # decodes 0.04 0.01 0.03 0.07: lower middle 0.03
    assert cost.median_decode_index(even) == 3
    assert cost.median_decode_index(with_passes(trace, trace.passes[:1])) is None


def test_the_time_split_chart_serialises(trace: Trace) -> None:
    chart = cost.time_split_chart(cost.time_split_frame(trace))
    assert isinstance(chart, alt.TopLevelMixin) and json.dumps(chart.to_dict())  # what Streamlit ships to the browser


def test_beside_the_roofline_the_split_names_its_segments_in_short_lines(trace: Trace) -> None:
    """Cost's split shares the first screen with the roofline (issue 42): its legend's names lose "(modelled)", which
    its source line says, and wrap to short lines, so two columns fit two thirds of the page."""
    spec = cost.time_split_chart(cost.time_split_frame(trace), narrow=True).to_dict()
    expr = spec["layer"][0]["encoding"]["color"]["legend"]["labelExpr"]
    lines = json.loads(expr.removesuffix("[datum.label]"))
    assert list(lines) == cost.SEGMENT_LABELS
    shown = [line for wrapped in lines.values() for line in wrapped]
    assert all(0 < len(line) <= cost.NARROW_LABEL_CHARS and "modelled" not in line for line in shown), shown
    assert lines[cost.SEGMENT_LABELS[2]] == ["compute not hidden", "behind memory"]


def test_prefill_ridge_sentence_and_kv_formula(trace: Trace) -> None:
    text = prefill_ridge_sentence(trace)
    tokens = prefill_ridge_tokens(trace.model, trace.device)
    assert tokens is None or f"compute-bound from {tokens:,} prompt tokens" in text
    assert f"This prompt has {trace.prompt_len} tokens" in text
    last = trace.decodes[-1]
    formula = cost.kv_traffic_formula(trace, last)
    assert (
        f"(old {last.cache_len_before} + new 1) positions" in formula
        and f"+ {last.cache_len_after} by attention" in formula
    )


def test_the_takeaway_is_time_per_token_of_each_phase_then_overhead_then_the_floor(trace: Trace) -> None:
    walls = [0.171, 0.09, 0.092, 0.088, 0.09, 0.095, 0.089, 0.091]  # a prefill, then decodes of about 90 ms
    run = with_walls(trace, walls)
    index = cost.median_decode_index(run)
    assert index == 4  # decodes sorted by time, then index: 88 (3) 89 (6) 90 (1) 90 (4) 91 (7) 92 (2) 95 (5) ms
    per_token = f"{0.171 / run.prompt_len * 1e3:,.3g} ms"
    assert cost.per_token_sentence(run) == (
        f"A prefill: {run.prompt_len} tokens in 171 ms, {per_token} a token; a decode pass: 90 ms (measured, median "
        "of 7)."
    )
    why, overhead, floor = cost.takeaway(run)
    ratio = 0.090 / (0.171 / run.prompt_len)  # the decode median of the 7 decodes: 90 ms
    assert why.startswith(f"Per token, a decode pass (the decode median) took {ratio:,.0f}× a prefill's.")
    assert f"among its {run.prompt_len} tokens" in why
    prefill_share = (0.171 - run.prefill.cost.roofline_time_s) / 0.171
    assert f"{prefill_share:.0%} of the prefill" in overhead and "The profiler below" in overhead
    assert "of 90 ms)" in overhead  # the decode's time is the decode median, in its rounding
    decode = run.passes[index]
    assert f"the decode (pass {index}) is {decode.cost.bound}-bound" in floor and "the model's floor" in floor
    assert f"{0.090 / decode.cost.roofline_time_s:,.1f}× that" in floor


def test_the_decode_median_is_every_repeats_decode_passes_and_one_string(trace: Trace) -> None:
    """Issue 42: Cost said 86.1 ms and At scale 86.40 ms for one run: Cost took the shown repeat's middle pass's median
    over repeats, At scale the median of every decode pass. One definition (`Trace.decode_median_s`), one string."""
    from explorer.charts.latency import decode_gap_sentence
    from explorer.scale.local import local_gap

    first = with_walls(trace, [0.2, 0.080, 0.081, 0.082, 0.083, 0.084, 0.085, 0.086]).passes
    second = with_walls(trace, [0.2, 0.090, 0.091, 0.092, 0.093, 0.094, 0.095, 0.0862]).passes
    run = replace(trace, repeats=(first, second), shown_repeat=0)
    # 14 decodes: the two middle ones are 0.086 and 0.0862; their mean is the median
    assert run.decode_median_s == pytest.approx((0.086 + 0.0862) / 2)
    assert cost.median_decode_index(run) == 4  # the shown repeat's middle pass: 83 ms there, 88 ms over its repeats
    said = cost.decode_median_text(run)
    assert said == "86.1 ms (measured, median of 14)"
    assert said in cost.per_token_sentence(run) and said in decode_gap_sentence(run)
    gap = local_gap(run)
    assert gap is not None and gap.median_wall_s == run.decode_median_s
    one = with_passes(trace, trace.passes[:1])
    assert one.decode_median_s is None and cost.decode_median_text(one) is None
    assert cost.decode_median_text(with_passes(trace, trace.passes[:2]), "recorded").endswith("(recorded, median of 1)")


def test_the_takeaway_names_where_a_profile_put_the_time(trace: Trace) -> None:
    from explorer.core.profiler import PassProfile, ProfileGroup

    groups = tuple(ProfileGroup(name, s, ()) for name, s in [("linear layers / matmuls", 0.02), ("other ops", 0.01)])
    profile = PassProfile(
        "tiny", 3, "decode", 1, 4, "cpu", "CPU self time", 0.1, 0.09, (0.09,), 0.09, groups,
        "not in any op (dispatch, Python)", 0.07, 0,
    )  # fmt: skip
    overhead = cost.takeaway(trace, profile)[1]
    assert "Profiled, pass 3's time went to not in any op (dispatch, Python) 70%, linear layers / matmuls 20%, " in (
        overhead
    )


def test_a_one_token_run_has_a_takeaway_without_a_decode(trace: Trace) -> None:
    one = with_passes(trace, trace.passes[:1])
    _, overhead, floor = cost.takeaway(one)
    assert "no decode pass" in cost.per_token_sentence(one)
    assert "of the prefill" in overhead and "the prefill (pass 0)" in floor
