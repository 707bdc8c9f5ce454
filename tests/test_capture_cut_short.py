"""A capture is never lost to a click (issue 42 §3): a page link's click during a Run stops the script (Streamlit's
stop exception) at its next draw. After the trace arrived, the owner's replay still comes home (the job's reader thread
keeps its maps for the next script run); before it, the job is dropped. A run whose maps never came is marked cut short
(never "capturing"), the Tour's slide 2 says so and how to get the maps, and the Attention page replays it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from unittest import mock

import pytest
import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import StopException

from explorer.core.attention import capture_attention
from explorer.core.attention_maps import maps_to_wire
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.request import Request
from explorer.core.trace import Trace
from explorer.hosting.client import Event
from explorer.hosting.settings import ATTENTION_CAP_ENV
from explorer.teach import tour
from explorer.ui import attention_view, runner
from explorer.ui import state as ui_state
from explorer.ui.device_link import JobStream, device_link
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnersOfATest


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


def run_body(folder: Path, max_new_tokens: int = 4) -> dict[str, object]:
    request = Request("a click away", max_new_tokens=max_new_tokens, use_chat_template=False, stop_at_eos=False)
    return {"model": str(folder), "device": "cpu", "request": asdict(request), "capture": True}


def until(stream: JobStream, name: str) -> dict[str, object]:
    """Read the job's events as the page does, up to `name`'s."""
    for event in stream:
        assert event.name != "error", event.data
        if event.name == name:
            return event.data
    raise AssertionError(f"the job ended before its {name!r} event")


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


@pytest.mark.parametrize("stopped", ["during the replay", "after the maps reached this process"])
def test_a_click_after_the_trace_keeps_the_maps_the_owner_makes(
    tiny_llama_dir: Path, bare_session: None, fresh_device_owner: OwnersOfATest, stopped: str
) -> None:
    """The page's script stops after the trace arrived (a click): the job is not dropped, and its maps come home to
    the run's `OwedCapture` through the reader's thread, with no Streamlit call; also when they had already arrived,
    queued for a page that will never read them."""
    stream = JobStream(device_link(), "run", run_body(tiny_llama_dir), keep_after="trace")
    trace = Trace.from_dict(until(stream, "trace"))
    owed = ui_state.remember(trace, "a click away", inputs_of(tiny_llama_dir))
    assert owed.capture_owed is not None
    owed.capture_owed.start()
    if stopped != "during the replay":
        deadline = time.monotonic() + 30
        while not any(t.what == "attention" for t in fresh_device_owner.latest.queue.turns):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.3)  # its "done" reaches this process's queue for the page
    stream.cancel(runner.owed_end(owed.capture_owed))  # what `on_owner`'s `finally` does when the script stops
    assert owed.capture_owed.wait(60)  # a page waiting for it is woken
    kept = ui_state.current_run()
    assert kept is not None and kept.attention is not None and kept.attention.same_tokens_as(trace)
    assert kept.attention_note == "" and not kept.capture_cut_short and kept.capture_owed is None
    assert st.session_state[ui_state.RUN] == kept  # taken in once


def test_a_click_before_the_trace_drops_the_job_at_its_next_pass(
    tiny_llama_dir: Path, fresh_device_owner: OwnersOfATest, bare_session: None
) -> None:
    """Stopped before its trace (a click, a closed tab): the job's stream is closed and the owner drops the Run at its
    next pass boundary: its turn ends, and nothing comes back."""
    stream = JobStream(device_link(), "run", run_body(tiny_llama_dir, max_new_tokens=64), keep_after="trace")
    until(stream, "pass")
    stream.cancel()
    owner = fresh_device_owner.latest
    deadline = time.monotonic() + 30
    while not any(t.what == "run" for t in owner.queue.turns) and time.monotonic() < deadline:
        time.sleep(0.05)
    run = [t for t in owner.queue.turns if t.what == "run"]
    assert run and run[0].passes < 64  # dropped mid-way, not run to its end


def test_a_click_before_the_maps_marks_it_cut_short_and_a_replay_gets_them(
    trace: Trace, tiny_llama_dir: Path, bare_session: None
) -> None:
    cut = ui_state.remember(trace, "a click away", inputs_of(tiny_llama_dir))  # its replay never came home
    assert cut.capture_cut_short and cut.attention_note == ui_state.CAPTURE_CUT_SHORT
    again = runner.capture_again(cut)  # the trace's own tokens, replayed untimed by the owner on the run's model
    assert again is not None and again.attention is not None and again.attention.same_tokens_as(trace)
    assert not again.capture_cut_short and ui_state.current_run() == again


def test_a_failed_replay_says_why_and_is_not_replayed_again(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, bare_session: None
) -> None:
    monkeypatch.setenv(ATTENTION_CAP_ENV, "0.000001")  # the owner's memory cap for the maps: nothing fits
    inputs = replace(inputs_of(tiny_llama_dir), prompt="a click away", max_new_tokens=4, use_chat_template=False)
    failed = runner.execute_run(inputs)
    assert failed is not None and failed.attention is None
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


def test_a_run_stopped_after_its_trace_owes_its_own_capture_and_takes_the_maps_home(
    trace: Trace, tiny_lm: LoadedModel, tiny_llama_dir: Path, bare_session: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`execute_run` as a click leaves it: its trace arrived, then Streamlit stopped the script. The run kept in the
    session owes its capture with the run's own inputs (so the Attention page can replay it), waits while the owner
    replays, and the job's last event, taken home on the reader's thread, gives it its maps."""
    homes: list[object] = []

    def stopped_after_the_trace(ask: object, kind: str, body: object, on: dict, keep: object) -> None:
        on["trace"](trace.to_dict())
        homes.append(keep.home)  # type: ignore[attr-defined]
        raise StopException  # a click: Streamlit stops the script at its next draw

    monkeypatch.setattr(runner, "ask_owner", stopped_after_the_trace)
    inputs = replace(inputs_of(tiny_llama_dir), prompt="a click away")
    with pytest.raises(StopException):
        runner.execute_run(inputs)
    owed = st.session_state[ui_state.RUN].capture_owed
    assert owed is not None and owed.inputs == inputs and owed.replaying
    maps = capture_attention(tiny_lm, trace)
    homes[0](Event("done", {"maps": maps_to_wire(maps)}))  # type: ignore[operator]
    kept = ui_state.current_run()
    assert kept is not None and kept.attention is not None and not kept.capture_cut_short
