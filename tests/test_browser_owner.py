"""The device owner in real browsers (issue 43, "Must show"):

1. The web tier is torch-free: after a Run clicked in a browser, the web process's `sys.modules` holds no `torch` (its
   `GET /_device` says so) and no libtorch is mapped in it, while the owner child it started has libtorch mapped; the
   web process's RSS stays under 400 MB.
2. SIGKILL to the owner during a Run, with two browser sessions open: the session whose Run it was shows the one line
   "The device restarted: run again." within 5 s; the other session's next click works; each session's earlier run
   and the opened recording are still there; the next Run and the next Prefill go to the owner the app started again.
3. Two web processes share one owner (the workshop stack of tests/test_two_web_processes.py, behind nginx): a session
   on each presses Next token on Step by step at the same moment; both get their new row, and the owner's turn log
   holds both sessions' step turns in one line, one after the other.

Each test starts its own servers (the app's own owner is a child process of its web process; EXPLORER_WARM=0, set by
tests/conftest.py, so it loads the model on the first job) and stops every process it started. Timeouts are generous
for a loaded 2-core machine; the only time bound asserted is the issue's own (the line within 5 s of the kill).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from explorer.core.device_profile import FIGURES_FILE_ENV
from explorer.hosting.client import RESTARTED
from explorer.recording.pdx import bundled
from explorer.ui.recordings import recorded_label
from tests.browser_support import (
    IDLE_JS,
    full_screenshot,
    keep_to_this_machine,
    listening_pid,
    log_tail,
    screenshot_folder,
    skip_module_without_browser,
    streamlit_server,
)
from tests.step_support import PASS_DRAWN_JS
from tests.test_two_web_processes import STICKY_COOKIE, cookies_for_each_web_process, workshop_stack

skip_module_without_browser("the device owner behind the pages")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 900}
PAGE_TIMEOUT_S = 90.0
RUN_TIMEOUT_S = 300.0  # a first job starts the owner's torch and loads the model, on a shared 2-core machine
WEB_RSS_LIMIT_MB = 400.0  # the bound for the web tier
SAYS_SO_S = 5.0  # the bound: the session whose Run it was says the device restarted within 5 s
SAME_MOMENT_S = 0.1  # the two Next token clicks land this close together
SHORT_TOKENS = "4"
LONG_TOKENS = "64"  # the hosted cap: a Run long enough to be killed in the middle of
RECORDED_BANNER_END = "Run in the sidebar makes a live run."  # the last words of a recorded run's banner
LONG_PROMPT = "Count slowly from one to fifty. " + "Read every word of this line once more, slowly. " * 16

# An element of the main area, not greyed as stale (the page a script run is replacing), whose text holds `text`.
FRESH_TEXT_JS = """(text) => {
  const main = document.querySelector("[data-testid='stMain']");
  if (!main) return false;
  return [...main.querySelectorAll("[data-testid='stElementContainer']")]
    .some(el => !el.closest("[data-stale='true']") && el.innerText.includes(text));
}"""
# The run's live tokens (explorer/ui/runner.py LiveTokens): its first token, the prefill's, has arrived.
FIRST_TOKEN_JS = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stText']")]
  .some(el => !el.closest("[data-stale='true']") && el.innerText.includes("(TTFT)"))"""
# Every alert's text in the main area, stale ones left out.
ALERTS_JS = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stAlert']")]
  .filter(el => !el.closest("[data-stale='true']")).map(el => el.innerText.trim())"""
SAYS_RESTARTED_JS = f"() => ({ALERTS_JS})().includes({RESTARTED!r})"
TITLE_IS_JS = "(text) => (document.querySelector(\"[data-testid='stMain'] h1\") || {}).innerText === text"
# Click the page's Next token button at wall-clock time `at` (ms since the epoch; every page of the one browser shares
# the clock), and keep when it was clicked: two pages scheduled for the same `at` click within a timer's jitter.
CLICK_NEXT_AT_JS = """(at) => {
  const button = document.querySelector(".st-key-step-next button");  // Next token (with its key badge)
  if (!button) return false;
  window.__clickedAt = null;
  setTimeout(() => { window.__clickedAt = Date.now(); button.click(); }, Math.max(0, at - Date.now()));
  return true;
}"""


@pytest.fixture
def figures_env(server_figures_file: Path) -> dict[str, str]:
    """The session's shared figures file: an owner measures the device once, not in every test."""
    return {FIGURES_FILE_ENV: str(server_figures_file)}


@contextlib.contextmanager
def tab(chromium: object, url: str, cookie: str | None = None) -> Iterator[object]:
    """A page in a fresh browser context (its own Streamlit session), reaching only this machine; always closed."""
    context = chromium.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]
    try:
        keep_to_this_machine(context)
        if cookie is not None:
            context.add_cookies([{"name": STICKY_COOKIE, "value": cookie, "url": url}])
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        page.goto(url)
        page.locator("[data-testid='stSidebar']").get_by_label("Prompt", exact=True).wait_for()
        page.wait_for_function(IDLE_JS, timeout=PAGE_TIMEOUT_S * 1000)
        yield page
    finally:
        context.close()


def start_run(page, prompt: str, new_tokens: str) -> None:  # noqa: ANN001 - playwright's Page
    """The sidebar's Run with `prompt` and `new_tokens`, attention capture off (the run ends with its trace)."""
    page.wait_for_function(IDLE_JS, timeout=RUN_TIMEOUT_S * 1000)
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.get_by_label("Prompt", exact=True).fill(prompt)
    sidebar.get_by_label("Max new tokens", exact=True).fill(new_tokens)
    capture = sidebar.get_by_label("Capture attention maps", exact=True).first
    if capture.is_checked():  # a Streamlit toggle: its label takes the click (Playwright's uncheck() never lands)
        sidebar.locator("label").filter(has_text="Capture attention maps").first.click()
    assert not capture.is_checked()
    sidebar.get_by_role("button", name="Run", exact=True).click()


def wait_for_run_shown(page, prompt: str) -> None:  # noqa: ANN001 - playwright's Page
    """Until the main page draws the run of `prompt` (its prompt, as typed) and the app is idle."""
    page.wait_for_function(FRESH_TEXT_JS, arg=prompt, timeout=RUN_TIMEOUT_S * 1000, polling=200)
    page.wait_for_function(IDLE_JS, timeout=RUN_TIMEOUT_S * 1000)


def run_and_wait(page, prompt: str, new_tokens: str = SHORT_TOKENS) -> None:  # noqa: ANN001 - playwright's Page
    start_run(page, prompt, new_tokens)
    wait_for_run_shown(page, prompt)


def open_page(page, label: str, title: str) -> None:  # noqa: ANN001 - playwright's Page
    page.locator("[data-testid='stSidebarNavLink']").filter(has_text=label).first.click()
    page.wait_for_function(TITLE_IS_JS, arg=title, timeout=PAGE_TIMEOUT_S * 1000)
    page.wait_for_function(IDLE_JS, timeout=RUN_TIMEOUT_S * 1000)


def main_text(page) -> str:  # noqa: ANN001 - playwright's Page
    return page.locator("[data-testid='stMain']").inner_text()


def owner_child(web_pid: int) -> psutil.Process:
    """The device owner the web process started for itself (`python -m explorer owner`, explorer/hosting/client.py)."""
    owners = []
    for child in psutil.Process(web_pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            command = " ".join(child.cmdline())
            if "explorer owner" in command and child.status() != psutil.STATUS_ZOMBIE:
                owners.append(child)
    assert len(owners) == 1, f"web process {web_pid} has {len(owners)} owner children"
    return owners[0]


def maps_libtorch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def error_lines(alerts: list[str]) -> list[str]:
    """The alerts that say something failed (a "Disturbed" or "under load" warning about a run's timing is not one)."""
    return [t for t in alerts if any(word in t for word in ("restarted", "failed", "refused", "Error"))]


def device_answer(url: str) -> dict:
    return httpx.get(f"{url}/_device", timeout=30).json()


# --- 1. the web tier never imports torch -----------------------------------------------------------------------------
def test_browser_a_run_leaves_the_web_process_torch_free_and_small(
    chromium, figures_env: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:  # noqa: ANN001 - playwright's Browser
    log = tmp_path / "server.log"
    prompt = "Name one colour of the sky."
    with streamlit_server(log, env=figures_env) as url, tab(chromium, url) as page:
        web_pid = listening_pid(url)
        assert web_pid is not None
        try:
            run_and_wait(page, prompt)
        except Exception as exc:
            full_screenshot(page, screenshot_folder(tmp_path_factory, "owner-torch-free") / "no-run.png", **VIEWPORT)
            raise AssertionError(f"the run never showed: {exc}\n{main_text(page)[:400]}\n{log_tail(log)}") from None
        answer = device_answer(url)
        owner = owner_child(web_pid)
        owner_has_torch = maps_libtorch(owner.pid)
        web_has_libtorch = maps_libtorch(web_pid)
        rss_mb = psutil.Process(web_pid).memory_info().rss / 2**20
        owner_rss_mb = owner.memory_info().rss / 2**20
    print(
        f"\n[torch-free web tier] after a Run: web process {web_pid} RSS {rss_mb:.0f} MB (measured), torch in its "
        f"sys.modules: {answer['torch_loaded']}; owner {owner.pid} RSS {owner_rss_mb:.0f} MB, libtorch mapped: "
        f"{owner_has_torch}"
    )
    assert answer["ok"] is True and answer["owner_pid"] == owner.pid, answer
    assert answer["torch_loaded"] is False, answer  # the web tier never imported torch ...
    assert not web_has_libtorch  # ... nor loaded its library some other way
    assert owner_has_torch  # the owner, its child, ran the model
    assert rss_mb < WEB_RSS_LIMIT_MB, f"the web process holds {rss_mb:.0f} MB after one Run"


# --- 2. an owner killed during a Run, two sessions open --------------------------------------------------------------
def test_browser_an_owner_killed_during_a_run_loses_that_run_and_nothing_else(
    chromium, figures_env: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:  # noqa: ANN001 - playwright's Browser
    shots = screenshot_folder(tmp_path_factory, "owner-killed")
    log = tmp_path / "server.log"
    a_prompt, b_prompt, a_next_prompt = "A asks: name a tree.", "B asks: name a river.", "A again: name a bird."
    recording = next(iter(bundled()))  # the sidebar's first bundled recording, its default choice
    with (
        streamlit_server(log, env=figures_env) as url,
        tab(chromium, url) as a,
        tab(chromium, url) as b,
    ):
        web_pid = listening_pid(url)
        assert web_pid is not None
        try:
            # Each session's earlier run, and a recording opened in A from the sidebar.
            run_and_wait(a, a_prompt)
            run_and_wait(b, b_prompt)
            sidebar = a.locator("[data-testid='stSidebar']")
            open_it = sidebar.get_by_role("button", name="Open this recording")
            if not open_it.is_visible():  # its expander, open at the session's start, may have stayed open
                sidebar.get_by_text("Open a recording", exact=True).click()
            open_it.click()
            a.get_by_text("Recorded run, not live", exact=False).first.wait_for(timeout=PAGE_TIMEOUT_S * 1000)
            a.wait_for_function(IDLE_JS, timeout=PAGE_TIMEOUT_S * 1000)

            # A's long Run; the owner is killed as its first token streams.
            first = owner_child(web_pid)
            start_run(a, LONG_PROMPT, LONG_TOKENS)
            a.wait_for_function(FIRST_TOKEN_JS, timeout=RUN_TIMEOUT_S * 1000, polling=50)
            os.kill(first.pid, signal.SIGKILL)
            killed_s = time.monotonic()
            a.wait_for_function(SAYS_RESTARTED_JS, timeout=RUN_TIMEOUT_S * 1000, polling=50)
            said_s = time.monotonic() - killed_s
            a.wait_for_function(IDLE_JS, timeout=PAGE_TIMEOUT_S * 1000)
            a_alerts = a.evaluate(ALERTS_JS)
            full_screenshot(a, shots / "a-after-the-kill.png", **VIEWPORT)

            # B's next click: another page, drawn without the device.
            open_page(b, "Step by step", "Step by step")
            b_step_text = main_text(b)

            # The owner the app started again.
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while (answer := device_answer(url)).get("ok") is not True or answer["owner_pid"] == first.pid:
                assert time.monotonic() < deadline, f"no new owner answered: {answer}\n{log_tail(log)}"
                time.sleep(0.5)

            # Each session's earlier run and A's recording, kept by the web tier, not by the owner that died.
            open_page(a, "Compare two runs", "Compare two runs")
            a_compare = main_text(a)
            full_screenshot(a, shots / "a-compare.png", **VIEWPORT)
            open_page(b, "Inside one inference", "Inside one inference")
            b_run = b.evaluate(FRESH_TEXT_JS, b_prompt)

            # The next Run (A) and the next step (B) go to the new owner.
            open_page(a, "Inside one inference", "Inside one inference")
            run_and_wait(a, a_next_prompt)
            a_next_alerts = a.evaluate(ALERTS_JS)
            open_page(b, "Step by step", "Step by step")
            main = b.locator("[data-testid='stMain']")
            main.get_by_label("Prompt", exact=True).fill("B steps: name a hill.")
            main.get_by_role("button", name="Prefill").click()
            b.wait_for_function(PASS_DRAWN_JS, arg=0, timeout=RUN_TIMEOUT_S * 1000)
            full_screenshot(b, shots / "b-prefill-after.png", **VIEWPORT)
            second = owner_child(web_pid)
            restarts = device_answer(url)["restarts"]
        except Exception as exc:
            for name, page in (("a", a), ("b", b)):
                full_screenshot(page, shots / f"{name}-failed.png", **VIEWPORT)
            raise AssertionError(
                f"{exc}\nA: {main_text(a)[:600]}\nB: {main_text(b)[:600]}\nserver log:\n{log_tail(log)}"
            ) from None
    print(
        f"\n[owner killed] A's page said {RESTARTED!r} {said_s:.2f} s after the SIGKILL (measured); owner "
        f"{first.pid} -> {second.pid}, restarts {restarts}; A's alerts then {a_alerts}"
    )
    assert said_s <= SAYS_SO_S, f"A's page said the device restarted {said_s:.1f} s after the kill"
    # The one line, and A's current run still the recording it opened (its banner): nothing else.
    assert [t for t in a_alerts if "restarted" in t] == [RESTARTED], a_alerts
    assert len(a_alerts) == 2 and any(t.endswith(RECORDED_BANNER_END) for t in a_alerts), a_alerts
    assert "Prefill" in b_step_text and "restarted" not in b_step_text  # B's click drew its page, no error
    # A: its earlier run and the recording, the two Compare sets side by side
    assert recorded_label(recording) in a_compare, a_compare[:600]
    assert f"run 1: {a_prompt[:24]}" in a_compare, a_compare[:600]
    assert LONG_PROMPT[:24] not in a_compare, a_compare[:600]  # the killed Run was lost, and only it
    assert b_run, "B's earlier run is no longer its current run"
    assert error_lines(a_next_alerts) == [], a_next_alerts  # the next Run ran
    assert second.pid != first.pid and restarts == 1


# --- 3. two web processes, one owner, one line -----------------------------------------------------------------------
def prefill(page, prompt: str) -> None:  # noqa: ANN001 - playwright's Page
    """Step by step, `prompt`, Prefill, until pass 0 is drawn."""
    open_page(page, "Step by step", "Step by step")
    main = page.locator("[data-testid='stMain']")
    main.get_by_label("Prompt", exact=True).fill(prompt)
    main.get_by_role("button", name="Prefill").click()
    page.wait_for_function(PASS_DRAWN_JS, arg=0, timeout=RUN_TIMEOUT_S * 1000)
    page.wait_for_function(IDLE_JS, timeout=RUN_TIMEOUT_S * 1000)


def test_browser_two_web_processes_step_at_once_in_one_line(
    chromium, figures_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:  # noqa: ANN001 - playwright's Browser
    folder = tmp_path_factory.mktemp("workshop-stack-steps")
    shots = screenshot_folder(tmp_path_factory, "owner-two-web-processes")
    with workshop_stack(folder, env=figures_env) as stack:
        cookies = cookies_for_each_web_process(stack)
        (pid_1, cookie_1), (pid_2, cookie_2) = cookies.items()
        with tab(chromium, stack.url, cookie_1) as one, tab(chromium, stack.url, cookie_2) as two:
            try:
                prefill(one, "One steps: name a fruit.")
                prefill(two, "Two steps: name a city.")
                before = len(stack.owner.turns())
                at = one.evaluate("() => Date.now()") + 500
                assert one.evaluate(CLICK_NEXT_AT_JS, at) and two.evaluate(CLICK_NEXT_AT_JS, at)
                for page in (one, two):
                    page.wait_for_function(PASS_DRAWN_JS, arg=1, timeout=RUN_TIMEOUT_S * 1000)
                    page.wait_for_function(IDLE_JS, timeout=RUN_TIMEOUT_S * 1000)
                clicked = [page.evaluate("() => window.__clickedAt") for page in (one, two)]
                for name, page in (("one", one), ("two", two)):
                    full_screenshot(page, shots / f"{name}-next-token.png", **VIEWPORT)
                alerts = [page.evaluate(ALERTS_JS) for page in (one, two)]
            except Exception as exc:
                for name, page in (("one", one), ("two", two)):
                    full_screenshot(page, shots / f"{name}-failed.png", **VIEWPORT)
                logs = "\n".join(f"{p.name}:\n{log_tail(p, 1500)}" for p in sorted(folder.glob("*.log")))
                raise AssertionError(
                    f"{exc}\none: {main_text(one)[:400]}\ntwo: {main_text(two)[:400]}\n{logs}"
                ) from None
        turns = stack.owner.turns()[before:]
    steps = sorted((t for t in turns if t["what"] == "step"), key=lambda t: t["granted_unix_s"])
    gap_s = abs(clicked[0] - clicked[1]) / 1e3
    print(
        f"\n[two web processes] web pids {pid_1}, {pid_2}; clicks {gap_s * 1e3:.0f} ms apart; step turns "
        + "; ".join(
            f"{t['owner']} waited {t['waited_s']:.3f} s, held {t['granted_unix_s']:.3f}-{t['released_unix_s']:.3f}"
            for t in steps
        )
    )
    assert gap_s <= SAME_MOMENT_S, f"the two clicks were {gap_s:.3f} s apart"
    assert [error_lines(a) for a in alerts] == [[], []], alerts  # (a "Disturbed" warning may be there: two passes)
    assert len(steps) == 2 and steps[0]["owner"] != steps[1]["owner"], steps  # one step of each session, one line
    first, second = steps
    # In one line: the second was granted only once the first had given the device back (its wait, if any, printed).
    assert second["granted_unix_s"] >= first["released_unix_s"], steps
