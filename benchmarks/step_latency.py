"""One person alone on Step by step, in a real browser: from the → key to the new attention row and the new KV position
drawn, against the pass's own time (target, issue 43: within the pass + 0.3 s).

Starts the app as deployed (deploy/run.sh, warming on, 127.0.0.1 only), waits until it is warm, opens
`/step?presenter=1` at 1280 x 720 in headless Chromium (presenter mode draws charts as SVG, so what is drawn can be
read), presses Prefill, then → `--presses` times with `--pause-s` between them (a presenter's pause: the device goes
idle, so each click's turn also runs its warm twin), and prints for each press the time until both were drawn, the
pass's measured time (as its line says it) and the difference, then the medians and the verdict. A benchmark to read,
not a timed test: `python benchmarks/step_latency.py` from the repository root (tests/test_browser_step.py checks a
looser bound).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the driver and the app come from this checkout

from benchmarks.workshop import BROWSER_NICE, WARM_TIMEOUT_S, NiceWatch, wait_until_warm  # noqa: E402
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS, IDLE_JS, browser_missing, streamlit_server  # noqa: E402
from tests.step_support import PASS_DRAWN_JS, KeyToRow, press_right_and_time  # noqa: E402

VIEWPORT = {"width": 1280, "height": 720}
PROMPT = "Why is the sky blue?"
TIMEOUT_S = 180.0  # one press on a busy machine
WITHIN_MS = 300.0  # the target (issue 43): drawn within the pass + this


def step_alone(url: str, presses: int, pause_s: float) -> list[KeyToRow]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport=VIEWPORT).new_page()
            page.set_default_timeout(TIMEOUT_S * 1000)
            page.goto(f"{url}/step?presenter=1")
            main = page.locator("[data-testid='stMain']")
            main.get_by_role("button", name="Prefill").wait_for()
            page.wait_for_function(IDLE_JS)
            main.get_by_label("Prompt", exact=True).fill(PROMPT)
            main.get_by_role("button", name="Prefill").click()
            page.wait_for_function(PASS_DRAWN_JS, arg=0, timeout=TIMEOUT_S * 1000)
            found = []
            for index in range(1, presses + 1):
                time.sleep(pause_s)
                found.append(press_right_and_time(page, index, TIMEOUT_S))
                k = found[-1]
                print(
                    f"pass {k.pass_index}: drawn {k.drawn_ms:7.0f} ms after →; the pass {k.pass_ms:6.1f} ms; "
                    f"beyond it {k.beyond_pass_ms:6.0f} ms",
                    flush=True,
                )
            return found
        finally:
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presses", type=int, default=8)
    parser.add_argument("--pause-s", type=float, default=1.0, help="between presses, as a presenter talks")
    parser.add_argument("--nice-browser", action="store_true", help=f"run the browser at nice {BROWSER_NICE}")
    args = parser.parse_args()
    missing = browser_missing()
    if missing:
        parser.error(missing)
    folder = Path(tempfile.mkdtemp(prefix="step-latency-"))
    turn_log, server_log = folder / "turns.jsonl", folder / "server.log"
    with streamlit_server(server_log, env={"EXPLORER_WARM": "1", "EXPLORER_TURN_LOG": str(turn_log)}) as url:
        print(f"warm after {wait_until_warm(turn_log, server_log, WARM_TIMEOUT_S):.1f} s", flush=True)
        with NiceWatch(BROWSER_NICE if args.nice_browser else 0) as nice:
            presses = step_alone(url, args.presses, args.pause_s)
    print(nice.line())
    drawn = statistics.median(k.drawn_ms for k in presses)
    beyond = statistics.median(k.beyond_pass_ms for k in presses)
    within = sum(k.beyond_pass_ms <= WITHIN_MS for k in presses)
    print(
        f"\nkey → new row and KV position drawn: median {drawn:.0f} ms, {beyond:.0f} ms beyond the pass; "
        f"within the pass + {WITHIN_MS:.0f} ms: {within}/{len(presses)}"
    )
    return 0 if within == len(presses) else 1


if __name__ == "__main__":
    sys.exit(main())
