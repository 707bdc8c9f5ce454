"""A recording opened by link (`?recording=NAME`) draws every "One request" page with no model: `from_pretrained`
raises throughout, the banner names the device and the date, and each page draws in under 2 s (the issue's figure)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from unittest import mock

import pytest
import transformers
from streamlit.testing.v1 import AppTest

from explorer.recording.checks import read_recording
from explorer.recording.pdx import bundled
from explorer.ui import recordings as ui_recordings
from explorer.ui import state as ui_state
from tests.apptest_support import ROOT, navigation_like_a_server  # noqa: F401 - a fixture, used by every test here

ONE_REQUEST_PAGES = ("pages/run.py", "pages/attention.py", "pages/kv_cache.py", "pages/cost.py", "pages/latency.py")
# The "opens (every page drawn) in under 2 s", held as this process's CPU seconds per page: the wall time on
# a 2-core machine shared with other test workers measures them, not the page (both are printed).
PAGE_LIMIT_S = 2.0


@pytest.fixture(autouse=True)
def no_model_can_load() -> Iterator[None]:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a recording must never load a model")

    with (
        mock.patch.object(transformers.AutoModelForCausalLM, "from_pretrained", refuse),
        mock.patch.object(transformers.AutoTokenizer, "from_pretrained", refuse),
    ):
        yield


def open_link(name: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params[ui_recordings.QUERY] = name
    at.run()
    assert not at.exception, at.exception
    return at


def banner_of(at: AppTest) -> str:
    lines = [w.value.replace("\\", "") for w in at.warning if "Recorded run, not live" in w.value.replace("\\", "")]
    assert len(lines) == 1, [w.value for w in at.warning]
    return lines[0]


@pytest.mark.parametrize("name", sorted(bundled()))
def test_a_link_opens_a_recording_on_every_one_request_page_with_no_model(name: str) -> None:
    meta = read_recording(bundled()[name].read_bytes()).meta
    at = open_link(name)
    drawn_s: dict[str, float] = {}
    wall_s: dict[str, float] = {}
    for page in ONE_REQUEST_PAGES:
        started, cpu_started = time.perf_counter(), time.process_time()
        at.switch_page(page).run()
        drawn_s[page] = time.process_time() - cpu_started
        wall_s[page] = time.perf_counter() - started
        assert not at.exception, (page, at.exception)
        assert at.get("vega_lite_chart"), f"{name}: {page} drew no chart"
        banner = banner_of(at)
        assert meta.device in banner and meta.recorded_at[:10] in banner and meta.dtype in banner, banner
        assert not at.error, (page, [e.value for e in at.error])
    print(name, "CPU s", {page.split("/")[1]: round(s, 2) for page, s in drawn_s.items()})
    print(name, "wall s", {page.split("/")[1]: round(s, 2) for page, s in wall_s.items()})
    slow = {page: s for page, s in drawn_s.items() if s >= PAGE_LIMIT_S}
    assert not slow, f"{name}: pages over {PAGE_LIMIT_S} CPU s: {slow}"


def test_a_link_opens_once_so_a_later_run_is_not_replaced_and_compare_sets_two_side_by_side() -> None:
    names = sorted(bundled())
    at = open_link(names[0])
    at.switch_page("pages/compare.py").run()
    assert any("Only one run so far" in i.value for i in at.info)
    at.selectbox(key="recording-choice").set_value(names[1]).run()
    opener = next(b for b in at.button if b.label == "Open this recording")
    opener.click().run()  # the first recording moves to the history
    assert at.session_state[ui_state.RUN].recorded.name == names[1]
    assert not at.exception, at.exception
    assert at.get("vega_lite_chart"), "Compare drew no chart with two recordings"
    at.run()  # the link still says names[0]: it opened once and does not replace the current run
    assert at.session_state[ui_state.RUN].recorded.name == names[1]


def test_an_unknown_link_or_a_bad_upload_is_one_line_and_the_app_keeps_running() -> None:
    at = open_link("no-such-talk")
    assert [e.value.replace("\\", "") for e in at.error] == [
        f"No bundled recording is called 'no-such-talk': the bundled ones are {', '.join(bundled())}."
    ]
    at.run()  # said once: the link is not tried again on every rerun
    assert not at.error
    uploader = at.get("file_uploader")[0]
    uploader.set_value(("talk.pdx", b"not a zip", "application/octet-stream")).run()
    assert len(at.error) == 1 and "not a recording (not a zip archive)" in at.error[0].value.replace("\\", "")
    assert ui_state.RUN not in at.session_state
    assert not at.exception


def test_the_sidebar_download_saves_the_current_run_as_a_recording_that_opens_again() -> None:
    name = sorted(bundled())[0]
    opened = read_recording(bundled()[name].read_bytes())
    again = read_recording(ui_recordings.as_recording_bytes(ui_recordings.as_result(opened)))
    assert again.trace == opened.trace and again.meta == opened.meta
    assert again.attention is not None and again.attention.layers == opened.meta.attention_layers
    at = open_link(name)
    assert [b for b in at.get("download_button") if "recording (.pdx)" in b.proto.label]
