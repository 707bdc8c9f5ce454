"""The Tour's slide boxes in a real browser: the main chart's and its sentences' boxes, each inside a projector's
1280 × 720 window (tests/test_browser_legibility.py measures them on every slide of its presenter walk, → and ←)."""

from __future__ import annotations

import contextlib

from explorer.teach.tour import TITLES
from tests.browser_support import wait_for_charts

VIEWPORT = {"width": 1280, "height": 720}  # a projector
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

# The slide drawn whole: its main chart drawn and its sentences' column on screen.
SLIDE_DRAWN_JS = f"""() => {{
  const chart = ({MAIN_CHART_BOX_JS})();
  return chart !== null && chart.drawn && ({SENTENCES_BOX_JS})() !== null;
}}"""


def slide_box(page, expected: int) -> dict[str, object]:  # noqa: ANN001 - playwright's Page
    """The slide on screen (its title checked) and its main chart's and sentences' boxes once the chart is drawn."""
    title = page.locator("[data-testid='stMain'] h1").first
    assert title.inner_text().strip() == TITLES[expected], f"expected slide {expected + 1}: {title.inner_text()!r}"
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    wait_for_charts(page, CHART_DRAW_TIMEOUT_S)
    # A slide's columns come in one rerun, but the browser may show it part-drawn for a moment (CI once saw the
    # chart drawn and its sentences' column not yet there): wait, by polling, for both, and only then measure.
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(
            SLIDE_DRAWN_JS,
            timeout=CHART_DRAW_TIMEOUT_S * 1000,
            polling=200,
        )
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


def inside(box: dict[str, int]) -> bool:
    """Whether a box lies wholly inside the projector's window."""
    return (
        box["left"] >= 0
        and box["top"] >= 0
        and box["right"] <= VIEWPORT["width"]
        and box["bottom"] <= VIEWPORT["height"]
    )


def outside_the_window(slides: list[dict[str, object]]) -> list[dict[str, object]]:
    """The slides whose main chart or sentences reach outside the projector's window."""
    return [slide for slide in slides if not (inside(slide["chart"]) and inside(slide["sentences"]))]
