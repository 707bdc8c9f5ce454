"""Every Altair chart the pages draw fits its column, in a real browser, at a projector's 1280 × 720 in presenter mode
and on a 390 × 844 touch phone (issue 42: "wide charts fit their column at 390, 1280 and 1440 px; legends wrap
instead of clipping"). A laptop's 1440 × 900 is not walked in the suite: its column is wider than the projector's,
and each width's walk costs about 17 s of the fresh-clone run's 10 minutes; set
EXPLORER_CHART_FIT_1440=1 to walk it too.

How it walks: one browser, one context per width. Each page of the navigation (read from app.py) opens by its own
link with the bundled recording (`?recording=short-chat&compare=bfloat16`, two recordings so Compare has a pair), so
every page has its run with no model pass; the Tour is walked through all its slides with → (keys work on a touch
device's browser too). Pages that draw a chart only after a button (a live pass) have none to measure here.

How it measures, for each drawn `[data-testid='stVegaLiteChart']` in the main area: the column it sits in (the
nearest `stColumn`, else the page's block container; its content box, and never past the viewport's right edge)
must hold the chart element, its drawing (the SVG or canvas) and, for an SVG (Streamlit's choice here, and always in
presenter mode), every group Vega drew (axes, legends, titles, marks), each within 2 px. A chart Vega cannot stretch
(a facet or concatenation of fixed-width panels) may instead scroll inside its own box, which the column must hold
("or scroll inside it", as the issue allows). Either way a mark or legend entry the drawing clips at its own edge
counts: every group must lie inside the drawing's box.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from explorer.recording.pdx import bundled
from explorer.teach.tour import SLIDE_COUNT
from tests.browser_support import (
    HostedApp,
    mark_run_state,
    screenshot_folder,
    skip_module_without_browser,
    wait_for_charts,
    wait_until_rerun_done,
)

skip_module_without_browser("charts fitting their columns")
# Alone: the walk draws every chart of every page in Chromium, which beside another worker's browser test ran four
# times slower (82 s against 17-21 s for the phone's walk, 2026-11-29), longer than it takes on its own at the end.
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow, pytest.mark.alone]

RECORDING, COMPARED = "short-chat", "bfloat16"
PAGE_TIMEOUT_S = 90  # a busy shared machine: a fresh session loads the recordings before it draws
CHART_DRAW_TIMEOUT_S = 20
FIRST_RUN_TIMEOUT_S = 30  # a new session's first script run starts within this, even on a busy machine
SLACK_PX = 2  # a glyph's box runs a pixel or two past Vega's own estimate of it
APP = (Path(__file__).parents[1] / "app.py").read_text()
# Each page's link: Streamlit names it after the file (the default page is the root).
PAGE_FILES = re.findall(r'st\.Page\("pages/([a-z_]+)\.py"', APP)
DEFAULT_PAGE = re.search(r'st\.Page\("pages/([a-z_]+)\.py"[^)]*default=True', APP).group(1)
WIDTHS = {
    "presenter-1280": ({"width": 1280, "height": 720}, False, "&presenter=1"),
    "phone-390": ({"width": 390, "height": 844}, True, ""),
}
if os.environ.get("EXPLORER_CHART_FIT_1440"):
    WIDTHS["laptop-1440"] = ({"width": 1440, "height": 900}, False, "")

# A fresh page shows grey placeholders until its elements arrive; being idle between the two is not being drawn.
NO_PLACEHOLDERS_JS = "() => !document.querySelector(\"[data-testid='stMain'] [data-testid='stSkeleton']\")"

# For every drawn chart in the main area: what pokes out of its column, or out of its own drawing.
FIT_JS = """(slack) => {
  const box = el => { const r = el.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height}; };
  const contentBox = el => { const b = box(el), s = getComputedStyle(el);
    return {left: b.left + parseFloat(s.paddingLeft) + parseFloat(s.borderLeftWidth),
            right: b.right - parseFloat(s.paddingRight) - parseFloat(s.borderRightWidth)}; };
  const round = b => `[${Math.round(b.left)}, ${Math.round(b.right)}]`;
  const charts = [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stVegaLiteChart']")];
  return charts.map((chart, index) => {
    const own = box(chart);
    if (own.width === 0 || own.height === 0) return {index, hidden: true, problems: []};  // a collapsed expander's
    const holder = chart.closest("[data-testid='stColumn']")
      || chart.closest("[data-testid='stMainBlockContainer']");
    const column = contentBox(holder);
    column.right = Math.min(column.right, window.innerWidth);
    column.left = Math.max(column.left, 0);
    const drawing = chart.querySelector("svg.marks") || chart.querySelector("canvas");
    const problems = [];
    const outside = (what, b) => {
      if (b.width === 0 && b.height === 0) return;
      if (b.left < column.left - slack || b.right > column.right + slack)
        problems.push(`${what} ${round(b)} outside its column ${round(column)}`);
    };
    outside("the chart element", own);
    if (!drawing) return {index, renderer: "none", problems: ["nothing drawn"]};
    const frame = box(drawing);
    // A chart Vega cannot stretch (a facet, a concatenation) scrolls inside its own box, which the column holds.
    const style = getComputedStyle(chart);
    const scrolls = ["auto", "scroll"].includes(style.overflowX) && chart.scrollWidth > chart.clientWidth + 1;
    if (!scrolls) outside(`its ${drawing.tagName.toLowerCase()}`, frame);
    let groups = 0;
    if (drawing.tagName === "svg") {
      for (const g of drawing.querySelectorAll("g[class*='role-']")) {
        const b = box(g);
        if (b.width === 0 && b.height === 0) continue;
        groups++;
        const role = (g.getAttribute("class").match(/role-([a-z-]+)/) || ["", "?"])[1];
        const text = (g.textContent || "").trim().slice(0, 40);
        if (!scrolls) outside(`${role} "${text}"`, b);
        if (b.left < frame.left - slack || b.right > frame.right + slack
            || b.top < frame.top - slack || b.bottom > frame.bottom + slack)
          problems.push(`${role} "${text}" cut at the drawing's edge`);
      }
    }
    return {index, renderer: drawing.tagName.toLowerCase(), width: Math.round(frame.width), scrolls,
            column: Math.round(column.right - column.left), groups, problems: [...new Set(problems)].slice(0, 6)};
  });
}"""


def _settled(page, mark: int, start_timeout_s: float = 3) -> None:  # noqa: ANN001 - playwright's Page
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S, start_timeout_s=start_timeout_s)
    page.wait_for_function(NO_PLACEHOLDERS_JS, timeout=PAGE_TIMEOUT_S * 1000, polling=200)
    wait_for_charts(page, CHART_DRAW_TIMEOUT_S)


def _open(page, url: str) -> None:  # noqa: ANN001
    page.goto(url)
    page.wait_for_selector("[data-testid='stApp']")
    _settled(page, mark_run_state(page), start_timeout_s=FIRST_RUN_TIMEOUT_S)  # a new session always runs


def _measure(page, where: str, rows: list[dict]) -> None:  # noqa: ANN001
    for chart in page.evaluate(FIT_JS, SLACK_PX):
        if not chart.get("hidden"):
            rows.append({"where": where, **chart})


@pytest.mark.skipif(RECORDING not in bundled() or COMPARED not in bundled(), reason="recordings not bundled")
@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_chart_fits_its_column(
    width: str, hosted_app: HostedApp, chromium, tmp_path_factory: pytest.TempPathFactory
) -> None:  # noqa: ANN001 - playwright's Browser
    viewport, touch, extra = WIDTHS[width]
    shots = screenshot_folder(tmp_path_factory, f"chart-fit-{width}")
    context = chromium.new_context(viewport=viewport, has_touch=touch, is_mobile=touch)
    rows: list[dict] = []
    try:
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        for name in PAGE_FILES:
            path = "" if name == DEFAULT_PAGE else name
            _open(page, f"{hosted_app.url}/{path}?recording={RECORDING}&compare={COMPARED}{extra}")
            _measure(page, name, rows)
            page.screenshot(path=str(shots / f"fit-{width}-{name}.png"))
            if name == "tour":
                for index in range(1, SLIDE_COUNT):
                    mark = mark_run_state(page)
                    page.keyboard.press("ArrowRight")
                    _settled(page, mark)
                    _measure(page, f"tour slide {index + 1}", rows)
    finally:
        context.close()
    print(f"\n[chart fit] {width}: {len(rows)} charts on {len(PAGE_FILES)} pages and {SLIDE_COUNT} slides; {shots}")
    for r in rows:
        print(
            f"  {r['where']:<18} #{r['index']} {r.get('renderer')} {r.get('width')}/{r.get('column')} px"
            + (" (scrolls inside its box)" if r.get("scrolls") else "")
            + f", "
            f"{r.get('groups', 0)} groups: " + ("ok" if not r["problems"] else "; ".join(r["problems"]))
        )
    bad = [r for r in rows if r["problems"]]
    assert len(rows) >= 20, f"too few charts measured: {len(rows)}"
    assert not bad, f"charts outside their column at {width}:\n" + "\n".join(
        f"{r['where']} #{r['index']}: {r['problems']}" for r in bad
    )
