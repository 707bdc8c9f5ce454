"""Real-browser smoke test: the app in headless Chromium, one run with a hostile prompt, every page visited.

On the session's app server (deploy/run.sh on a free local port, started once in tests/conftest.py), types an
HTML/markdown-injection prompt into the sidebar, runs it (8 new tokens), then opens each page from the sidebar
navigation and checks: no exception, at least one drawn chart, the prompt shown as text (never as HTML: no
`img[src='x']`, no alert dialog). A screenshot of every page is kept for a human to look at: full-height in
`$EXPLORER_SCREENSHOTS` if set, else its first screen in pytest's temporary folder (the path is printed; run with `-s`
to see it).
Step mode is driven by its keys (right arrow: next token, Home: reset), each press timed until the new attention row
is drawn (the figures go to `measurements.json` in the same folder). Presenter mode is measured in
tests/test_browser_legibility.py.

Needs Debian's chromium at /usr/bin/chromium and the `playwright` package (its own browser download is not used).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser_support import (
    HOST,
    IDLE_JS,
    HostedApp,
    full_screenshot,
    log_tail,
    mark_run_state,
    screenshot_folder,
    skip_module_without_browser,
    wait_for_charts,
    wait_until_rerun_done,
)

skip_module_without_browser()
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

HOSTILE_PROMPT = "<img src=x onerror=alert(1)> **bold** <script>alert(2)</script>"
HOSTILE_FRAGMENT = "<img src=x onerror=alert(1)>"
MAX_NEW_TOKENS = "8"
EXPECTED_PAGES = (Path(__file__).resolve().parents[1] / "app.py").read_text().count("st.Page(")
# Pages that draw their charts only after an action of their own (a lab's run, a step, answering, a second run).
OWN_ACTION_PAGES = {
    "Room",  # its charts are a finished round's
    "Without a KV cache",
    "Batching",
    "Step by step",
    "Check yourself",
    "Compare two runs",
    "Scheduling",
    "Endpoint",
}
VIEWPORT = {"width": 1400, "height": 1000}
RUN_TIMEOUT_S = 120  # model load (a first-ever GGUF conversion takes ~20 s) + 8 tokens + attention replay
PAGE_TIMEOUT_S = 60
CHART_DRAW_TIMEOUT_S = 20


@dataclass
class Session:
    """One browser tab on the app, after one run, and everything it has seen so far."""

    page: object
    url: str
    shots: Path
    server_log: Path
    dialogs: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "page"


def _injected_images(page) -> int:
    """How many `img[src=x]` or `onerror` attributes the DOM holds, open shadow roots included: any means injection."""
    return page.evaluate(
        """() => {
          const roots = [document];
          for (let i = 0; i < roots.length; i++)
            for (const el of roots[i].querySelectorAll("*")) if (el.shadowRoot) roots.push(el.shadowRoot);
          return roots.reduce((n, r) => n + r.querySelectorAll("img[src='x'], [onerror]").length, 0);
        }"""
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, hosted_app: HostedApp, chromium) -> Iterator[Session]:
    """One tab on the session's app server (its own Streamlit session), in the session's Chromium."""
    shots = screenshot_folder(tmp_path_factory, "browser-screenshots")
    print(f"\n[browser test] screenshots: {shots}\n[browser test] server log: {hosted_app.log}")
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        s = Session(page=page, url=hosted_app.url, shots=shots, server_log=hosted_app.log)

        def only_local(route) -> None:  # never let the page reach past this machine (e.g. metrics configs)
            if urlsplit(route.request.url).hostname == HOST or route.request.url.startswith(("data:", "blob:")):
                route.continue_()
            else:
                s.blocked.append(route.request.url)
                route.abort()

        def on_dialog(dialog) -> None:
            s.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        context.route("**/*", only_local)
        page.on("dialog", on_dialog)
        page.on("pageerror", lambda error: s.page_errors.append(str(error)))
        page.goto(hosted_app.url)
        yield s
    finally:
        context.close()


def _run_from_sidebar(s: Session, prompt_text: str | None, max_new_tokens: str | None) -> float:
    """Press Run, after typing a prompt and max new tokens when given (else the sidebar's defaults); seconds taken."""
    page = s.page
    first_page = page.locator("[data-testid='stSidebarNavLink']").first
    if first_page.count():  # a run is shown on the first page; a lab page draws nothing until its own run
        mark = mark_run_state(page)
        first_page.click()
        wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S)
    sidebar = page.locator("[data-testid='stSidebar']")
    prompt = sidebar.get_by_label("Prompt", exact=True)
    prompt.wait_for()
    mark = mark_run_state(page)
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S, start_timeout_s=0.1)  # the last script run has drawn the form
    if prompt_text is not None:
        prompt.fill(prompt_text)
        prompt.blur()  # commits a Streamlit text area (Ctrl+Enter after fill does not)
    if max_new_tokens is not None:
        max_tokens = sidebar.get_by_label("Max new tokens", exact=True)
        max_tokens.fill(max_new_tokens)
        max_tokens.blur()
    mark = mark_run_state(page)
    started = time.monotonic()
    sidebar.get_by_role("button", name="Run", exact=True).click()
    try:
        wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
        page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=RUN_TIMEOUT_S * 1000)
    except Exception:
        full_screenshot(page, s.shots / "00-run-did-not-finish.png", **VIEWPORT)
        raise AssertionError(f"the run did not finish; server log:\n{log_tail(s.server_log)}") from None
    return time.monotonic() - started


def _visit_every_page(session: Session, tag: str, prompt_fragment: str | None) -> list[str]:
    """Click each sidebar page, wait for it, screenshot it, and list what looks wrong (never stop at the first)."""
    page = session.page
    links = page.locator("[data-testid='stSidebarNavLink']")
    labels = [label.strip() for label in links.all_inner_texts()]
    assert len(labels) == EXPECTED_PAGES, f"sidebar pages: {labels}"
    problems: list[str] = []
    timings: list[str] = []
    for i, label in enumerate(labels):
        link = links.nth(i)
        href = link.get_attribute("href") or ""
        mark = mark_run_state(page)
        started = time.monotonic()
        link.click()
        try:
            page.wait_for_url(href, timeout=PAGE_TIMEOUT_S * 1000)
            wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S)
        except Exception as exc:  # keep going: the screenshot and the other pages still tell something
            problems.append(f"{label}: did not finish rendering ({type(exc).__name__}: {str(exc).splitlines()[0]})")
        drawn, charts = wait_for_charts(page, CHART_DRAW_TIMEOUT_S)
        timings.append(f"{label} {time.monotonic() - started:.1f} s")
        shot = session.shots / f"{tag}-{i + 1:02d}-{_slug(label)}.png"
        full_screenshot(page, shot, **VIEWPORT)

        main = page.locator("[data-testid='stMain']")
        text = main.inner_text()
        headings = [h.strip() for h in main.locator("h1").all_inner_texts() if h.strip()]
        if not headings:  # titles are the pages' own ("Where the time goes" under "Cost (roofline)"): any will do
            problems.append(f"{label}: the page shows no title")
        exceptions = page.locator("[data-testid='stException']")
        if exceptions.count() or "Traceback" in text:
            detail = exceptions.first.inner_text()[:500] if exceptions.count() else text[:500]
            problems.append(f"{label}: an exception is shown: {detail!r}")
        errors = page.locator("[data-testid='stAlertContentError']").all_inner_texts()
        if errors:
            problems.append(f"{label}: error message(s) shown: {[e[:200] for e in errors]}")
        if drawn < 1 and label not in OWN_ACTION_PAGES:
            problems.append(f"{label}: no chart drawn ({charts} chart element(s), {drawn} drawn)")
        if _injected_images(page):
            problems.append(f"{label}: an <img src=x> element exists: the prompt was rendered as HTML")
        if i == 0 and prompt_fragment and prompt_fragment not in main.evaluate("e => e.textContent"):
            problems.append(f"{label}: the prompt is not shown as literal text")
        print(f"[browser test] {tag} {label}: title {headings[:1]}, {drawn}/{charts} charts drawn, {shot.name}")
    print(f"[browser test] {tag} page times: {', '.join(timings)}")
    return problems


def _assert_clean(session: Session, problems: list[str]) -> None:
    if session.blocked:
        print(f"[browser test] blocked non-local requests: {sorted(set(session.blocked))}")
    assert session.dialogs == [], f"a dialog fired (HTML/JS injection): {session.dialogs}"
    assert session.page_errors == [], f"uncaught JavaScript errors in the page: {session.page_errors}"
    assert not problems, "\n".join([*problems, f"screenshots: {session.shots}"])


def test_browser_a_run_renders_every_page_with_its_hostile_prompt_as_text(session: Session) -> None:
    """One run (the sidebar's default settings but a hostile prompt and 8 new tokens), then every page: each draws
    its charts with no error, and the prompt stays text everywhere."""
    run_s = _run_from_sidebar(session, HOSTILE_PROMPT, MAX_NEW_TOKENS)
    print(f"[browser test] run with {MAX_NEW_TOKENS} new tokens: {run_s:.1f} s in the browser (a cold server loads)")
    assert _injected_images(session.page) == 0, "an <img src=x> element exists: the prompt was rendered as HTML"
    _assert_clean(session, _visit_every_page(session, "hostile", HOSTILE_FRAGMENT))


def _goto_page(s: Session, label: str) -> None:
    page = s.page
    link = page.locator("[data-testid='stSidebarNavLink']").filter(has_text=label)
    mark = mark_run_state(page)
    link.first.click()
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S)


def _passes_shown(page) -> str:
    metric = page.locator("[data-testid='stMetric']").filter(has_text="Passes")
    return metric.locator("[data-testid='stMetricValue']").inner_text() if metric.count() else ""


# Rows of the step page's attention map as drawn: its y axis (query rows) states how many values it holds. The chart
# is SVG while it has under ~2,000 cells (Streamlit switches larger charts to canvas), which a short prompt keeps.
ATTENTION_ROWS_JS = """() => {
  for (const axis of document.querySelectorAll("[data-testid='stVegaLiteChart'] g.role-axis")) {
    const label = axis.getAttribute("aria-label") || "";
    if (label.startsWith("Y-axis titled 'query position")) {
      const m = label.match(/with (\\d+) values/);
      return m ? Number(m[1]) : -1;
    }
  }
  return 0;
}"""
ROW_DRAWN_JS = f"rows => ({ATTENTION_ROWS_JS})() === rows && ({IDLE_JS})()"


def _record(s: Session, **figures: object) -> None:
    """Add figures to `measurements.json` beside the screenshots (each test adds its own) and print them."""
    path = s.shots / "measurements.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(kept | figures, indent=2))
    print(f"[browser test] measured: {json.dumps(figures)} -> {path}")


def _type_keeps_text(page, box, text: str) -> str:
    """What a text box holds after `text` is typed into it key by key (a page-wide shortcut must not eat keys)."""
    original = box.input_value()
    box.click()
    box.press("ControlOrMeta+a")
    page.keyboard.type(text)
    typed = box.input_value()
    box.fill(original)  # put the sidebar back as it was; nothing is run
    box.blur()
    return typed


def test_browser_step_mode_runs_one_pass_per_key_press(session: Session) -> None:
    """Right arrow adds one pass: timed from the key press to the new attention row drawn; Home resets."""
    page = session.page
    _goto_page(session, "Step by step")
    prompt = page.locator("[data-testid='stMain']").get_by_label("Prompt", exact=True)
    prompt.fill("The cat sat on the")
    prompt.blur()
    mark = mark_run_state(page)
    page.get_by_role("button", name="Prefill").click()
    wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
    page.locator("[data-testid='stMetric']").filter(has_text="Passes").wait_for(timeout=RUN_TIMEOUT_S * 1000)
    page.wait_for_function(f"() => ({ATTENTION_ROWS_JS})() > 0 && ({IDLE_JS})()", timeout=RUN_TIMEOUT_S * 1000)
    assert _passes_shown(page).startswith("1"), _passes_shown(page)
    next_button = page.locator(".st-key-step-next button").first  # a shortcut button matches twice: take the first
    key_to_row_ms = []
    for expected in ("2", "3"):
        page.wait_for_function(IDLE_JS, timeout=PAGE_TIMEOUT_S * 1000)
        assert next_button.is_enabled()  # the key works once the button it presses is live again
        rows = page.evaluate(ATTENTION_ROWS_JS)
        page.locator("[data-testid='stMain'] h1").first.click()  # focus the page, not a text box
        started = time.monotonic()
        page.keyboard.press("ArrowRight")
        try:  # checked on every animation frame: the rerun is over and the map has one more query row
            page.wait_for_function(ROW_DRAWN_JS, arg=rows + 1, timeout=PAGE_TIMEOUT_S * 1000, polling="raf")
        except Exception:
            full_screenshot(page, session.shots / "step-mode-failed.png", **VIEWPORT)
            alerts = page.locator("[data-testid='stAlert']").all_inner_texts()
            raise AssertionError(f"the arrow key did not draw row {rows + 1}; on the page: {alerts}") from None
        key_to_row_ms.append(round(1e3 * (time.monotonic() - started)))
        assert _passes_shown(page).startswith(expected), _passes_shown(page)
    full_screenshot(page, session.shots / "step-mode.png", **VIEWPORT)
    _record(session, step_key_to_new_attention_row_ms=key_to_row_ms)

    mark = mark_run_state(page)
    page.locator("[data-testid='stMain'] h1").first.click()
    page.keyboard.press("Home")  # reset: the cache is freed and the page asks for a prompt again
    wait_until_rerun_done(page, mark, PAGE_TIMEOUT_S)
    page.get_by_text("Type a prompt and press Prefill").wait_for(timeout=PAGE_TIMEOUT_S * 1000)
    assert page.evaluate(ATTENTION_ROWS_JS) == 0 and not _passes_shown(page)

    # The shortcuts leave typing alone: spaces and letters reach a text box (an earlier component swallowed them).
    sidebar_prompt = page.locator("[data-testid='stSidebar']").get_by_label("Prompt", exact=True)
    assert _type_keeps_text(page, sidebar_prompt, "a r") == "a r"
    assert session.dialogs == [] and session.page_errors == []


def test_browser_cost_page_profiles_a_pass(session: Session) -> None:
    page = session.page
    _goto_page(session, "Cost (roofline)")
    _, before = wait_for_charts(page, CHART_DRAW_TIMEOUT_S)  # every chart of the page drawn, not the first alone
    mark = mark_run_state(page)
    page.get_by_role("button", name="Profile this pass").click()
    wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
    try:
        page.locator("[data-testid='stMetric']").filter(has_text="Profiled wall").wait_for(timeout=RUN_TIMEOUT_S * 1000)
    except Exception:
        full_screenshot(page, session.shots / "cost-profile-failed.png", **VIEWPORT)
        alerts = page.locator("[data-testid='stAlert']").all_inner_texts()
        raise AssertionError(f"no profile drawn; on the page: {alerts}") from None
    _, after = wait_for_charts(page, CHART_DRAW_TIMEOUT_S)
    assert after > before, (before, after)  # the profile draws its own chart (the page may still have been drawing)
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    full_screenshot(page, session.shots / "cost-profile.png", **VIEWPORT)
    # Issue 31: Kineto's error when a first profile starts in a script thread (the server primes it at start).
    assert "External init callback" not in log_tail(session.server_log, chars=10**7)


AT_SCALE_CHARTS = 5  # the what-if's three, the split section's two


def test_browser_at_scale_shows_the_what_if_beside_this_machines_run(session: Session) -> None:
    """The At scale page draws its charts with no run (and says so), then this machine's gap after one: the what-if's
    three and the split section's two (its goodput curves and the TTFT/TPOT distributions)."""
    page = session.page
    main = page.locator("[data-testid='stMain']")
    _goto_page(session, "At scale")
    drawn, charts = wait_for_charts(page, CHART_DRAW_TIMEOUT_S, at_least=AT_SCALE_CHARTS)
    if "No run on this machine yet" in main.inner_text():  # run on its own: the model's floors only, then a run
        assert (drawn, charts) == (AT_SCALE_CHARTS, AT_SCALE_CHARTS)
        _run_from_sidebar(session, None, MAX_NEW_TOKENS)
        _goto_page(session, "At scale")
        drawn, charts = wait_for_charts(page, CHART_DRAW_TIMEOUT_S, at_least=AT_SCALE_CHARTS)
    full_screenshot(page, session.shots / "at-scale.png", **VIEWPORT)
    text = main.inner_text()
    assert (drawn, charts) == (AT_SCALE_CHARTS, AT_SCALE_CHARTS), text[:500]
    assert re.search(r"Decode ran at [\d.]+x its memory floor here", text), text[:1000]
    assert "assumption" in text and "Tokens/s ceiling" in text and "Llama-3.1-8B" in text
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    assert page.locator("[data-testid='stException']").count() == 0
