"""The Tour in a real browser, as a presenter gives it: a 1280 × 720 window, presenter mode on, the sidebar open, the
bundled short chat recording opened by its link (or, where none is bundled, one short live run); the slides gone
through with the → key and back with ← only, and on every slide the main chart's box and its sentences' box measured:
both must lie inside the window. The boxes are printed and kept in `tour-boxes.json` beside a screenshot of each
slide (in `$EXPLORER_SCREENSHOTS` if set, else pytest's temporary folder).

Needs Debian's chromium and the `playwright` package; uses the session's app server and browser (tests/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from explorer.recording.pdx import bundled
from explorer.teach.tour import SLIDE_COUNT, TITLES
from explorer.ui.recordings import QUERY
from tests.browser_support import (
    HostedApp,
    full_screenshot,
    log_tail,
    mark_run_state,
    screenshot_folder,
    skip_module_without_browser,
    wait_for_charts,
    wait_until_rerun_done,
)

skip_module_without_browser("the Tour")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 720}  # a projector
MAX_NEW_TOKENS = "6"  # a short run (where no recording is bundled): enough decode passes for every slide
RECORDING = "short-chat"  # opened by its link when the repository ships it
RUN_TIMEOUT_S = 180  # a cold server loads the model and measures the device first
PAGE_TIMEOUT_S = 60
CHART_DRAW_TIMEOUT_S = 20
# The main chart of a slide: the first chart in the page's main area, and whether vega-embed has drawn it.
MAIN_CHART_BOX_JS = """() => {
  const chart = document.querySelector("[data-testid='stMain'] [data-testid='stVegaLiteChart']");
  if (!chart) return null;
  const r = chart.getBoundingClientRect();
  const drawn = chart.querySelector("canvas, svg.marks");
  const d = drawn ? drawn.getBoundingClientRect() : {width: 0, height: 0};
  return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, drawn: d.width > 0 && d.height > 0};
}"""

# The slide's sentences (its key figures): beside the chart in presenter mode, in the column without the chart.
SENTENCES_BOX_JS = """() => {
  const columns = [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stColumn']")];
  const text = columns.find(c => !c.querySelector("[data-testid='stVegaLiteChart']")
    && c.querySelector("[data-testid='stMarkdownContainer'] p"));
  if (!text) return null;
  const boxes = [...text.querySelectorAll("[data-testid='stMarkdownContainer'] p")].map(p => p.getBoundingClientRect());
  return {left: Math.min(...boxes.map(b => b.left)), top: Math.min(...boxes.map(b => b.top)),
          right: Math.max(...boxes.map(b => b.right)), bottom: Math.max(...boxes.map(b => b.bottom))};
}"""


@pytest.fixture(scope="module")
def page(hosted_app: HostedApp, chromium) -> Iterator[object]:  # noqa: ANN001 - playwright's Browser
    """One tab (its own Streamlit session) at 1280 × 720 on the session's app server."""
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        tab = context.new_page()
        tab.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        tab.goto(hosted_app.url)
        yield tab
    finally:
        context.close()


def _short_run(page, server_log: Path) -> None:  # noqa: ANN001
    """The sidebar's default prompt with few new tokens, run, as a presenter prepares before the talk."""
    sidebar = page.locator("[data-testid='stSidebar']")
    prompt = sidebar.get_by_label("Prompt", exact=True)
    prompt.wait_for()
    mark = mark_run_state(page)
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S, start_timeout_s=0.1)
    max_tokens = sidebar.get_by_label("Max new tokens", exact=True)
    max_tokens.fill(MAX_NEW_TOKENS)
    max_tokens.blur()
    mark = mark_run_state(page)
    sidebar.get_by_role("button", name="Run", exact=True).click()
    try:
        wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
        page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=RUN_TIMEOUT_S * 1000)
    except Exception:
        raise AssertionError(f"the run did not finish; server log:\n{log_tail(server_log)}") from None


def _open_recording_or_run(page, url: str, server_log: Path) -> str:  # noqa: ANN001
    """The run a talk shows: the bundled short chat recording by its link where the repository ships it (no model,
    no waiting), else a short live run; says which."""
    if RECORDING in bundled():
        mark = mark_run_state(page)
        page.goto(f"{url}/?{QUERY}={RECORDING}")
        wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S, start_timeout_s=2)
        page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=PAGE_TIMEOUT_S * 1000)
        return f"recording {RECORDING}"
    _short_run(page, server_log)
    return f"a live run of {MAX_NEW_TOKENS} new tokens"


def _click_and_wait(page, locator) -> None:  # noqa: ANN001
    mark = mark_run_state(page)
    locator.click()
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S)


def _press_and_wait(page, key: str) -> None:  # noqa: ANN001
    mark = mark_run_state(page)
    page.keyboard.press(key)
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S)


def _slide_box(page, expected: int) -> dict[str, object]:  # noqa: ANN001
    """The slide on screen (its title checked) and its main chart's box once drawn."""
    title = page.locator("[data-testid='stMain'] h1").first
    assert title.inner_text().strip() == TITLES[expected], f"expected slide {expected + 1}: {title.inner_text()!r}"
    wait_for_charts(page, CHART_DRAW_TIMEOUT_S)
    box = page.evaluate(MAIN_CHART_BOX_JS)
    assert box is not None and box["drawn"], f"slide {expected + 1}: no chart drawn ({box})"
    sentences = page.evaluate(SENTENCES_BOX_JS)
    assert sentences is not None, f"slide {expected + 1}: its sentences are not beside the chart"
    return {
        "slide": expected + 1,
        "title": TITLES[expected],
        "chart": {k: round(v) for k, v in box.items() if k != "drawn"},
        "sentences": {k: round(v) for k, v in sentences.items()},
    }


def _inside(box: dict[str, int]) -> bool:
    return (
        box["left"] >= 0
        and box["top"] >= 0
        and box["right"] <= VIEWPORT["width"]
        and box["bottom"] <= VIEWPORT["height"]
    )


def test_browser_tour_keys_only_every_main_chart_inside_1280x720(
    page,  # noqa: ANN001
    hosted_app: HostedApp,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    shots = screenshot_folder(tmp_path_factory, "tour-screenshots")
    shown = _open_recording_or_run(page, hosted_app.url, hosted_app.log)
    print(f"[browser tour] the Tour shows {shown}")
    _click_and_wait(page, page.locator("[data-testid='stSidebar']").get_by_text("Presenter mode"))
    _click_and_wait(page, page.locator("[data-testid='stSidebarNavLink']").filter(has_text="Tour"))
    forward: list[dict[str, object]] = []
    for index in range(SLIDE_COUNT):  # → through every slide
        forward.append(_slide_box(page, index))
        page.screenshot(path=str(shots / f"tour-{index + 1:02d}.png"))
        if index < SLIDE_COUNT - 1:
            _press_and_wait(page, "ArrowRight")
    back: list[dict[str, object]] = []
    for index in range(SLIDE_COUNT - 2, -1, -1):  # ← back to the first
        _press_and_wait(page, "ArrowLeft")
        back.append(_slide_box(page, index))
    (shots / "tour-boxes.json").write_text(json.dumps({"viewport": VIEWPORT, "forward": forward, "back": back}))
    for box in forward:
        print(
            f"[browser tour] slide {box['slide']} {box['title']!r}: chart {box['chart']}, sentences {box['sentences']}"
        )
    outside = [slide for slide in forward + back if not (_inside(slide["chart"]) and _inside(slide["sentences"]))]
    if outside:
        full_screenshot(page, shots / "tour-outside.png", **VIEWPORT)
    assert not outside, f"charts or sentences outside the {VIEWPORT} window: {outside} (screenshots: {shots})"
    assert page.url.endswith("slide=1") or "slide=1&" in page.url, page.url  # the link follows the slide
