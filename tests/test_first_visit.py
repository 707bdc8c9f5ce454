"""A first visit: every page without a run offers the prompt and Run where the visitor is looking (not "press Run in
the sidebar"); that Run runs the prompt typed there with the sidebar's other settings, and the sidebar then shows it;
a Run from the sidebar streams its tokens under the page's title, not above it."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.ui import state as ui_state
from explorer.ui.sidebar import MODEL_KEY, NEW_TOKENS_KEY, PROMPT_KEY, RUN_KEY
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.rendered_text import walk

# Each page's "no run yet" state and the key of its own Run (`explorer.ui.page_start.run_here`).
NO_RUN_PAGES = {
    "pages/run.py": "run-here-page-run",
    "pages/attention.py": "run-here-page-run",
    "pages/kv_cache.py": "run-here-page-run",
    "pages/cost.py": "run-here-page-run",
    "pages/latency.py": "run-here-page-run",
    "pages/compare.py": "run-here-page-run",
    "pages/tour.py": "run-here-page-run",
    "pages/by_hand.py": "run-here-by-hand-run",
    "pages/check_yourself.py": "run-here-quiz-run",
    "pages/at_scale.py": "run-here-at-scale-run",
}
LIVE_BOX = "Live: each token appears as its pass finishes"


def test_every_page_without_a_run_offers_the_prompt_and_run_in_place() -> None:
    at = new_app()
    for page, run_key in NO_RUN_PAGES.items():
        at.switch_page(page).run()
        assert not at.exception and not at.error, (page, at.exception)
        assert at.main.button(key=run_key).label == "Run", page
        prompt = at.main.text_area(key=run_key.removesuffix("-run") + "-prompt")
        assert prompt.value == ui_state.DEFAULT_PROMPT, page  # the sidebar's prompt, ready to run
        said = " ".join(i.value for i in at.main.info)
        assert "No run" in said and "in the sidebar" not in said.replace("open a recording in the sidebar", ""), said


def test_run_in_place_runs_the_prompt_typed_there_and_the_sidebar_then_shows_it(tiny_llama_dir: Path) -> None:
    at = new_app()
    at.sidebar.text_input(key=MODEL_KEY).input(str(tiny_llama_dir))  # the sidebar's settings, as a visitor set them:
    at.sidebar.number_input(key=NEW_TOKENS_KEY).set_value(3)
    at.button(key=RUN_KEY).click().run()  # a form holds them once submitted (a run on the tiny model) ...
    del at.session_state[ui_state.RUN]  # ... and the page is back to its "no run yet" state
    at.run()
    at.main.text_area(key="run-here-page-prompt").input("A prompt typed on the page")
    at.main.button(key="run-here-page-run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    trace = at.session_state[ui_state.RUN].trace
    assert trace.prompt_text == "A prompt typed on the page" and trace.new_tokens == 3
    assert at.sidebar.text_area(key=PROMPT_KEY).value == "A prompt typed on the page"
    assert [t.value for t in at.title] == ["Inside one inference"] and at.metric  # the page, drawn with its run


@pytest.mark.parametrize("page", ["pages/cost.py", "pages/at_scale.py"])
def test_a_sidebar_run_streams_its_tokens_in_its_own_script_run_then_the_page_draws_it(
    tiny_llama_dir: Path, page: str
) -> None:
    """Issue 43 §2: a Run is executed where it is asked, in the click's own script run (at the top of the page, its
    tokens streaming there), never inside a page's title; the page below it is drawn with the new run."""
    at = new_app().switch_page(page).run()
    at.sidebar.text_input(key=MODEL_KEY).input(str(tiny_llama_dir))
    at.sidebar.number_input(key=NEW_TOKENS_KEY).set_value(2)
    at.button(key=RUN_KEY).click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    drawn = [(e.type, str(getattr(e, "value", ""))) for e in walk(at.main) if e.type in ("title", "caption")]
    kinds = [kind for kind, value in drawn if kind == "title" or LIVE_BOX in value]
    assert kinds[:2] == ["caption", "title"], drawn[:4]  # the live tokens first, then the page with the run
    assert at.session_state[ui_state.RUN].trace.new_tokens <= 2


def test_the_sidebar_form_keeps_what_was_submitted(tiny_llama_dir: Path) -> None:
    at: AppTest = new_app()
    at.sidebar.text_area(key=PROMPT_KEY).input("Sidebar prompt")
    at.sidebar.text_input(key=MODEL_KEY).input(str(tiny_llama_dir))
    at.sidebar.number_input(key=NEW_TOKENS_KEY).set_value(2)
    at.button(key=RUN_KEY).click().run()
    assert at.session_state[ui_state.RUN].trace.prompt_text == "Sidebar prompt"
    at.switch_page("pages/latency.py").run()  # a page change keeps the box as submitted
    assert at.sidebar.text_area(key=PROMPT_KEY).value == "Sidebar prompt"
