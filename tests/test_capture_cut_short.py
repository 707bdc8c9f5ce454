"""A capture is never lost to a click (issue 42 §3): a page link's click during the attention replay stops the script
(Streamlit's stop exception) at its next draw, the replay spinner's end, and again at every session-state access after
it. Maps already made are kept and taken in by the next script run; a replay stopped sooner leaves the run marked cut
short (never "capturing"), the Tour's slide 2 says so and how to get the maps, and the Attention page replays it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import StopException

from explorer.core.attention import capture_attention
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace
from explorer.teach import tour
from explorer.ui import attention_view, runner
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

CLICK = StopException()  # what a page link's click raised in the script at its next draw (seen in a browser)


@pytest.fixture
def bare_session() -> Iterator[None]:
    """Streamlit's bare-mode session state (no server): emptied before and after, so no test sees another's run."""
    st.session_state.clear()
    yield
    st.session_state.clear()


@pytest.fixture
def trace(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("a click away", max_new_tokens=4))


def inputs_of(folder: Path) -> ui_state.RunInputs:
    return ui_state.RunInputs(model=str(folder), device="cpu")


@contextmanager
def click_at_the_spinners_end() -> Iterator[None]:
    """The replay's spinner, clicked away from: Streamlit raises at its end, the first draw after the maps are made."""

    @contextmanager
    def spinner(_text: str) -> Iterator[None]:
        yield
        raise CLICK

    with mock.patch.object(runner.st, "spinner", spinner):
        yield


def test_a_run_owes_its_capture_until_the_replay_ends_and_never_says_capturing(
    trace: Trace, tiny_llama_dir: Path, bare_session: None
) -> None:
    owed = ui_state.remember(trace, "a click away", inputs_of(tiny_llama_dir))
    assert owed.capture_cut_short and owed.attention_note == ui_state.CAPTURE_CUT_SHORT
    assert "Capturing" not in owed.attention_note and "Attention page" in owed.attention_note
    off = ui_state.remember(trace, "capture off")
    assert not off.capture_cut_short and off.capture_owed is None
    assert ui_state.current_run() == off
    assert ui_state.history()[-1].capture_owed is None  # an earlier run is never replayed: its maps are dropped


def test_a_click_at_the_replays_end_keeps_the_maps_it_made(
    tiny_lm: LoadedModel, trace: Trace, tiny_llama_dir: Path, bare_session: None
) -> None:
    owed = ui_state.remember(trace, "a click away", inputs_of(tiny_llama_dir))
    with click_at_the_spinners_end(), pytest.raises(StopException):
        runner.attach_attention(tiny_lm, owed)
    # The stopped script stored nothing in the session (every access raises once stopped): the next one takes them in.
    assert st.session_state[ui_state.RUN] is owed and owed.capture_owed is not None
    assert not owed.capture_owed.replaying and owed.capture_owed.wait(0)  # a page waiting for it is woken
    kept = ui_state.current_run()
    assert kept is not None and kept.attention is not None and kept.attention.same_tokens_as(trace)
    assert kept.attention_note == "" and not kept.capture_cut_short and kept.capture_owed is None
    assert st.session_state[ui_state.RUN] == kept  # taken in once


def test_a_click_before_the_maps_marks_it_cut_short_and_a_replay_gets_them(
    trace: Trace, tiny_lm: LoadedModel, tiny_llama_dir: Path, bare_session: None
) -> None:
    owed = ui_state.remember(trace, "a click away", inputs_of(tiny_llama_dir))
    with mock.patch.object(runner, "capture_attention", side_effect=CLICK), pytest.raises(StopException):
        runner.attach_attention(tiny_lm, owed)
    cut = ui_state.current_run()
    assert cut is not None and cut.capture_cut_short and cut.attention_note == ui_state.CAPTURE_CUT_SHORT
    again = runner.capture_again(cut)  # the trace's own tokens, replayed untimed on the run's model
    assert again is not None and again.attention is not None and again.attention.same_tokens_as(trace)
    assert not again.capture_cut_short and ui_state.current_run() == again


def test_a_failed_replay_says_why_and_is_not_replayed_again(
    tiny_lm: LoadedModel, trace: Trace, tiny_llama_dir: Path, bare_session: None
) -> None:
    owed = ui_state.remember(trace, "a click away", inputs_of(tiny_llama_dir))
    failed = runner.attach_attention(tiny_lm, owed, cap_bytes=1)  # over the memory cap
    assert "cap" in failed.attention_note and not failed.capture_cut_short
    assert ui_state.current_run() == failed


def cut_short(trace: Trace, folder: Path) -> ui_state.RunResult:
    """The run as a click during its replay left it (`remember` with capture on, then no replay)."""
    label = "run 1: a click away"
    owed = ui_state.OwedCapture(inputs_of(folder))
    return ui_state.RunResult(trace, None, ui_state.CAPTURE_CUT_SHORT, label, capture_owed=owed)


def test_the_tours_slide_2_says_the_capture_was_cut_short_and_how_to_get_it(trace: Trace, tiny_llama_dir: Path) -> None:
    at = open_page("pages/tour.py", cut_short(trace, tiny_llama_dir))
    at.button(key="tour-next").click().run()
    assert not at.exception and at.title[0].value == tour.TITLES[1]
    said = " ".join(m.value for m in at.markdown)
    assert "cut short by a click" in said and "open the Attention page" in said
    assert "No attention maps were captured" not in said
    off = tour.slide(1, tour.Run(trace, None, "off", 380))
    assert "No attention maps were captured" in off.sentences[1]  # capture off still says so


def test_the_attention_page_replays_a_capture_cut_short_and_draws_its_maps(trace: Trace, tiny_llama_dir: Path) -> None:
    at = open_page("pages/attention.py", cut_short(trace, tiny_llama_dir))
    assert not at.error, [e.value for e in at.error]
    assert attention_view.CUT_SHORT_LINE in [c.value for c in at.caption]
    assert len(at.get("vega_lite_chart")) >= 2  # the prefill map and the decode rows
    kept = at.session_state[ui_state.RUN]
    assert kept.attention is not None and kept.attention.same_tokens_as(trace) and not kept.capture_cut_short
    at.run()  # opened again: the maps are there, nothing is replayed or said again
    assert attention_view.CUT_SHORT_LINE not in [c.value for c in at.caption]


def test_where_the_replay_is_refused_the_page_offers_capture_now_and_its_click_gets_the_maps(
    trace: Trace, tiny_llama_dir: Path
) -> None:
    refused = mock.patch.object(attention_view, "capture_again", return_value=None)  # e.g. its wait in line ran out
    with refused:
        at = open_page("pages/attention.py", cut_short(trace, tiny_llama_dir))
    assert at.button(key="attention-capture-now").label == attention_view.CAPTURE_NOW
    assert not at.get("vega_lite_chart")
    at.button(key="attention-capture-now").click().run()
    assert not at.exception and len(at.get("vega_lite_chart")) >= 2
    assert at.session_state[ui_state.RUN].attention is not None


def test_a_recording_or_a_capture_switched_off_is_never_replayed(trace: Trace, tiny_llama_dir: Path) -> None:
    off = ui_state.RunResult(trace, None, runner.ATTENTION_OFF, "run 1: off")
    with mock.patch.object(attention_view, "capture_again", side_effect=AssertionError("replayed")):
        at = open_page("pages/attention.py", off)
    assert [i.value.replace("\\", "") for i in at.info] == [runner.ATTENTION_OFF]
    assert replace(off, capture_owed=ui_state.OwedCapture(inputs_of(tiny_llama_dir))).capture_cut_short


def test_a_replay_a_click_left_running_is_waited_for_not_run_twice(
    tiny_lm: LoadedModel, trace: Trace, tiny_llama_dir: Path
) -> None:
    """Streamlit runs the next page's script in a new thread while the stopped one still replays: the Attention page
    says so and waits for that replay's maps instead of starting a second one."""
    result = cut_short(trace, tiny_llama_dir)
    owed = result.capture_owed
    assert owed is not None
    owed.start()  # the stopped script's thread, still replaying
    maps = capture_attention(tiny_lm, trace)
    ends = threading.Timer(1.0, owed.end, args=(maps,))
    ends.start()
    try:
        with mock.patch.object(attention_view, "capture_again", side_effect=AssertionError("replayed twice")):
            at = open_page("pages/attention.py", result)
    finally:
        ends.join()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert attention_view.STILL_REPLAYING_LINE in [c.value for c in at.caption]
    assert len(at.get("vega_lite_chart")) >= 2 and at.session_state[ui_state.RUN].attention is maps


def test_a_replay_still_running_after_the_wait_leaves_a_capture_now_button(
    trace: Trace, tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attention_view, "REPLAY_WAIT_S", 0.2)
    result = cut_short(trace, tiny_llama_dir)
    assert result.capture_owed is not None
    result.capture_owed.start()  # and never ends (a thread that died without its `finally`)
    at = open_page("pages/attention.py", result)
    assert at.button(key="attention-capture-now").label == attention_view.CAPTURE_NOW
    result.capture_owed.end(None)  # its end: the button's click now replays it
    at.button(key="attention-capture-now").click().run()
    assert not at.exception and len(at.get("vega_lite_chart")) >= 2
