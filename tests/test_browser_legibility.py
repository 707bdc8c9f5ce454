"""At 1280 × 720 in a real browser: first, a first-time visitor's landing page holds the prompt and Run in its first
screen; then presenter mode in one walk: every chart legible, the type large (a key figure larger than its label),
each "One request" page's main chart and the Step page's map and KV growth inside the first screen, every Tour slide's
main chart and sentences inside the window, → through the slides and ← back (keys only; the link follows the slide),
the titles clear of Streamlit's header with the sidebar collapsed; then the Tour's arrow keys right after the
presenter switch.

How it measures: the tab opens `/?recording=short-chat&compare=bfloat16&presenter=1` (presenter mode and two
recordings from one link, so Compare has a pair; the sidebar opens folded, and the walk opens it), then every page of
the sidebar, every Tour slide (→ through them, then ← back to the first), and the Step page again after pressing
Prefill (a live pass of the real model). On each:
  - Legibility. Presenter mode draws charts as SVG (`explorer.charts.theme`), so every piece of text Vega drew is a
    `<text>` element in the chart's `svg.marks`, inside a group whose class names its role (`role-axis-title`,
    `role-axis-label`, `role-legend-label`, `role-legend-title`, `role-title-text`, `role-mark` for value labels,
    headers). For each visible chart the script takes the SVG's box and every drawn text's box
    (`getBoundingClientRect`, texts Vega hid for overlap skipped) and fails a chart where:
      - a text's box pokes outside the chart's box by more than 1 px (cut off: the y-axis title above the plot);
      - a title, axis title, legend entry or header ends in "…" (Vega truncated it to its limit; a token's label on
        an axis or in a token strip may be cut to its cell, its tooltip names it whole);
      - two labels of one axis run into each other by more than 3 px both ways (the 39 token labels of a map);
      - an axis title, legend entry or chart title overlaps a bar of the data (a label drawn over data);
      - a vertical axis is under 100 px long (a plot squeezed flat by what surrounds it).
  - Type size: the computed font size of chart labels, paragraphs, metric values, code, plain text and static
    tables, each against a floor (`PRESENTER_MIN_PX`).
  - First screen: with every scrolling element at the top and the sidebar open, the box of each "One request"
    page's main chart (its `main-chart` container, `ui.chart_first.ChartFirst`) and, after Prefill, of both charts in
    the Step page's first-screen container must lie inside the 1280 × 720 viewport.
The findings are printed per page and slide, and kept in `legibility.json` (in `$EXPLORER_SCREENSHOTS` if set, else
pytest's temporary folder) with a screenshot of each first screen.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from explorer.recording.pdx import bundled
from explorer.teach.tour import SLIDE_COUNT, TITLES
from explorer.ui.step_mode_view import TIMES_KEY, WHOLE_REQUEST
from tests.browser_support import (
    HostedApp,
    mark_run_state,
    screenshot_folder,
    skip_module_without_browser,
    wait_for_charts,
    wait_until_rerun_done,
)
from tests.tour_support import outside_the_window, slide_box

skip_module_without_browser("presenter legibility")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 720}
RECORDING, COMPARED = "short-chat", "bfloat16"  # bundled in recordings/: `?recording=A&compare=B` opens the pair
PAGE_TIMEOUT_S = 60
PREFILL_TIMEOUT_S = 180  # a cold server loads the model (a first-ever GGUF conversion ~20 s more) before the pass
ONE_REQUEST_PAGES = ("Inside one inference", "Attention", "KV cache", "Cost (roofline)", "Latency", "Compare two runs")
MAIN_CHART = ".st-key-main-chart [data-testid='stVegaLiteChart']"  # the chart such a page draws first
STEP_CHARTS = ".st-key-step-first-screen [data-testid='stVegaLiteChart']"  # explorer.ui.step_mode_view.FIRST_SCREEN_KEY
CHART_DRAW_TIMEOUT_S = 20
APP = (Path(__file__).parents[1] / "app.py").read_text()
PAGES = re.findall(r'st\.Page\("pages/[a-z_]+\.py", title="([^"]+)"', APP)

# Every visible chart's drawn text against its own box; see the module docstring for each rule.
MEASURE_JS = """() => {
  const box = el => { const r = el.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height}; };
  const overlap = (a, b) => Math.max(0, Math.min(a.right, b.right) - Math.max(a.left, b.left))
    * Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
  // How far two boxes run into each other, the lesser of the two directions: glyph boxes include line spacing, so
  // neighbouring labels a clean pixel apart can share a sliver; a real overlap runs into both directions.
  const crossing = (a, b) => Math.min(Math.min(a.right, b.right) - Math.max(a.left, b.left),
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
  const role = el => { const g = el.closest("g[class*='role-']");
    const m = g ? g.getAttribute("class").match(/role-([a-z-]+)/) : null; return m ? m[1] : "?"; };
  const hidden = el => { for (let e = el; e && e.tagName !== "svg"; e = e.parentElement) {
      const style = getComputedStyle(e);
      if (Number(style.opacity) === 0 || Number(style.fillOpacity) === 0 || style.visibility === "hidden"
          || style.display === "none") return true; }
    return false; };
  const WHOLE = ["axis-title", "legend-label", "legend-title", "title-text", "column-header", "row-header",
    "facet-header", "column-title", "row-title"];
  const charts = [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stVegaLiteChart']")];
  return charts.map((chart, index) => {
    const svg = chart.querySelector("svg.marks");
    const canvas = chart.querySelector("canvas");
    if (!svg) return {index, renderer: canvas ? "canvas" : "none", problems: canvas ? ["drawn on a canvas"] : []};
    const frame = box(svg);
    if (frame.width === 0 || frame.height === 0) return {index, renderer: "svg", hidden: true, problems: []};
    const texts = [...svg.querySelectorAll("text")].filter(t => !hidden(t) && t.textContent.trim())
      .map(t => ({text: t.textContent, role: role(t), box: box(t), group: t.closest("g[class*='role-axis']")}));
    const problems = [];
    for (const t of texts) {
      const b = t.box;
      if (b.left < frame.left - 1 || b.top < frame.top - 1 || b.right > frame.right + 1 || b.bottom > frame.bottom + 1)
        problems.push(`${t.role} "${t.text}" outside the chart`);
      if (t.text.endsWith("…") && WHOLE.includes(t.role)) problems.push(`${t.role} "${t.text}" truncated`);
    }
    const axisLabels = texts.filter(t => t.role === "axis-label");
    let overlaps = 0, example = "";
    for (let i = 0; i < axisLabels.length; i++) for (let j = i + 1; j < axisLabels.length; j++) {
      const a = axisLabels[i], b = axisLabels[j];
      if (a.group !== b.group || crossing(a.box, b.box) <= 3) continue;
      overlaps++; example = example || `"${a.text}"/"${b.text}"`;
    }
    if (overlaps) problems.push(`${overlaps} overlapping axis labels, e.g. ${example}`);
    const bars = [...svg.querySelectorAll("g.mark-rect.role-mark path, g.mark-rect.role-mark rect")].map(box)
      .filter(b => b.width > 0 && b.height > 0);
    for (const t of texts.filter(t => ["axis-title", "legend-label", "legend-title", "title-text"].includes(t.role))) {
      const hit = bars.find(b => overlap(t.box, b) > 4);
      if (hit) problems.push(`${t.role} "${t.text}" over the data`);
    }
    for (const d of svg.querySelectorAll("g.role-axis-domain path, g.role-axis-domain line")) {
      const b = box(d);
      if (b.height > b.width && b.height < 100) problems.push(`a vertical axis only ${Math.round(b.height)} px long`);
    }
    return {index, renderer: "svg", width: Math.round(frame.width), height: Math.round(frame.height),
            texts: texts.length, problems};
  });
}"""


# Computed font sizes in the main area: chart labels and titles, the charts' other text, paragraphs, metric values,
# code, plain text and static tables.
SIZES_JS = """() => {
  const px = el => parseFloat(getComputedStyle(el).fontSize);
  // The element that draws an element's text: a metric's value and label are each a paragraph inside it, whose own
  // size is what a reader sees (the value's box measured 44.8 px while its paragraph drew 22.4 px).
  const deepest = el => { let e = el; while (e.firstElementChild) e = e.firstElementChild; return e; };
  const main = document.querySelector("[data-testid='stMain']");
  const all = selector => [...main.querySelectorAll(selector)];
  const chartText = all("[data-testid='stVegaLiteChart'] svg text");
  const isLabel = t => /role-(axis|legend|title|header)/.test(t.parentNode.getAttribute("class") || "");
  return {
    chart_labels: chartText.filter(isLabel).map(px),
    chart_marks: chartText.filter(t => !isLabel(t)).map(px),
    paragraphs: all("[data-testid='stMarkdownContainer'] p").map(px),
    metric_values: all("[data-testid='stMetricValue']").map(deepest).map(px),
    metric_pairs: all("[data-testid='stMetric']").map(m => [m.querySelector("[data-testid='stMetricLabel']"),
      m.querySelector("[data-testid='stMetricValue']")]).filter(([l, v]) => l && v)
      .map(([l, v]) => ({label: l.innerText.trim(), label_px: px(deepest(l)), value_px: px(deepest(v))})),
    code: all("[data-testid='stCode'] code").map(px),
    text: all("[data-testid='stText']").map(px),
    tables: all("[data-testid='stTable'] td").map(px),
  };
}"""
PRESENTER_MIN_PX = {  # at least: the 18 px for chart labels; the rest above Streamlit's own sizes
    "chart_labels": 18,
    "paragraphs": 18,  # 16 px on a laptop
    "metric_values": 40,  # 36 px on a laptop
    "chart_marks": 18,  # text drawn inside a chart: a token grid's tokens, values on bars
    "code": 18,  # 14 px
    "text": 18,  # 14 px
    "tables": 18,  # 14 px
}
# The boxes of the charts a selector finds, and the sidebar's, with every scrolling element (Streamlit scrolls inside
# stMain) at the top.
BOXES_JS = """(selector) => {
  for (const el of [document.scrollingElement, ...document.querySelectorAll("[data-testid='stMain'], section")])
    if (el) el.scrollTop = 0;
  window.scrollTo(0, 0);
  const box = el => { const r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  return {charts: [...document.querySelectorAll(selector)].map(box),
          sidebar: box(document.querySelector("[data-testid='stSidebar']"))};
}"""


# Whether Streamlit's header bar covers the page's title: opaque (it turns white once the sidebar is collapsed) and
# reaching below the title's top. Every scrolling element at the top first, as a page opens.
TITLE_UNDER_HEADER_JS = """() => {
  for (const el of [document.scrollingElement, ...document.querySelectorAll("[data-testid='stMain'], section")])
    if (el) el.scrollTop = 0;
  const header = document.querySelector("[data-testid='stHeader']");
  const title = document.querySelector("[data-testid='stMain'] h1");
  if (!header || !title) return {missing: !title ? "title" : "header"};
  const background = getComputedStyle(header).backgroundColor;
  const rgba = background.match(/rgba\\([^)]*,\\s*([\\d.]+)\\)/);
  const alpha = background === "transparent" ? 0 : rgba ? Number(rgba[1]) : 1;
  const bottom = header.getBoundingClientRect().bottom, top = title.getBoundingClientRect().top;
  return {title: title.innerText.trim(), header_bottom: bottom, title_top: top, background,
          covered: alpha > 0 && bottom > top};
}"""
SIDEBAR_RIGHT_JS = "document.querySelector(\"[data-testid='stSidebar']\").getBoundingClientRect().right"
SIDEBAR_BUTTON_JS = """(label) => {
  const button = document.querySelector(`button[aria-label='${label}']`);
  if (button) button.click();
  return !!button;
}"""


def _titles_with_the_sidebar_collapsed(page, checks: list[dict]) -> None:  # noqa: ANN001
    """Collapse the sidebar, as a speaker has it, and read whether the header covers the title: on a "One request"
    page, then on a Tour slide and on the slide after it, reached by its arrow key; the sidebar is opened again."""
    for label in ("Latency", "Tour"):
        _goto(page, label)
        assert page.evaluate(SIDEBAR_BUTTON_JS, "Collapse sidebar")
        page.wait_for_function(f"() => {SIDEBAR_RIGHT_JS} < 50")
        checks.append(page.evaluate(TITLE_UNDER_HEADER_JS))
        if label == "Tour":  # the walk left it on its first slide
            _rerun(page, lambda: page.keyboard.press("ArrowRight"))
            checks.append(page.evaluate(TITLE_UNDER_HEADER_JS))
        assert page.evaluate(SIDEBAR_BUTTON_JS, "Expand sidebar")
        page.wait_for_function(f"() => {SIDEBAR_RIGHT_JS} > 200")


def _first_screen(page, where: str, selector: str, wanted: int, boxes: list[dict]) -> None:  # noqa: ANN001
    """The boxes of the `wanted` charts `selector` finds, each inside the viewport, the sidebar open (as a talk has
    it); a missing chart counts as outside."""
    found = page.evaluate(BOXES_JS, selector)
    charts = found["charts"][:wanted] + [None] * (wanted - len(found["charts"]))
    for box in charts:
        inside = box is not None and (
            box["top"] >= 0
            and box["left"] >= 0
            and box["bottom"] <= VIEWPORT["height"]
            and box["right"] <= VIEWPORT["width"]
        )
        boxes.append({"where": where, "box": box, "inside": inside, "sidebar_open": found["sidebar"]["right"] > 200})


@pytest.fixture(scope="module")
def tab(hosted_app: HostedApp, chromium) -> Iterator[object]:  # noqa: ANN001 - playwright's Browser
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        yield page
    finally:
        context.close()


def _rerun(page, act) -> None:  # noqa: ANN001
    mark = mark_run_state(page)
    act()
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S, start_timeout_s=2)


def _open_link(page, url: str) -> None:  # noqa: ANN001
    page.goto(url)
    page.wait_for_selector("[data-testid='stApp']")
    mark = mark_run_state(page)
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S, start_timeout_s=2)


def _goto(page, label: str) -> None:  # noqa: ANN001
    link = page.locator("[data-testid='stSidebarNavLink']").filter(has_text=re.compile(f"^{re.escape(label)}$"))
    _rerun(page, link.first.click)


def _measure(page, where: str, rows: list[dict], sizes: dict[str, list[float]], small: list[str]) -> None:  # noqa: ANN001
    wait_for_charts(page, CHART_DRAW_TIMEOUT_S)
    for chart in page.evaluate(MEASURE_JS):
        rows.append({"where": where, **chart})
    measured = page.evaluate(SIZES_JS)
    for pair in measured.pop("metric_pairs"):  # a key figure larger than its label, on every metric
        if not pair["value_px"] > pair["label_px"]:
            small.append(
                f"{where}: metric {pair['label']!r} value {pair['value_px']} px ≤ its label's {pair['label_px']}"
            )
    for kind, values in measured.items():
        sizes.setdefault(kind, []).extend(values)
        least = PRESENTER_MIN_PX.get(kind)
        if values and least is not None and min(values) < least:
            small.append(f"{where}: {kind} down to {min(values)} px (at least {least})")


def _prefill_on_the_step_page(page) -> None:  # noqa: ANN001
    main = page.locator("[data-testid='stMain']")
    main.get_by_label("Prompt", exact=True).fill("Why is the sky blue?")
    _rerun(page, main.get_by_role("button", name="Prefill").click)
    page.locator(STEP_CHARTS).nth(1).wait_for(timeout=PREFILL_TIMEOUT_S * 1000)


needs_recording = pytest.mark.skipif(RECORDING not in bundled(), reason=f"{RECORDING} is not bundled")
FIRST_PROMPT = "Name three primary colours."
LIVE_BOX = "Live: each token appears as its pass finishes"  # explorer.ui.runner.LiveTokens's caption
# The boxes of the landing page's own prompt and Run (`explorer.ui.page_start.run_here`), every scroller at the top.
RUN_HERE_JS = """() => {
  for (const el of [document.scrollingElement, ...document.querySelectorAll("[data-testid='stMain'], section")])
    if (el) el.scrollTop = 0;
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  return {prompt: box(document.querySelector(".st-key-run-here-page-prompt textarea")),
          run: box(document.querySelector(".st-key-run-here-page-run button"))};
}"""


def _inside_the_viewport(box: dict | None) -> bool:
    return (
        box is not None
        and box["top"] >= 0
        and box["left"] >= 0
        and box["bottom"] <= VIEWPORT["height"]
        and (box["right"] <= VIEWPORT["width"])
    )


def test_the_landing_page_holds_the_prompt_and_run_in_its_first_screen(tab, hosted_app: HostedApp) -> None:  # noqa: ANN001
    """Issue 31's first-time visitor at 1280 × 720: the prompt and Run lie in the first screen of the landing page,
    with no scrolling; that Run runs the prompt typed there, its tokens streaming under the page's title."""
    page = tab
    _open_link(page, hosted_app.url)  # a new session: no run yet
    # The form's box and button arrive with one script run, but a busy server's page can be measured between them.
    page.locator(".st-key-run-here-page-prompt textarea").wait_for(timeout=PAGE_TIMEOUT_S * 1000)
    boxes = page.evaluate(RUN_HERE_JS)
    print(f"\n[first screen] landing page at 1280 × 720: {boxes}")
    assert _inside_the_viewport(boxes["prompt"]) and _inside_the_viewport(boxes["run"]), boxes
    main = page.locator("[data-testid='stMain']")
    prompt = main.get_by_label("Prompt", exact=True)
    prompt.fill(FIRST_PROMPT)
    prompt.blur()  # commits a Streamlit text area
    main.get_by_role("button", name="Run", exact=True).click()
    # The run streams its tokens right there, under the page's title: wait for the first (TTFT), not the whole run,
    # which a later page's new session stops (a closed session's run ends at its next draw).
    live = main.get_by_text(LIVE_BOX).first
    live.wait_for(timeout=PREFILL_TIMEOUT_S * 1000)
    main.get_by_text("(TTFT)").first.wait_for(timeout=PREFILL_TIMEOUT_S * 1000)
    title, streamed = main.locator("h1").first.bounding_box(), live.bounding_box()
    assert title and streamed and streamed["y"] > title["y"] + title["height"], (title, streamed)
    assert page.locator("[data-testid='stAlertContentError']").count() == 0


@needs_recording
def test_every_chart_is_legible_large_and_first_in_presenter_mode_at_1280x720(
    tab, hosted_app: HostedApp, tmp_path_factory: pytest.TempPathFactory
) -> None:  # noqa: ANN001
    page, shots = tab, screenshot_folder(tmp_path_factory, "legibility")
    rows: list[dict] = []
    sizes: dict[str, list[float]] = {}
    small: list[str] = []
    boxes: list[dict] = []
    slides: list[dict] = []  # the Tour's main chart and sentences per slide (tests/tour_support.py), → then ←
    _open_link(page, f"{hosted_app.url}/?recording={RECORDING}&compare={COMPARED}&presenter=1")
    # Issue 42: presenter mode folds the sidebar. The speaker opens it to walk the pages (the browser then keeps it
    # open), so every first screen below is measured with the sidebar open: the narrower case.
    page.wait_for_function(f"() => {SIDEBAR_RIGHT_JS} < 50", timeout=PAGE_TIMEOUT_S * 1000)
    assert page.evaluate(SIDEBAR_BUTTON_JS, "Expand sidebar")
    page.wait_for_function(f"() => {SIDEBAR_RIGHT_JS} > 200")
    for label in PAGES:
        _goto(page, label)
        _measure(page, label, rows, sizes, small)
        if label in ONE_REQUEST_PAGES:
            page.locator(MAIN_CHART).first.wait_for(timeout=PAGE_TIMEOUT_S * 1000)
            _first_screen(page, label, MAIN_CHART, 1, boxes)
        page.screenshot(path=str(shots / f"legible-{re.sub(r'[^a-z]+', '-', label.lower())}.png"))
        if label == "Step by step":
            _prefill_on_the_step_page(page)
            _measure(page, "Step by step, after Prefill", rows, sizes, small)
            _first_screen(page, "Step by step, after Prefill", STEP_CHARTS, 2, boxes)
            page.screenshot(path=str(shots / "legible-step-after-prefill.png"))
            # Presenting, the rest of the request is folded (drawn only while open): opened, its charts are measured.
            _rerun(page, page.get_by_text(WHOLE_REQUEST, exact=True).first.click)
            page.locator(f".st-key-{TIMES_KEY} svg.marks").wait_for(timeout=PAGE_TIMEOUT_S * 1000)
            _measure(page, "Step by step, the whole request opened", rows, sizes, small)
        if label == "Tour":
            slides.append(slide_box(page, 0))
            for index in range(1, SLIDE_COUNT):  # → through every slide, keys only
                _rerun(page, lambda: page.keyboard.press("ArrowRight"))
                slides.append(slide_box(page, index))  # checks the title
                _measure(page, f"Tour slide {index + 1}", rows, sizes, small)
                page.screenshot(path=str(shots / f"legible-tour-{index + 1}.png"))
            for index in range(SLIDE_COUNT - 2, -1, -1):  # ← back to the first
                _rerun(page, lambda: page.keyboard.press("ArrowLeft"))
                slides.append(slide_box(page, index))
            assert page.url.endswith("slide=1") or "slide=1&" in page.url, page.url  # the link follows the slide
    covered: list[dict] = []
    _titles_with_the_sidebar_collapsed(page, covered)
    smallest = {kind: min(values) for kind, values in sizes.items() if values}
    (shots / "legibility.json").write_text(
        json.dumps({"charts": rows, "smallest_px": smallest, "first_screen": boxes, "tour": slides}, indent=1)
    )
    measured = [r for r in rows if not r.get("hidden")]
    print(f"\n[legibility] {len(measured)} charts measured on {len(PAGES)} pages and {SLIDE_COUNT} slides; {shots}")
    for r in measured:
        print(
            f"  {r['where']:<28} chart {r['index']} {r.get('width')}×{r.get('height')} {r.get('texts')} texts "
            + ("ok" if not r["problems"] else "; ".join(r["problems"]))
        )
    print(f"[legibility] smallest type (px): {smallest}")
    for b in boxes:
        print(f"  first screen {b['where']:<28} {b['box']} inside: {b['inside']}")
    bad = [r for r in measured if r["problems"]]
    assert len(measured) >= 20, f"too few charts measured: {len(measured)}"
    assert not bad, "illegible charts:\n" + "\n".join(f"{r['where']} #{r['index']}: {r['problems']}" for r in bad)
    assert not small, small
    assert len(sizes.get("chart_labels", [])) > 100 and all(
        sizes.get(k) for k in ("metric_values", "code", "tables")
    ), {kind: len(values) for kind, values in sizes.items()}
    outside = [f"{b['where']}: {b['box']}" for b in boxes if not (b["inside"] and b["sidebar_open"])]
    assert len(boxes) == len(ONE_REQUEST_PAGES) + 2 and not outside, outside or boxes
    outside_tour = outside_the_window(slides)
    assert len(slides) == 2 * SLIDE_COUNT - 1 and not outside_tour, f"Tour boxes outside 1280 × 720: {outside_tour}"
    print(f"[legibility] titles with the sidebar collapsed: {covered}")
    assert len(covered) == 3 and not any(c.get("covered") or c.get("missing") for c in covered), covered


@needs_recording
def test_arrow_keys_work_right_after_the_presenter_switch(tab, hosted_app: HostedApp) -> None:  # noqa: ANN001
    page = tab
    _open_link(page, f"{hosted_app.url}/tour?recording={RECORDING}&slide=1")
    switch = page.locator("[data-testid='stSidebar']").get_by_text("Presenter mode")
    _rerun(page, switch.click)  # focus is on the switch's <input> now: Streamlit's shortcuts ignore keys there
    _rerun(page, lambda: page.keyboard.press("ArrowRight"))
    assert page.locator("[data-testid='stMain'] h1").first.inner_text().strip() == TITLES[1]
    assert "presenter=1" in page.url
