"""The Room in real browsers: two sessions (two browser contexts) on the shared hosted server. One opens a room, the
other joins by its link; both submit a prompt; the presenter starts one round of 4 new tokens on the embedded model;
each page then shows its own request inside the shared schedule (its TTFT and ITL against alone, its own prompt and
never the other's), the guest's page redrawn by its live line when the round ends, with no error on either."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser_support import HostedApp, keep_to_this_machine, skip_module_without_browser, wait_for_charts
from tests.workshop_support import DONE_OR_ERROR_JS, MAIN_HAS_JS, SEEN_JS, VIEWPORT, WATCH_JS

skip_module_without_browser("the Room")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

PAGE_TIMEOUT_S = 90.0
ROUND_TIMEOUT_S = 300.0  # a first round on a fresh server loads the model (and its own warm-up); seconds quiet
PROMPTS = {"presenter": "Presenter: name one mountain.", "guest": "Guest: name one ocean."}


@dataclass
class Tab:
    """One browser context, so its own Streamlit session, watched for errors (tests/workshop_support.py)."""

    page: object

    def main(self):  # noqa: ANN201 - playwright's Locator
        return self.page.locator("[data-testid='stMain']")  # type: ignore[attr-defined]

    def until_main_has(self, text: str, timeout_s: float = PAGE_TIMEOUT_S) -> None:
        """Until the page is idle and its main area holds `text`; fails at once on an error shown."""
        handle = self.page.wait_for_function(  # type: ignore[attr-defined]
            DONE_OR_ERROR_JS, arg=[MAIN_HAS_JS, text, 0], timeout=timeout_s * 1000, polling=100
        )
        assert handle.json_value() == "done", f"waiting for {text!r}: an error was shown: {self.errors()}"

    def errors(self) -> list[str]:
        return self.page.evaluate(SEEN_JS)["errors"]  # type: ignore[attr-defined]

    def submit(self, prompt: str) -> None:
        self.main().get_by_label("Your prompt", exact=True).fill(prompt)
        self.main().get_by_role("button", name="Submit my prompt").click()
        self.until_main_has("Your prompt is in round 1")


def start_round_1(presenter: Tab, new_tokens: int) -> float:
    """The presenter sets each answer's new tokens and starts round 1; returns when it clicked (time.monotonic)."""
    tokens = presenter.main().get_by_label("New tokens per answer", exact=True)
    tokens.fill(str(new_tokens))
    tokens.press("Enter")
    presenter.until_main_has("Start round 1")
    started_s = time.monotonic()
    presenter.main().get_by_role("button", name="Start round 1").click()
    return started_s


@pytest.fixture
def two_tabs(chromium: object) -> Iterator[tuple[Tab, Tab]]:
    contexts = []

    def tab() -> Tab:
        context = chromium.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]
        contexts.append(context)
        keep_to_this_machine(context)
        context.add_init_script(WATCH_JS)
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        return Tab(page)

    yield tab(), tab()
    for context in contexts:
        with contextlib.suppress(Exception):
            context.close()


def test_browser_two_sessions_in_one_room_each_see_their_own_request(
    hosted_app: HostedApp, two_tabs: tuple[Tab, Tab]
) -> None:
    presenter, guest = two_tabs
    presenter.page.goto(f"{hosted_app.url}/room")  # type: ignore[attr-defined]
    presenter.main().get_by_role("button", name="Open a room").click()
    presenter.until_main_has("You opened this room")
    code = parse_qs(urlsplit(presenter.page.url).query)["room"][0]  # type: ignore[attr-defined]
    guest.page.goto(f"{hosted_app.url}/room?room={code}")  # type: ignore[attr-defined]
    guest.until_main_has("You are participant 2")
    guest.submit(PROMPTS["guest"])
    presenter.submit(PROMPTS["presenter"])

    started_s = start_round_1(presenter, new_tokens=4)
    presenter.until_main_has("Your TTFT", ROUND_TIMEOUT_S)
    round_s = time.monotonic() - started_s
    guest.until_main_has("Your TTFT", 30.0)  # its live line redraws the page within a poll or two
    redrawn_s = time.monotonic() - started_s - round_s
    print(
        f"\n[room] round of 2 x 4 tokens: {round_s:.1f} s from Start to the presenter's result; the guest's page "
        f"{redrawn_s:.1f} s later (under load)"
    )

    for tab, mine, theirs in ((presenter, "presenter", "guest"), (guest, "guest", "presenter")):
        text = tab.main().inner_text()
        assert "Round 1: your request among 2" in text and "ITL p50 alone" in text
        assert PROMPTS[mine] in text and PROMPTS[theirs] not in text  # its own prompt, never the other's
        # vega-embed's script loads once a chart is on the page: wait for the first before counting them drawn
        tab.page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=PAGE_TIMEOUT_S * 1000)  # type: ignore[attr-defined]
        drawn, charts = wait_for_charts(tab.page, PAGE_TIMEOUT_S, at_least=3)
        assert charts >= 3 and drawn == charts, (drawn, charts)  # lanes, tokens per step, step time by batch
        assert tab.errors() == []
