"""Charts first in presenter mode: at 1280 × 720 with the sidebar open, each "One request" page's main chart lies
inside the first screen, with the page's key figures above it.

On the session's app server (tests/conftest.py), a tab at 1280 × 720 opens the bundled recording by its link
(`/?recording=short-chat`; a short live run in a checkout without it), turns presenter mode on, then opens each
"One request" page from the sidebar (Compare two runs after a short live run beside the first), waits for its charts,
scrolls to the top and takes the bounding box of the main chart: the chart a page draws in its `main-chart` container
(`ui.widgets.ChartFirst`). Every box must lie inside the viewport. The boxes are printed as a table and kept in
`presenter-boxes.json` beside a screenshot of each first screen (in `$EXPLORER_SCREENSHOTS` if set, else in pytest's
temporary folder).

Needs Debian's chromium at /usr/bin/chromium and the `playwright` package (its own browser download is not used).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser_support import (
    REPO_ROOT,
    HostedApp,
    log_tail,
    mark_run_state,
    skip_module_without_browser,
    wait_for_charts,
    wait_until_rerun_done,
)

skip_module_without_browser()
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 720}  # a projector's window
ONE_REQUEST_PAGES = ("Inside one inference", "Attention", "KV cache", "Cost (roofline)", "Latency", "Compare two runs")
MAIN_CHART = ".st-key-main-chart [data-testid='stVegaLiteChart']"  # the chart a page draws first (ui.ChartFirst)
RUN_TIMEOUT_S = 180  # a cold server loads the model (and converts the GGUF once) before the first run
PAGE_TIMEOUT_S = 60
CHART_DRAW_TIMEOUT_S = 20
RECORDING = "short-chat"  # bundled in recordings/, opened by `/?recording=NAME`
# Short live runs: the first stands in for the recording in a checkout without one; the second goes beside it.
LIVE_RUNS = (("Explain in one sentence why the sky is blue.", "6"), ("Why is the sea salty?", "4"))

# The main chart's box, and the main area's, with every scrolling element (Streamlit scrolls inside stMain) at the top.
BOX_JS = """(selector) => {
  for (const el of [document.scrollingElement, ...document.querySelectorAll("[data-testid='stMain'], section")])
    if (el) el.scrollTop = 0;
  window.scrollTo(0, 0);
  const box = el => { const r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  const chart = document.querySelector(selector);
  return {chart: chart ? box(chart) : null,
          main: box(document.querySelector("[data-testid='stMainBlockContainer']")),
          sidebar: box(document.querySelector("[data-testid='stSidebar']"))};
}"""


def _shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("EXPLORER_SCREENSHOTS")
    folder = Path(wanted).expanduser().resolve() if wanted else tmp_path_factory.mktemp("presenter-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def tab(hosted_app: HostedApp, chromium) -> Iterator[object]:
    """One tab at 1280 × 720 on the session's app server (its own Streamlit session)."""
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        page.goto(hosted_app.url)
        yield page
    finally:
        context.close()


def _rerun(page, action, timeout_s: float = PAGE_TIMEOUT_S) -> None:
    mark = mark_run_state(page)
    action()
    wait_until_rerun_done(page, mark, timeout_s)


def _live_run(page, prompt_text: str, max_new_tokens: str, server_log: Path) -> None:
    sidebar = page.locator("[data-testid='stSidebar']")
    prompt = sidebar.get_by_label("Prompt", exact=True)
    prompt.wait_for()
    _rerun(page, lambda: (prompt.fill(prompt_text), prompt.blur()))
    tokens = sidebar.get_by_label("Max new tokens", exact=True)
    _rerun(page, lambda: (tokens.fill(max_new_tokens), tokens.blur()))
    try:
        _rerun(page, sidebar.get_by_role("button", name="Run", exact=True).click, RUN_TIMEOUT_S)
        page.get_by_role("button", name="Download trace (JSON)").wait_for(timeout=RUN_TIMEOUT_S * 1000)
    except Exception:
        raise AssertionError(f"the run did not finish; server log:\n{log_tail(server_log)}") from None


def first_run(page, hosted_app: HostedApp) -> str:
    """What the "One request" pages show: the bundled recording opened by its link, as a talk's slide would open it,
    or a short live run in a checkout that ships none. Says which."""
    if not (REPO_ROOT / "recordings" / f"{RECORDING}.pdx").exists():
        _live_run(page, *LIVE_RUNS[0], hosted_app.log)
        return "a live run"
    page.goto(f"{hosted_app.url}/?recording={RECORDING}")
    page.locator(MAIN_CHART).first.wait_for(timeout=PAGE_TIMEOUT_S * 1000)  # the first page draws the recording
    return f"the recording {RECORDING}"


def second_run(page, hosted_app: HostedApp) -> None:
    """A short live run beside the first, for Compare two runs."""
    _live_run(page, *LIVE_RUNS[1], hosted_app.log)


def _goto(page, label: str) -> None:
    link = page.locator("[data-testid='stSidebarNavLink']").filter(has_text=re.compile(f"^{re.escape(label)}$"))
    _rerun(page, link.first.click)


def _table(rows: list[dict]) -> str:
    lines = [f"{'page':<22} {'top':>6} {'bottom':>7} {'left':>6} {'right':>6}  inside"]
    for r in rows:
        box = r["chart"]
        if box is None:
            lines.append(f"{r['page']:<22} {'no main chart':>28}  False")
            continue
        cells = f"{box['top']:6.0f} {box['bottom']:7.0f} {box['left']:6.0f} {box['right']:6.0f}"
        lines.append(f"{r['page']:<22} {cells}  {r['inside']}")
    return "\n".join(lines)


def test_browser_presenter_main_chart_in_first_screen(
    tab, hosted_app: HostedApp, tmp_path_factory: pytest.TempPathFactory
) -> None:
    page = tab
    shots = _shots(tmp_path_factory)
    shown = first_run(page, hosted_app)
    _rerun(page, page.locator("[data-testid='stSidebar']").get_by_text("Presenter mode").click)
    rows = []
    for label in ONE_REQUEST_PAGES:
        if label == "Compare two runs":
            second_run(page, hosted_app)
        _goto(page, label)
        page.locator(MAIN_CHART).first.wait_for(timeout=PAGE_TIMEOUT_S * 1000)
        wait_for_charts(page, CHART_DRAW_TIMEOUT_S)
        boxes = page.evaluate(BOX_JS, MAIN_CHART)
        page.screenshot(path=str(shots / f"presenter-first-screen-{re.sub(r'[^a-z]+', '-', label.lower())}.png"))
        chart = boxes["chart"]
        inside = chart is not None and (
            0 <= chart["top"]
            and chart["bottom"] <= VIEWPORT["height"]
            and 0 <= chart["left"]
            and chart["right"] <= VIEWPORT["width"]
        )
        assert boxes["sidebar"]["right"] > 200, boxes["sidebar"]  # measured with the sidebar open, as a talk has it
        rows.append({"page": label, "chart": chart, "main": boxes["main"], "inside": inside})
    (shots / "presenter-boxes.json").write_text(
        json.dumps({"viewport": VIEWPORT, "shown": shown, "pages": rows}, indent=2)
    )
    print(f"\n[presenter test] {shown}: main chart boxes at {VIEWPORT['width']} × {VIEWPORT['height']} px; {shots}")
    print(_table(rows))
    outside = [r["page"] for r in rows if not r["inside"]]
    assert not outside, f"main chart not inside the first screen on: {outside}\n{_table(rows)}"
