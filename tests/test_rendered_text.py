"""Nothing raw on screen: every page, after a live run and with a bundled recording, read as a visitor reads it (text,
tables, chart titles, axis and legend titles, labels drawn from data, tooltips) holds no snake_case name, no `None`,
no true/false and no unit-less number of five or more digits. How it reads a page: `tests/rendered_text.py`."""

from __future__ import annotations

import re
import time

import pytest
from streamlit.testing.v1 import AppTest

from explorer.recording.pdx import bundled
from explorer.ui import recordings as ui_recordings
from explorer.ui import state as ui_state
from explorer.ui.presenter import PRESENTER_PARAM
from tests.apptest_support import ROOT, navigation_like_a_server  # noqa: F401 - an autouse fixture
from tests.rendered_text import Finding, findings, page_pieces

PAGES = re.findall(r'st\.Page\("(pages/[a-z_]+\.py)"', (ROOT / "app.py").read_text())
RECORDING, COMPARED = "short-chat", "bfloat16"  # bundled: `?recording=A&compare=B` opens both (Compare has a pair)
# What is meant as it is, each with why (a regular expression: what it matches is left out before the rules).
ALLOWED = {
    r"<\|[a-z_]+\|>": "the model's own special tokens (<|im_start|>), shown verbatim as its tokenizer writes them, "
    "like the prompt's text",
    r"\[\d+(?:, \d+)+\]": "a tensor's shape, written as torch prints it ([1, 49152]: the vocabulary is one dimension)",
}


def walk_every_page(at: AppTest, after_step: bool = False) -> tuple[list[Finding], dict[str, int]]:
    """Every page of the app, in the navigation's order: what breaks a rule, and how many pieces each page had. With
    `after_step`, the Step page is read after Prefill and one Next token (its request's view)."""
    found: list[Finding] = []
    pieces_per_page: dict[str, int] = {}
    for page in PAGES:
        started = time.perf_counter()
        at.switch_page(page).run()
        if after_step and page == "pages/step.py":
            next(b for b in at.main.button if b.label == "Prefill").click().run()  # the form's button has no key
            at.button(key="step-next").click().run()
            assert at.session_state[ui_state.STEPPED].passes, "the Step page drew no pass"
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
        pieces = page_pieces(at)
        pieces_per_page[page] = len(pieces)
        found += findings(page, pieces, ALLOWED)
        print(f"{page}: {len(pieces)} pieces of text, {time.perf_counter() - started:.1f} s")
    return found, pieces_per_page


def assert_nothing_raw(found: list[Finding], pieces_per_page: dict[str, int]) -> None:
    assert all(count > 5 for count in pieces_per_page.values()), pieces_per_page  # every page was read
    assert not found, "raw text on screen:\n" + "\n".join(map(str, found))


def test_the_rules_find_what_the_issue_found() -> None:
    """The walk's rules catch each kind of raw text the issue listed, and leave alone what is meant."""
    from tests.rendered_text import Piece

    raw = [
        Piece("caption", "wall_over_roofline is how many times slower; flops, bytes and t_* modelled"),
        Piece("dataframe column 'layers'", "None (an empty cell)"),
        Piece("dataframe column 'passes'", "true/false cells (a boolean column)"),
        Piece("chart 3 text", "max_batch = 188"),
        Piece("dataframe column 'projected (ms)'", "6696000 (a number not grouped in thousands)"),
    ]
    rules = sorted({f.rule for f in findings("p", raw)})
    assert rules == ["None", "boolean", "raw name", "unit-less large number"], rules
    assert {f.found for f in findings("p", raw[:1])} == {"wall_over_roofline", "t_"}
    meant = [
        Piece("markdown", "a _measured_ figure, 6,696,000 ms, on 2026-11-24 at 00:22, 0.000123456 s"),
        Piece("chart 1 x label", "0:<|im_start|>"),
        Piece("dataframe column 'shape'", "[1, 49152]"),
    ]
    assert findings("p", meant, ALLOWED) == []


@pytest.mark.slow  # the real model: one run, one prefill and one step, then 15 pages
def test_every_page_after_a_live_run_shows_no_raw_text() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.run()
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(8)
    at.button(key="sidebar-run").click().run()  # the sidebar form's Run: its other values as they are
    assert at.session_state[ui_state.RUN].trace.new_tokens > 1
    found, pieces = walk_every_page(at, after_step=True)
    assert_nothing_raw(found, pieces)


@pytest.mark.slow  # 15 pages drawn from a recording, in presenter mode (the static tables' path)
@pytest.mark.skipif(not {RECORDING, COMPARED} <= set(bundled()), reason="the recordings are not bundled")
def test_every_page_with_a_bundled_recording_in_presenter_mode_shows_no_raw_text() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params[ui_recordings.QUERY] = RECORDING
    at.query_params[ui_recordings.COMPARE_QUERY] = COMPARED
    at.query_params[PRESENTER_PARAM] = "1"
    at.run()
    assert at.session_state[ui_state.RUN].recorded is not None
    found, pieces = walk_every_page(at)
    assert_nothing_raw(found, pieces)
