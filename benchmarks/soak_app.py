"""Soak through the app itself: Streamlit's AppTest drives the real app.py (sidebar form, run, attention capture on
every 5th run, the session's history), N runs in one process; prints the RSS at runs 10, 50 and 100.

A benchmark to read, not a timed test: `python benchmarks/soak_app.py [RUNS]` from the repository root.
The in-process soak of the same code path is `python -m explorer soak --runs 100`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from unittest import mock

from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the app imports `explorer` from the checkout

from explorer.checks.soak import PROMPTS, RSS_SOURCE, rss_bytes  # noqa: E402
from explorer.core.units import megabytes  # noqa: E402

CHECKPOINTS = (10, 50, 100)
MAX_NEW_TOKENS = 8
ATTENTION_EVERY = 5


def main(runs: int) -> None:
    original = PagesManager.__init__

    def init(self: PagesManager, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False  # as a real server after st.navigation (see tests/test_app.py)

    with mock.patch.object(PagesManager, "__init__", init):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        at.run()
        started = time.monotonic()
        print(f"rss source: {RSS_SOURCE}; before the first run: {megabytes(rss_bytes())}", flush=True)
        seen: dict[int, int] = {}
        for run in range(1, runs + 1):
            at.sidebar.text_area[0].input(PROMPTS[run % len(PROMPTS)])
            at.sidebar.number_input[0].set_value(MAX_NEW_TOKENS)
            attention = next(t for t in at.sidebar.toggle if t.label == "Capture attention maps")
            attention.set_value(run % ATTENTION_EVERY == 0)
            at.sidebar.button[0].click().run()
            assert not at.exception, at.exception
            if run in CHECKPOINTS or run == runs:
                seen[run] = rss_bytes()
                print(f"run {run:>4}: RSS {megabytes(seen[run]):>10} ({time.monotonic() - started:.0f} s)", flush=True)
        if 10 in seen and runs in seen:
            print(f"growth from run 10 to run {runs}: {megabytes(seen[runs] - seen[10], signed=True)}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
