"""No traceback reaches a visitor: an unexpected error inside any page is one line (the type alone on a hosted server,
type and message locally) with the whole traceback in the server log, while st.rerun and st.stop still work."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from unittest import mock

import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException
from streamlit.testing.v1 import AppTest

from explorer.core.errors import BadInput
from explorer.hosting import settings
from explorer.ui import guard
from tests.apptest_support import navigation_like_a_server  # noqa: F401 - an autouse fixture

ROOT = Path(__file__).resolve().parents[1]
SECRET = "boom in /srv/explorer/secret_path.py"


def app_pages() -> list[str]:
    """Every page app.py lists, read from its st.Page calls (so a new page is covered without editing this test)."""
    tree = ast.parse((ROOT / "app.py").read_text())
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "Page"
        and isinstance(node.args[0], ast.Constant)
    ]


PAGES = app_pages()


def test_every_page_is_listed() -> None:
    assert len(PAGES) == len(list((ROOT / "pages").glob("*.py"))) and "pages/endpoint.py" in PAGES


@pytest.mark.parametrize("hosted", [True, False], ids=["hosted", "local"])
def test_an_error_inside_every_page_is_one_line(
    hosted: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(settings.HOSTED_ENV, "1" if hosted else "0")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception and not at.error
    # Every page opens with st.title, directly or through ui.page_with_run / ui.lab_page: make it fail.
    with mock.patch("streamlit.title", side_effect=ValueError(SECRET + "\nTraceback (most recent call last):")):
        for page in PAGES:
            caplog.clear()
            at.switch_page(page).run()
            assert not at.exception, f"{page}: {at.exception}"
            shown = [e.value.replace("\\", "") for e in at.error]  # as read: the app escapes markdown with "\"
            if hosted:
                expected = "Something went wrong on this page (ValueError); the error is in the server log."
            else:
                expected = (
                    f"Something went wrong on this page: ValueError: {SECRET} (the traceback is in the server log)."
                )
            assert shown == [expected], f"{page}: {shown}"
            logged = [r for r in caplog.records if r.name == guard.LOG.name]
            assert len(logged) == 1 and logged[0].exc_info is not None and logged[0].levelno == logging.ERROR, page


def test_a_users_error_is_its_own_line_and_a_malformed_setting_says_as_little_as_hosted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert guard.error_line(BadInput("Type a prompt.\nmore"), hosted=True) == "Type a prompt."
    monkeypatch.setenv(settings.HOSTED_ENV, "0")
    monkeypatch.setenv(settings.RUNS_PER_MINUTE_ENV, "x")  # read only in hosted mode: fine here
    assert guard.hosted_or_unsure() is False
    monkeypatch.setenv(settings.HOSTED_ENV, "1")
    assert guard.hosted_or_unsure() is True


def rerun_then_stop() -> None:
    """A page that reruns itself once, then stops halfway: both inside the guard."""
    import streamlit as st

    from explorer.ui.guard import one_line_errors

    st.session_state["runs"] = st.session_state.get("runs", 0) + 1
    with one_line_errors():
        if st.session_state["runs"] == 1:
            st.rerun()
        st.markdown(f"run {st.session_state['runs']}")
        st.stop()
        st.markdown("after the stop")  # never drawn


def test_rerun_and_stop_pass_through_the_guard() -> None:
    assert not issubclass(RerunException, Exception) and not issubclass(StopException, Exception)  # switch_page too
    at = AppTest.from_function(rerun_then_stop, default_timeout=30)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["runs"] == 2
    assert [m.value for m in at.markdown] == ["run 2"]
