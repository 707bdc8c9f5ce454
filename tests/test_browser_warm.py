"""A fresh server's first Run, in a real browser: with warming on (explorer/ui/warm_start.py), the first visitor's Run
pays for no model load, device figures or first-forward set-up.

Starts a server of its own (deploy/run.sh, hosted mode, `EXPLORER_WARM=1`: the session's shared server runs with
warming off), opens it, waits until the sidebar says the server is warm (at most WARM_TIMEOUT_S), presses Run with the
default prompt and measures, in the browser's own clock, from the click to the first token's text painted in the
live stream box (`explorer.ui.runner.LiveTokens`: the token marked "(TTFT)"). The run's TTFT comes from its trace
(the sidebar's "Download trace (JSON)"). The issue's bound, asserted here as the issue demands: click to first token
within TTFT + SLACK_S. A second Run is timed the same way, as a warm run to compare with (not asserted). The figures
are printed (run with `-s`) and written to `warm-first-run.json` in `$EXPLORER_SCREENSHOTS` if set, else pytest's
temporary folder, with the machine's load average: other work on the machine slows every pass and every redraw.

Needs Debian's chromium at /usr/bin/chromium and the `playwright` package (its own browser download is not used).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from explorer.core.device_profile import FIGURES_FILE_ENV
from explorer.core.trace import Trace
from tests.browser_support import (
    log_tail,
    mark_run_state,
    skip_module_without_browser,
    streamlit_server,
    wait_until_rerun_done,
)

skip_module_without_browser()
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow, pytest.mark.alone]  # its bounds are times

WARM_TIMEOUT_S = 180  # the model load (a first-ever GGUF conversion takes ~20 s), device figures and warm-up
RUN_TIMEOUT_S = 120
SLACK_S = 1.5  # the bound: click to first token within TTFT + 1.5 s
VIEWPORT = {"width": 1400, "height": 1000}

# Before the click: note the click's time (capture phase, before Streamlit handles it) and the first frame painted
# after the live stream box shows this run's first token (its text is "'token' (TTFT)"; a text already on the page,
# the last run's stream, does not count until it changes).
WATCH_FIRST_TOKEN_JS = """() => {
  window.__warm = {click: null, token: null};
  const before = new Map([...document.querySelectorAll("[data-testid='stText']")].map(e => [e, e.innerText]));
  const run = [...document.querySelectorAll("[data-testid='stSidebar'] button")]
    .find(b => b.innerText.trim() === "Run");
  run.addEventListener("click", () => { window.__warm.click = performance.now(); }, {capture: true, once: true});
  const shown = () => [...document.querySelectorAll("[data-testid='stText']")]
    .some(e => e.innerText.includes("(TTFT)") && before.get(e) !== e.innerText);
  new MutationObserver((_, observer) => {
    if (window.__warm.click === null || !shown()) return;
    observer.disconnect();
    requestAnimationFrame(() => { window.__warm.token = performance.now(); });
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
  return true;
}"""


def _run_and_time_first_token(page: object, sidebar: object) -> tuple[float, Trace]:
    """Press Run; seconds from the click to this run's first token on screen, and the run's trace (downloaded)."""
    assert page.evaluate(WATCH_FIRST_TOKEN_JS)  # type: ignore[attr-defined]
    mark = mark_run_state(page)
    sidebar.get_by_role("button", name="Run", exact=True).click()  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]
        "() => window.__warm.token !== null", timeout=RUN_TIMEOUT_S * 1000, polling=20
    )
    wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
    timing = page.evaluate("() => window.__warm")  # type: ignore[attr-defined]
    with page.expect_download() as download:  # type: ignore[attr-defined]
        sidebar.get_by_role("button", name="Download trace (JSON)").click()  # type: ignore[attr-defined]
    return (timing["token"] - timing["click"]) / 1e3, Trace.from_json(Path(download.value.path()).read_text())


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ["EXPLORER_SCREENSHOTS"]) if os.environ.get("EXPLORER_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_browser_a_fresh_servers_first_run_shows_its_first_token_within_ttft_plus_slack(
    chromium: object, tmp_path: Path, shots: Path
) -> None:
    log = tmp_path / "server.log"
    started_s = time.monotonic()
    # Its own figures too (no figures file): warming up covers measuring them, as on a new machine.
    with streamlit_server(log, env={"EXPLORER_WARM": "1", FIGURES_FILE_ENV: ""}) as url:
        context = chromium.new_context(viewport=VIEWPORT, accept_downloads=True)  # type: ignore[attr-defined]
        try:
            page = context.new_page()
            page.goto(url)
            sidebar = page.locator("[data-testid='stSidebar']")
            sidebar.get_by_text("Server warm:").wait_for(timeout=WARM_TIMEOUT_S * 1000)
            warm_s = time.monotonic() - started_s
            warm_line = sidebar.get_by_text("Server warm:").inner_text()
            wait_until_rerun_done(page, mark_run_state(page), RUN_TIMEOUT_S, start_timeout_s=0.5)
            first_token_s, trace = _run_and_time_first_token(page, sidebar)
            page.screenshot(path=str(shots / "warm-first-run.png"))
            second_token_s, second = _run_and_time_first_token(page, sidebar)  # a warm run, for comparison
        finally:
            context.close()
        server_log = log_tail(log)
    figures = {
        "server_start_to_warm_s": round(warm_s, 2),
        "click_to_first_token_s": round(first_token_s, 3),
        "ttft_s": round(trace.ttft_s, 3),
        "overhead_s": round(first_token_s - trace.ttft_s, 3),
        "bound_s": round(trace.ttft_s + SLACK_S, 3),
        "second_run_click_to_first_token_s": round(second_token_s, 3),
        "second_run_ttft_s": round(second.ttft_s, 3),
        "second_run_overhead_s": round(second_token_s - second.ttft_s, 3),
        "sidebar": warm_line,
        "load_average_1min": round(os.getloadavg()[0], 2),  # the machine's load: other work slows every pass
    }
    (shots / "warm-first-run.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\n[warm first run] {json.dumps(figures)}")
    assert "Warming up at server start failed" not in server_log, server_log
    assert first_token_s <= trace.ttft_s + SLACK_S, figures  # the bound (a timing, as the issue demands)
