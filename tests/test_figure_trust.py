"""Device figures taken under load are judged so from their own samples, their core share and this machine's earlier
figures; the CLI report, the JSON and a recording then say so, and a page says it once, near its top."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from explorer.charts import cost as cost_charts
from explorer.charts import device as device_charts
from explorer.charts import roofline as roofline_charts
from explorer.core.engine import Request
from explorer.core.figure_correction import recost
from explorer.core.figure_trust import UNDER_LOAD, caveat, figures_line, marked_bound, unreliable_reason
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.report import format_trace
from explorer.core.trace import DeviceProfile, Trace
from explorer.recording.checks import read_recording
from explorer.recording.pdx import RecordingMeta, recording_bytes
from explorer.scale.local import local_gap
from explorer.teach.quiz import evidence_bound
from explorer.teach.tour import Run, batching_slide, time_slide
from explorer.ui import state as ui_state
from tests.apptest_support import open_page

STEADY = DeviceProfile(
    "hand",
    "cpu",
    "float32",
    1e11,
    "measured",
    2e10,
    "measured",
    measured_flops=1e11,
    measured_bandwidth_bytes_per_s=2e10,
    flops_samples=(1e11, 0.95e11, 0.9e11),
    bandwidth_samples=(2e10, 1.9e10),
    matmul_n=2048,
    read_bandwidth_bytes_per_s=2e10,
    read_bandwidth_source="measured",
    measured_read_bandwidth_bytes_per_s=2e10,
    read_bandwidth_samples=(2e10, 1.8e10),
    benchmark_core_share=0.97,
)


def test_steady_figures_on_a_quiet_machine_are_sound() -> None:
    assert unreliable_reason(STEADY) == ""
    assert unreliable_reason(STEADY, earlier=STEADY) == ""
    assert unreliable_reason(STEADY, earlier=replace(STEADY, measured_flops=1.9e11)) == ""  # under 2x below: noise


def test_a_spread_wider_than_the_stated_factor_is_flagged() -> None:
    wide = replace(STEADY, flops_samples=(1e11, 4e10, 9e10))
    assert unreliable_reason(wide) == "the matmul repeats spread 2.5x (more than 1.5x)"
    # A GPU's spec peak is not what the matmul gave: load cannot lower it, so the matmul's spread says nothing of it.
    assert unreliable_reason(replace(wide, peak_flops_source="spec")) == ""


def test_benchmarks_that_had_too_little_of_their_cores_are_flagged_however_steady() -> None:
    busy = replace(STEADY, benchmark_core_share=0.13)
    assert unreliable_reason(busy).startswith("the benchmarks' threads had 13% of their cores, under 70%")
    assert unreliable_reason(replace(STEADY, benchmark_core_share=None)) == ""  # a GPU: not judged by share


def test_figures_far_below_this_machines_earlier_ones_are_flagged() -> None:
    slow = replace(STEADY, measured_flops=4e10, flops_samples=(4e10, 3.9e10), measured_read_bandwidth_bytes_per_s=9e9)
    slow = replace(slow, read_bandwidth_samples=(9e9, 8.5e9))
    reason = unreliable_reason(slow, earlier=STEADY)
    assert "the matmul gave 40.00 GFLOP/s, under half of the 100.00 GFLOP/s measured earlier here" in reason
    assert "the read gave" in reason and "the copy" not in reason
    assert unreliable_reason(slow) == ""  # without earlier figures, steady samples alone look sound
    # Earlier figures of another device, dtype or matmul size are not this machine's same benchmark.
    assert unreliable_reason(slow, earlier=replace(STEADY, name="other")) == ""
    assert unreliable_reason(slow, earlier=replace(STEADY, dtype="bfloat16")) == ""
    assert "matmul" not in unreliable_reason(slow, earlier=replace(STEADY, matmul_n=512))


def test_a_bound_from_unreliable_figures_is_marked_and_a_sound_one_is_not() -> None:
    flagged = replace(STEADY, figures_taken_under_load=True, figures_note="the benchmarks' threads had 13%")
    assert marked_bound("memory", STEADY) == "memory-bound" and caveat(STEADY) == "" and figures_line(STEADY) == ""
    assert marked_bound("compute", flagged) == f"compute-bound ({UNDER_LOAD})"
    assert figures_line(flagged).startswith("The device figures were taken under load, so they are unreliable")
    assert figures_line(flagged).endswith(": the benchmarks' threads had 13%")


@pytest.fixture(scope="module")
def flagged_trace(tiny_lm: LoadedModel) -> Trace:
    trace = measure(tiny_lm, Request("abc", max_new_tokens=4, use_chat_template=False))
    note = "the benchmarks' threads had 13% of their cores, under 70%: other work had the rest"
    return recost(trace, replace(trace.device, figures_taken_under_load=True, figures_note=note, figures_retaken=True))


def test_the_cli_report_says_the_figures_were_taken_under_load_and_marks_every_bound(flagged_trace: Trace) -> None:
    text = format_trace(flagged_trace)
    assert "WARNING: The device figures were taken under load, so they are unreliable" in text
    assert f"FLOP/B ({UNDER_LOAD})" in text  # the ridge on the device line
    prefill = next(line for line in text.splitlines() if line.startswith("prefill  "))
    decode = next(line for line in text.splitlines() if line.startswith("decode   "))
    assert prefill.count(UNDER_LOAD) == 2  # its bound, and the compute-bound prompt length
    assert f"-bound ({UNDER_LOAD})" in decode
    sound = recost(flagged_trace, replace(flagged_trace.device, figures_taken_under_load=False, figures_note=""))
    assert UNDER_LOAD not in format_trace(sound) and "WARNING" not in format_trace(sound)


def test_the_json_and_a_recording_keep_the_flag_and_older_files_open_unflagged(flagged_trace: Trace) -> None:
    data = json.loads(flagged_trace.to_json())
    assert data["device"]["figures_taken_under_load"] is True and data["device"]["figures_retaken"] is True
    assert Trace.from_json(flagged_trace.to_json()).device == flagged_trace.device
    meta = RecordingMeta.of(flagged_trace, "busy", "test")
    assert read_recording(recording_bytes(meta, flagged_trace, None)).trace.device == flagged_trace.device
    for field in ("figures_taken_under_load", "figures_note", "figures_retaken", "benchmark_core_share"):
        del data["device"][field]
    older = Trace.from_dict(data)
    assert older.device.figures_taken_under_load is False and older.device.figures_note == ""


def test_every_sentence_on_screen_states_its_bound_plainly(flagged_trace: Trace) -> None:
    """Issue 42: "(figures taken under load: unreliable)" was repeated in the middle of sentences; a page now says it
    once, near its top, and each sentence states its bound or ridge plainly."""
    device = flagged_trace.device
    plain = [
        roofline_charts.bound_sentence(flagged_trace.prefill, device),
        roofline_charts.prefill_ridge_sentence(flagged_trace),
        evidence_bound(flagged_trace, None).text,
        *cost_charts.takeaway(flagged_trace),
        *[s for slide in (time_slide, batching_slide) for s in slide(Run(flagged_trace, None, "", 400)).sentences],
    ]
    assert all(UNDER_LOAD not in sentence and "under load" not in sentence for sentence in plain), plain
    assert "-bound by the model" in plain[0]
    rows = device_charts.device_frame(device).set_index("figure")
    assert rows.loc["ridge point", "value"].endswith("FLOP/byte")
    assert rows.loc["reliability", "value"] == "unreliable"  # why: its source column, and the page's warning
    assert UNDER_LOAD not in device_charts.figures_text(device)
    gap = local_gap(flagged_trace)
    assert gap is not None and UNDER_LOAD not in gap.sentence and gap.figures_taken_under_load


def under_load_lines(at: AppTest) -> list[str]:
    """Every piece of text on the page that says the figures were taken under load."""
    texts = [e.value for e in [*at.warning, *at.markdown, *at.caption, *at.info, *at.text]]
    return [text for text in texts if "under load" in text]


@pytest.mark.parametrize("page", ["pages/cost.py", "pages/check_yourself.py", "pages/at_scale.py", "pages/tour.py"])
def test_a_page_warns_once_near_its_top_that_the_figures_were_taken_under_load(flagged_trace: Trace, page: str) -> None:
    at = open_page(page, ui_state.RunResult(flagged_trace, None, "", "run 1: busy"))
    warnings = [w.value for w in at.main.warning]
    said = under_load_lines(at)
    assert len(said) == 1, said
    assert any(w.startswith("The device figures were taken under load, so they are unreliable") for w in warnings)
    if page == "pages/cost.py":  # near the top: before the page's first chart and its bound sentences
        order = [e.type for e in at.main]
        first_chart = next(i for i, e in enumerate(at.main) if e.type in ("vega_lite_chart", "arrow_vega_lite_chart"))
        warning_at = next(i for i, e in enumerate(at.main) if e.type == "warning" and "under load" in e.value)
        assert warning_at < first_chart, order
        assert any("-bound by the model" in m.value for m in at.markdown)


def test_a_page_with_sound_figures_says_nothing_about_load(flagged_trace: Trace) -> None:
    sound = recost(flagged_trace, replace(flagged_trace.device, figures_taken_under_load=False, figures_note=""))
    at = open_page("pages/cost.py", ui_state.RunResult(sound, None, "", "run 1: quiet"))
    assert under_load_lines(at) == []
