"""Step by step in a real browser, presenting (charts drawn as SVG): what its first screen shows (the newest rows'
labels, the KV growth's points, the newest pass's line), and a key press timed until the new pass's attention row and
KV position are both drawn. Shared by tests/test_browser_step.py and benchmarks/step_latency.py."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from tests.browser_support import IDLE_JS

# The first screen as drawn: the strip's row labels ("pass 2 · ␣to"), the KV growth's points (one per pass), and the
# newest pass's line ("Pass 2 · decode → “␣to” in 61 ms (measured)"): explorer.ui.step_mode_view's containers.
FIRST_SCREEN_JS = """() => {
  const strip = document.querySelector(".st-key-step-newest-rows svg.marks");
  const kv = document.querySelector(".st-key-step-kv-growth svg.marks");
  const line = document.querySelector(".st-key-step-first-screen [data-testid='stMarkdownContainer']");
  return {rows: strip ? [...strip.querySelectorAll("g.role-axis-label text")].map(t => t.textContent) : [],
          kv_points: kv ? kv.querySelectorAll("g.mark-symbol.role-mark path").length : 0,
          line: line ? line.innerText : ""};
}"""
# Pass k's row in the strip (the prefill's rows are the prompt's), its point in the KV growth (k + 1 points: the
# prefill's and one per decode), its line.
PASS_DRAWN_JS = (
    "(k) => { const d = ("
    + FIRST_SCREEN_JS
    + ")(); const row = d.rows.some(r => r.startsWith(k === 0 ? 'prompt ' : `pass ${k} ·`));"
    + " return row && d.kv_points === k + 1 && d.line.startsWith(`Pass ${k} ·`); }"
)
PASS_TIME = re.compile(r"in ([\d.]+) (ms|s) \(measured\)")


@dataclass(frozen=True)
class KeyToRow:
    """One → press: how long until its pass's row and KV position were drawn, against the pass's own time."""

    pass_index: int
    drawn_ms: float  # key press to both drawn (measured in the browser's driver)
    pass_ms: float  # the pass's measured time, as its line says it

    @property
    def beyond_pass_ms(self) -> float:
        return self.drawn_ms - self.pass_ms


def pass_ms(line: str) -> float:
    """The newest pass's measured time from its line, in milliseconds."""
    found = PASS_TIME.search(line)
    assert found, f"no pass time in {line!r}"
    return float(found.group(1)) * (1.0 if found.group(2) == "ms" else 1e3)


def press_right_and_time(page, pass_index: int, timeout_s: float) -> KeyToRow:  # noqa: ANN001 - playwright's Page
    """Press → with the page focused (not a text box) and time it until pass `pass_index` is drawn in the first
    screen, checked on every animation frame; then wait for the rest of the view to finish."""
    page.wait_for_function(IDLE_JS, timeout=timeout_s * 1000)
    page.locator("[data-testid='stMain'] h1").first.click()
    started = time.monotonic()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(PASS_DRAWN_JS, arg=pass_index, timeout=timeout_s * 1000, polling="raf")
    drawn_ms = (time.monotonic() - started) * 1e3
    line = page.evaluate(FIRST_SCREEN_JS)["line"]
    page.wait_for_function(IDLE_JS, timeout=timeout_s * 1000)
    return KeyToRow(pass_index, drawn_ms, pass_ms(line))
