"""Presenter mode by link: `?presenter=1` turns it on from whatever page a link opens, on the Tour together with a
recording opened by the same link; it stays on over page switches (the address bar keeps saying so) and `?presenter=0`
or the switch turns it off. AppTest, no model loaded."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from explorer.recording.pdx import bundled
from explorer.teach.tour import TITLES
from explorer.ui import state as ui_state
from explorer.ui.presenter import PRESENTER_CSS, PRESENTER_KEY, PRESENTER_ON, PRESENTER_PARAM
from explorer.ui.recordings import QUERY
from tests.apptest_support import ROOT, navigation_like_a_server  # noqa: F401 - an autouse fixture

PAGES = re.findall(r'st\.Page\("(pages/[a-z_]+\.py)"', (ROOT / "app.py").read_text())
RECORDING = "short-chat"


def fresh_app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def presenter_on(at: AppTest) -> bool:
    styled = any(PRESENTER_CSS in getattr(el.proto, "body", "") for el in at.get("html"))
    return at.sidebar.toggle(key=PRESENTER_KEY).value is True and at.session_state[PRESENTER_KEY] is True and styled


def test_every_page_is_listed() -> None:
    assert len(PAGES) == 16 and all(Path(ROOT / p).exists() for p in PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_a_link_with_presenter_1_turns_presenter_mode_on_on_every_page(page: str) -> None:
    at = fresh_app()
    assert at.sidebar.toggle(key=PRESENTER_KEY).value is False
    at.query_params[PRESENTER_PARAM] = "1"
    at.switch_page(page).run()
    assert not at.exception, at.exception
    assert presenter_on(at), page


def test_presenter_mode_survives_page_switches_and_a_link_can_turn_it_off() -> None:
    at = fresh_app()
    at.query_params[PRESENTER_PARAM] = "1"
    at.switch_page("pages/latency.py").run()
    assert presenter_on(at)
    at.query_params.clear()  # a page switch in the browser drops the query parameters
    at.switch_page("pages/attention.py").run()
    assert presenter_on(at) and at.query_params[PRESENTER_PARAM] == "1"  # the address bar says so again
    at.query_params[PRESENTER_PARAM] = "0"
    at.run()
    assert at.sidebar.toggle(key=PRESENTER_KEY).value is False and PRESENTER_PARAM not in at.query_params


def test_presenter_mode_survives_a_page_switch_that_dropped_the_switchs_widget_state() -> None:
    """A click on another page while this one is still drawing: Streamlit then drops the state of every widget the
    browser did not report (ScriptRunner, "Clear widget state on page change"), the sidebar switch among them. CI's
    presenter walk once lost presenter mode so on its second page, while the session's recording stayed. Here the
    session holds the mode and no state for the switch, as after such a switch."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state[PRESENTER_ON] = True
    at.run()
    assert not at.exception, at.exception
    assert presenter_on(at) and at.query_params[PRESENTER_PARAM] == "1"
    at.switch_page("pages/attention.py").run()
    assert presenter_on(at)


def test_presenter_mode_survives_a_page_switch_that_brought_the_switch_back_at_its_default() -> None:
    """The other way CI's presenter walk lost the mode on its way to the Tour: the switch's state came back off (its
    default) with no click on it. Only the switch's callback or a link changes the mode, so the page stays
    presenting and the switch is drawn on again."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state[PRESENTER_ON] = True
    at.run()
    at.session_state[PRESENTER_KEY] = False  # as Streamlit's reset leaves it: no on_change ran
    at.switch_page("pages/attention.py").run()
    assert not at.exception, at.exception
    assert presenter_on(at) and at.query_params[PRESENTER_PARAM] == "1"


def test_the_switch_wins_over_a_link_already_applied() -> None:
    at = fresh_app()
    at.query_params[PRESENTER_PARAM] = "1"
    at.run()
    at.sidebar.toggle(key=PRESENTER_KEY).set_value(False).run()
    at.run()  # the link's old value is not applied again over the switch
    assert at.sidebar.toggle(key=PRESENTER_KEY).value is False and PRESENTER_PARAM not in at.query_params


@pytest.mark.skipif(RECORDING not in bundled(), reason="the short chat recording is not bundled")
def test_the_tour_opens_a_recording_in_presenter_mode_from_one_link() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.query_params.update({QUERY: RECORDING, PRESENTER_PARAM: "1", "slide": "3"})
    at.switch_page("pages/tour.py").run()
    assert not at.exception, at.exception
    assert presenter_on(at)
    result = at.session_state[ui_state.RUN]
    assert result.recorded is not None and result.recorded.name == RECORDING
    assert len(at.main.columns) == 2 and at.main.columns[0].get("vega_lite_chart")  # the slide's presenter layout
    assert at.title[0].value == TITLES[2] and at.query_params["slide"] == "3"


def test_presenter_mode_folds_the_sidebar_and_unfolds_it_when_off() -> None:
    """Issue 42: the Tour in presenter mode kept the 300 px sidebar. Each run asks for the sidebar's state from the
    mode (Streamlit applies a new one as it arrives; the browser walk of tests/test_browser_legibility.py sees it
    fold)."""
    asked: list[object] = []
    real = st.set_page_config

    def record(*args: object, **kwargs: object) -> None:
        asked.append(kwargs.get("initial_sidebar_state"))
        real(*args, **kwargs)

    with mock.patch.object(st, "set_page_config", side_effect=record):
        at = fresh_app()
        assert asked[-1] == "auto"
        at.query_params[PRESENTER_PARAM] = "1"
        at.switch_page("pages/tour.py").run()
        assert presenter_on(at) and asked[-1] == "collapsed"
        at.sidebar.toggle(key=PRESENTER_KEY).set_value(False).run()
        assert asked[-1] == "auto"
