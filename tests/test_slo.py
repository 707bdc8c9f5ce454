"""SLO defaults that fit the device: TTFT 1.2 × the run's own median, ITL its 90th-percentile gap, rounded to two
significant figures, so a default view of a real run shows met and missed targets; the chat reference (50 ms) where a
run has no figure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.charts import latency
from explorer.core import slo
from explorer.core.recording import bundled
from explorer.core.recording_checks import read_recording


@pytest.mark.parametrize(
    ("value_s", "rounded_s"),
    [(0.05837, 0.058), (0.559, 0.56), (0.00684, 0.0068), (1.234, 1.2), (0.0995, 0.1), (12.34, 12.0)],
)
def test_a_default_is_a_round_figure(value_s: float, rounded_s: float) -> None:
    assert slo.round_figure_s(value_s) == pytest.approx(rounded_s)


def test_defaults_are_1_2_times_the_measured_figures_and_say_so() -> None:
    chosen = slo.chosen_from(0.4659, 0.0584, "this run's median")
    assert chosen.ttft_s == pytest.approx(0.56) and chosen.itl_s == pytest.approx(0.07)
    assert chosen.source == "1.2 × this run's median TTFT (466 ms) and ITL (58.4 ms), rounded"
    assert slo.chosen_from(None, None, "x") is slo.REFERENCE
    assert slo.chosen_from(0.2, None, "x").itl_s == slo.REFERENCE_ITL_SLO_S  # one token: no ITL to choose from


@pytest.mark.parametrize("name", sorted(bundled()))
def test_a_recorded_run_shows_both_met_and_missed_gaps_at_its_defaults(name: str) -> None:
    trace = read_recording(bundled()[name].read_bytes()).trace
    chosen = slo.from_trace(trace)
    itl = latency.itl_frame(trace, chosen.itl_s)
    print(f"{name}: ITL SLO {chosen.itl_s * 1e3:g} ms: {int(itl['over_slo'].sum())} of {len(itl)} gaps over")
    assert 0 < itl["over_slo"].sum() < len(itl) or len(set(itl["itl_ms"])) == 1
    checks = latency.repeat_slo_frame(trace, chosen.ttft_s, chosen.itl_s).set_index("metric")["passes"]
    assert checks["TTFT"] and checks["ITL p50"] and not checks["ITL p99"]  # the median meets it, the tail misses it


def test_the_itl_chart_names_the_chat_reference_in_a_legend_not_over_the_bars() -> None:
    trace = read_recording(next(iter(bundled().values())).read_bytes()).trace
    chosen = replace(slo.from_trace(trace), itl_s=0.07)
    spec = latency.itl_chart(latency.itl_frame(trace, chosen.itl_s), chosen.itl_s).to_dict()
    rules = spec["layer"][1]
    assert rules["mark"]["type"] == "rule" and rules["encoding"]["stroke"]["scale"]["domain"] == [
        "ITL SLO 70 ms",
        "chat reference 50 ms",
    ]
    assert not any(layer["mark"]["type"] == "text" for layer in spec["layer"])
