"""Soak through a real server: the app as deployed (`deploy/run.sh`, hosted mode, 127.0.0.1 only) driven by four
browser sessions (Playwright, Debian's chromium) for N runs in all; prints the server process's RSS at runs 10, 50
and 100 and the growth between them.

A benchmark to read, not a timed test: `python benchmarks/soak_server.py [RUNS]` from the repository root (needs the
dev requirements and /usr/bin/chromium). Bounded: every wait has a deadline and the server is always stopped. The
rate limit is lifted for the soak (`EXPLORER_RUNS_PER_MINUTE=0`); every other hosted cap stays as deployed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the helpers live in the checkout

from explorer.checks.soak import PROMPTS  # noqa: E402
from explorer.core.units import megabytes  # noqa: E402
from tests.browser_support import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    mark_run_state,
    streamlit_server,
    wait_until_rerun_done,
)

SESSIONS = 4
CHECKPOINTS = (10, 50, 100)
NEW_TOKENS = "8"
RUN_TIMEOUT_S = 240  # four runs queued behind each other on a busy 2-core machine, the first one loading the model


def server_process(url: str) -> psutil.Process:
    """The Streamlit process listening on the URL's port (deploy/run.sh execs it, so it is the process itself)."""
    port = str(urlsplit(url).port)
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "streamlit" in " ".join(cmdline) and port in cmdline:
            return proc
    raise RuntimeError(f"no streamlit process found for {url}")


def start_run(page: Page, prompt: str) -> int:
    """Type the prompt (committed by blur) and press Run; returns the mark to wait from."""
    sidebar = page.locator("[data-testid='stSidebar']")
    box = sidebar.get_by_label("Prompt", exact=True)
    box.fill(prompt)
    box.blur()
    number = sidebar.get_by_label("Max new tokens", exact=True)
    number.fill(NEW_TOKENS)
    number.blur()
    page.wait_for_timeout(300)  # let the two commits' reruns start before the click
    mark = mark_run_state(page)
    sidebar.get_by_role("button", name="Run", exact=True).click()
    return mark


def soak(url: str, runs: int) -> dict[int, int]:
    """`runs` runs from `SESSIONS` sessions, clicked together in rounds (so they queue), RSS at the checkpoints."""
    server = server_process(url)
    print(f"server pid {server.pid}; RSS before the first run: {megabytes(server.memory_info().rss)}", flush=True)
    seen: dict[int, int] = {}
    started = time.monotonic()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        pages = [browser.new_context().new_page() for _ in range(SESSIONS)]
        for page in pages:
            page.goto(url)
            page.locator("[data-testid='stSidebar']").get_by_label("Prompt", exact=True).wait_for(timeout=60_000)
        done = 0
        while done < runs:
            next_checkpoint = min([c for c in CHECKPOINTS if c > done] + [runs])
            round_pages = pages[: min(SESSIONS, next_checkpoint - done)]
            marks = [start_run(page, PROMPTS[(done + i) % len(PROMPTS)]) for i, page in enumerate(round_pages)]
            for page, mark in zip(round_pages, marks):
                wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
            done += len(round_pages)
            if done in CHECKPOINTS or done == runs:
                seen[done] = server.memory_info().rss
                elapsed_s = time.monotonic() - started
                print(f"run {done:>4}: server RSS {megabytes(seen[done]):>10} ({elapsed_s:.0f} s)", flush=True)
        browser.close()
    return seen


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        with streamlit_server(log, startup_timeout_s=120, env={"EXPLORER_RUNS_PER_MINUTE": "0"}) as url:
            seen = soak(url, runs)
    marks = sorted(seen)
    if len(marks) >= 2:
        first, last = marks[0], marks[-1]
        print(f"growth from run {first} to run {last}: {megabytes(seen[last] - seen[first], signed=True)}")
    else:
        print("one checkpoint only: no growth to report")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
