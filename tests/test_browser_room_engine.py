"""A Room round served by the real vLLM (`./run vllm`, tests/vllm_support.py) in real browsers: three sessions submit
prompts, the presenter sends the round to the engine, and each page shows its own TTFT and ITL. The round's greedy
answers are checked against vLLM's answer to each prompt sent alone, asked here independently of the page: where they
are equal the page says so, where they differ the page shows the first position and how near a tie it was."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from explorer.remote import engine
from tests.browser_support import keep_to_this_machine, skip_module_without_browser, streamlit_server
from tests.test_browser_room import PAGE_TIMEOUT_S, Tab
from tests.vllm_support import real_vllm  # noqa: F401 - the session fixture
from tests.workshop_support import VIEWPORT, WATCH_JS

skip_module_without_browser("the Room on the engine")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

NEW_TOKENS = 12
PROMPTS = ("Name one mountain.", "Name one ocean.", "Name one river.")


@pytest.fixture(scope="module")
def engine_app(real_vllm: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    """The app as hosted, its operator allowing the real vLLM as the endpoint a room can be sent to."""
    log = tmp_path_factory.mktemp("room-engine") / "server.log"
    with streamlit_server(log, env={"EXPLORER_ALLOWED_ENDPOINTS": real_vllm}) as url:
        yield url


@pytest.fixture
def three_tabs(chromium: object) -> Iterator[list[Tab]]:
    contexts = []
    for _ in range(3):
        context = chromium.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]
        contexts.append(context)
        keep_to_this_machine(context)
        context.add_init_script(WATCH_JS)
    tabs = []
    for context in contexts:
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        tabs.append(Tab(page))
    yield tabs
    for context in contexts:
        with contextlib.suppress(Exception):
            context.close()


def alone_answer(base_url: str, prompt: str) -> str:
    """vLLM's greedy answer to one prompt sent alone, asked without the explorer's code."""
    body = {"model": engine.MODEL_NAME, "messages": [{"role": "user", "content": prompt}]}
    body |= {"max_tokens": NEW_TOKENS, "temperature": 0.0}
    answer = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120, trust_env=False)
    answer.raise_for_status()
    return answer.json()["choices"][0]["message"]["content"]


def test_a_room_round_of_three_served_by_vllm(
    engine_app: str,
    three_tabs: list[Tab],
    real_vllm: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    presenter, *guests = three_tabs
    presenter.page.goto(f"{engine_app}/room")  # type: ignore[attr-defined]
    presenter.main().get_by_role("button", name="Open a room").click()
    presenter.until_main_has("You opened this room")
    code = parse_qs(urlsplit(presenter.page.url).query)["room"][0]  # type: ignore[attr-defined]
    for number, guest in enumerate(guests, start=2):
        guest.page.goto(f"{engine_app}/room?room={code}")  # type: ignore[attr-defined]
        guest.until_main_has(f"You are participant {number}")
    for tab, prompt in zip(three_tabs, PROMPTS):
        tab.submit(prompt)

    tokens = presenter.main().get_by_label("New tokens per answer", exact=True)
    tokens.fill(str(NEW_TOKENS))
    tokens.press("Enter")
    presenter.until_main_has("Serve the round on the engine at")
    presenter.main().get_by_text("Serve the round on the engine at").click()
    presenter.until_main_has("Start sends every prompt of the round at once to the engine")
    presenter.main().get_by_role("button", name="Start round 1").click()

    for tab, mine in zip(three_tabs, PROMPTS):
        tab.until_main_has("served by the engine", PAGE_TIMEOUT_S * 2)
        tab.until_main_has("Your TTFT")
        text = tab.main().inner_text()
        assert "Your ITL p50" in text and "Your cached prompt tokens" in text
        assert "The engine's steps during the round: steps with a prefill chunk" in text  # from vLLM's /metrics
        assert mine in text and not any(other in text for other in PROMPTS if other != mine)  # its own prompt only
        answer = text.split("The answer: ", 1)[1].split("\n", 1)[0].strip()  # its first line, as drawn
        same = re.search(r"Same tokens alone\s+(yes|NO)", text)
        assert same is not None, text[-1500:]
        alone = alone_answer(real_vllm, mine).split("\n", 1)[0].strip()
        if same.group(1) == "yes":
            assert answer == alone, (answer, alone)  # the page's "yes" checked against vLLM asked here
            print(f"\n[room on vLLM] {mine!r}: the round's answer equals vLLM's answer alone")
        else:  # the page names the first position where they differ and how near a tie it was
            where = re.search(r"Character \d+ \(the alone answer's token|The same text, but the \w+", text)
            assert where is not None, text[-1500:]
            print(f"\n[room on vLLM] {mine!r} differs from alone: {text[where.start() :][:300]}")
        assert tab.errors() == []
    presenter.page.screenshot(path=str(tmp_path / "room-engine.png"), full_page=True)  # type: ignore[attr-defined]
