"""Compare two runs: decode compared as each run's median pass (one panel for prefill, one for the median decode, a
bar per run in both, whatever pass index each median is), and `?recording=A&compare=B` opening two recordings side by
side with no model loaded."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from explorer.charts import compare
from explorer.charts.cost import median_decode_index
from explorer.recording.checks import read_recording
from explorer.recording.pdx import bundled
from explorer.ui import state as ui_state
from explorer.ui.recordings import COMPARE_QUERY, QUERY
from tests.apptest_support import ROOT, navigation_like_a_server  # noqa: F401 - an autouse fixture

NAMES = ("bfloat16", "short-chat")
pytestmark = pytest.mark.skipif(not set(NAMES) <= set(bundled()), reason="the two recordings are not bundled")


def trace_of(name: str):  # noqa: ANN201 - a Trace
    return read_recording(bundled()[name].read_bytes()).trace


def test_decode_is_each_runs_median_pass_in_one_panel_whatever_its_index() -> None:
    labelled = [(f"recorded: {n}", trace_of(n)) for n in NAMES]
    frame = compare.split_frame(labelled)
    assert set(frame["phase"]) == {compare.PREFILL, compare.MEDIAN_DECODE}  # two panels, not one per pass index
    for label, trace in labelled:
        decode = frame[(frame["run"] == label) & (frame["phase"] == compare.MEDIAN_DECODE)]
        assert set(decode["pass index"]) == {median_decode_index(trace)}
        assert decode["ms"].sum() >= trace.passes[median_decode_index(trace)].wall_s * 1e3 * 0.999  # parts ≥ wall
    spec = compare.split_chart(frame).to_dict()
    assert spec["encoding"]["row"]["header"]["labelLimit"] == 0 and spec["encoding"]["y"]["axis"]["labelLimit"] == 0


def test_a_link_opens_two_recordings_and_compare_shows_them_first_against_second() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params.update({QUERY: NAMES[0], COMPARE_QUERY: NAMES[1]})
    at.run()
    at.switch_page("pages/compare.py").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.session_state[ui_state.RUN].recorded.name == NAMES[0]  # A is the run every other page shows
    assert [s.value for s in at.selectbox if s.label in ("First run", "Second run")] == [
        f"recorded: {NAMES[0]}",
        f"recorded: {NAMES[1]}",
    ]
    assert len(at.get("vega_lite_chart")) == 1
    at.run()  # opened once: no third run in the history on a rerun
    assert len(at.session_state[ui_state.HISTORY]) == 1


def test_one_recording_alone_says_how_to_open_a_second() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params[QUERY] = NAMES[0]
    at.run()
    at.switch_page("pages/compare.py").run()
    assert any(f"{COMPARE_QUERY}=B" in i.value for i in at.info)
