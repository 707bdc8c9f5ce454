"""Load: four browser sessions on the app as deployed (`deploy/run.sh`, hosted mode, loopback only) press Run within
one second. All finish; each page shows its own prompt's run and no other session's; the device turns of the four
runs never overlap in wall-clock time (from the server's turn log), and each turn ended with its work, before its page
was drawn; the sessions that waited showed their place in line; each waiting run's prefill is within 4x of a solo
prefill (the median of three solo runs in the same test on the same server: two before the four clicks, one after,
so a machine that got busier or quieter meanwhile moves the reference too), or its page marks it disturbed (timed
while other work ran beside it). A second test leaves the queue while another session runs.

Bounded: short prompts, 4 new tokens, every wait has a deadline. Needs Debian's chromium and `playwright`, as the
browser smoke test does.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from explorer.core.trace import Trace
from explorer.owner.line import read_turn_log
from tests.browser_support import (
    IDLE_JS,
    STARTED_SINCE_JS,
    HostedApp,
    browser_missing,
    full_screenshot,
    keep_to_this_machine,
    log_tail,
    mark_run_state,
    wait_until_rerun_done,
)

_MISSING = browser_missing()
if _MISSING:
    _REASON = f"LOAD TEST SKIPPED, concurrent sessions were NOT checked: {_MISSING}"
    warnings.warn(_REASON, stacklevel=1)
    pytest.skip(_REASON, allow_module_level=True)
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

SESSIONS = 4
NEW_TOKENS = "4"
PROMPTS = [f"Session {i}: name one {thing}." for i, thing in enumerate(["fruit", "river", "colour", "planet"])]
VIEWPORT = {"width": 1200, "height": 900}
COLD_RUN_TIMEOUT_S = 180  # the first run of a fresh server loads the model (a first-ever conversion ~20 s more)
ALL_RUNS_TIMEOUT_S = 240  # four short runs one after another, each drawing its page, on a busy 2-core machine
PAGE_TIMEOUT_S = 60
# Four clicks from one driver while four pages draw (1.06 s once in a quiet run): still well inside one run.
CLICKS_WITHIN_S = 2.0
# A waiter's prefill against the solo median: clean runs measured 0.9-1.3x; a pass timed during another page's drawing
# measured ~3x before the gate (issue 10). 2.0 failed now and then (3.4x once in a fresh-clone run: four Chromium
# sessions redraw on the same 2 cores); a slower one must be marked disturbed on its page.
PREFILL_FACTOR = 4.0
# The solo references' prompts, as long as the sessions' own.
SOLO_PROMPTS = [f"Solo {i}: name one {thing}." for i, thing in enumerate(["tree", "bird", "fish"])]
QUEUE_TEXT = ("You are next in line", "You are number")  # while waiting ("you were number n" is said after)
# Every change to the page checked for the waiting line as it happens: a wait of half a second (a Run's turn on a warm
# CPU holds the device about 0.7 s) can fall between two reads of four pages in turn.
WATCH_QUEUE_JS = """(texts) => {
  window.__sawQueue = false;
  const check = () => { if (texts.some(t => document.body.textContent.includes(t))) window.__sawQueue = true; };
  new MutationObserver(check).observe(document.body, {subtree: true, childList: true, characterData: true});
  check();
}"""
HOLDING_TEXT = "Live: each token appears"  # the live stream's caption, drawn only once a run holds the device
CONTENDED = "timed while other work used the CPU beside them"  # the app's note on a disturbed run


@dataclass
class Visitor:
    """One browser context (its own Streamlit session) and its page."""

    index: int
    page: object
    prompt: str
    saw_queue: bool = False
    clicked_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def _sidebar(page):  # noqa: ANN001, ANN202 - playwright objects
    return page.locator("[data-testid='stSidebar']")


def _fill_inputs(v: Visitor, prompt: str, tokens: str) -> None:
    """Type the prompt and the token count, committing each (blur), and wait until the reruns they cause are done."""
    sidebar = _sidebar(v.page)
    box = sidebar.get_by_label("Prompt", exact=True)
    box.wait_for()
    mark = mark_run_state(v.page)
    box.fill(prompt)
    box.blur()
    number = sidebar.get_by_label("Max new tokens", exact=True)
    number.fill(tokens)
    number.blur()
    wait_until_rerun_done(v.page, mark, PAGE_TIMEOUT_S, start_timeout_s=0.5)


def _run_alone(v: Visitor, prompt: str, timeout_s: float) -> None:
    _fill_inputs(v, prompt, NEW_TOKENS)
    mark = mark_run_state(v.page)
    _sidebar(v.page).get_by_role("button", name="Run", exact=True).click()
    wait_until_rerun_done(v.page, mark, timeout_s)


def _main_text(v: Visitor, timeout_s: float = 20.0) -> str:
    """The main area's text once it shows this visitor's own prompt (or after `timeout_s`): the page may still be
    redrawing after its run when it is read (one fresh-clone run read it mid-redraw, without the prompt)."""
    main = v.page.locator("[data-testid='stMain']")
    deadline = time.monotonic() + timeout_s
    text = main.evaluate("e => e.textContent")
    while v.prompt not in text and time.monotonic() < deadline:
        time.sleep(0.25)
        text = main.evaluate("e => e.textContent")
    return text


def _trace(v: Visitor, folder: Path) -> Trace:
    """The run the page holds, as its own sidebar download offers it."""
    with v.page.expect_download(timeout=PAGE_TIMEOUT_S * 1000) as download:
        _sidebar(v.page).get_by_role("button", name="Download trace (JSON)").click()
    path = folder / f"trace-{v.index}.json"
    download.value.save_as(path)
    return Trace.from_json(path.read_text())


def _prefill_ms(trace: Trace) -> float:
    return 1e3 * trace.prefill.wall_s


def _solo_prefill_ms(v: Visitor, prompt: str, folder: Path) -> float:
    """One run with no other session running, on the warm server: its measured prefill."""
    _run_alone(v, prompt, PAGE_TIMEOUT_S * 2)
    return _prefill_ms(_trace(v, folder))


@pytest.fixture
def site(hosted_app: HostedApp, tmp_path: Path) -> tuple[str, Path, Path]:
    """The session's app server (its turn log counts every turn, other tests' too: each test reads only its own)
    and a folder for this test's downloads and screenshots."""
    return hosted_app.url, hosted_app.turn_log, tmp_path


@pytest.fixture
def open_visitors(hosted_app: HostedApp, chromium: object) -> Iterator[Callable[[int], list[Visitor]]]:
    """Opens visitors on the session's app server, each its own browser context (its own Streamlit session) in the
    session's Chromium; their contexts are closed when the test ends, so their sessions go."""
    opened: list[Visitor] = []

    def open_visitors(count: int) -> list[Visitor]:
        opened.extend(_visitors(chromium, hosted_app.url, count))
        return opened[-count:]

    yield open_visitors
    for v in opened:
        v.page.context.close()


def _visitors(browser: object, url: str, count: int) -> list[Visitor]:
    visitors = []
    for i in range(count):
        context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)

        keep_to_this_machine(context)
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        v = Visitor(i, page, PROMPTS[i % len(PROMPTS)])
        page.on("pageerror", lambda error, v=v: v.errors.append(str(error)))
        page.goto(url, wait_until="commit")  # the pages load side by side, as visitors' browsers would
        visitors.append(v)
    for v in visitors:
        _sidebar(v.page).get_by_label("Prompt", exact=True).wait_for()
    return visitors


def test_four_sessions_at_once_take_clean_turns(
    site: tuple[str, Path, Path], open_visitors: Callable[[int], list[Visitor]], hosted_app: HostedApp
) -> None:
    _, turn_log, folder = site
    visitors = open_visitors(SESSIONS)
    try:
        # Solo references on a warm server (the first run loads the model): two now, one after the four runs. The
        # session's server is warm already where an earlier test ran on it.
        if not [t for t in read_turn_log(turn_log) if t.what == "run"]:
            _run_alone(visitors[0], "Warm up: say hi.", COLD_RUN_TIMEOUT_S)
        solo_prefills_ms = [_solo_prefill_ms(visitors[0], prompt, folder) for prompt in SOLO_PROMPTS[:2]]
        solo_turns = len(read_turn_log(turn_log))

        for v in visitors:
            _fill_inputs(v, v.prompt, NEW_TOKENS)
        marks = [mark_run_state(v.page) for v in visitors]
        for v in visitors:
            v.page.evaluate(WATCH_QUEUE_JS, list(QUEUE_TEXT))
        for v in visitors:  # four clicks, as fast as one driver can make them
            v.clicked_s = time.monotonic()
            _sidebar(v.page).get_by_role("button", name="Run", exact=True).click()
        click_spread_s = visitors[-1].clicked_s - visitors[0].clicked_s

        # Watch every page until all are idle again: who showed a place in line, and that each finished.
        deadline = time.monotonic() + ALL_RUNS_TIMEOUT_S
        done = [False] * SESSIONS
        while not all(done) and time.monotonic() < deadline:
            for i, v in enumerate(visitors):
                if done[i]:
                    continue
                text = v.page.evaluate("() => document.body.innerText")
                seen = any(t in text for t in QUEUE_TEXT) or v.page.evaluate("() => window.__sawQueue === true")
                v.saw_queue = v.saw_queue or seen
                done[i] = v.page.evaluate(STARTED_SINCE_JS, marks[i]) and v.page.evaluate(IDLE_JS)
            time.sleep(0.1)
        for i, v in enumerate(visitors):
            if not done[i]:
                full_screenshot(v.page, folder / f"session-{i}-not-done.png", **VIEWPORT)
        assert all(done), f"not finished: {[i for i, d in enumerate(done) if not d]}; {log_tail(hosted_app.log)}"

        traces = [_trace(v, folder) for v in visitors]
        texts = [_main_text(v) for v in visitors]
        turns = read_turn_log(turn_log)[solo_turns:]
        solo_prefills_ms.append(_solo_prefill_ms(visitors[0], SOLO_PROMPTS[2], folder))
    except Exception:
        for v in visitors:
            full_screenshot(v.page, folder / f"session-{v.index}-failed.png", **VIEWPORT)
        raise

    solo_ms = statistics.median(solo_prefills_ms)
    solo_text = ", ".join(f"{p:.0f}" for p in solo_prefills_ms)
    print(f"\n[load test] {SESSIONS} clicks within {click_spread_s:.2f} s")
    print(f"[load test] solo prefills {solo_text} ms, median {solo_ms:.0f} ms")
    for v, trace, text in zip(visitors, traces, texts):
        waited = text[text.find("Waited") : text.find("in line") + 7] if "Waited" in text else "did not wait"
        flagged = "flagged as contended" if CONTENDED in text else "not flagged"
        print(f"[load test] session {v.index}: prefill {_prefill_ms(trace):.0f} ms, {flagged}; {waited}")
    for t in turns:
        print(f"[load test] turn {t.number} {t.what}: waited {t.waited_s:.2f} s, held {t.held_s:.2f} s, {t.ended}")

    assert click_spread_s < CLICKS_WITHIN_S
    assert all(not v.errors for v in visitors), [v.errors for v in visitors]
    # Each page holds and shows its own run, and no other session's prompt.
    for v, trace, text in zip(visitors, traces, texts):
        assert trace.prompt_text == v.prompt
        assert v.prompt in text
        assert not [p for p in PROMPTS if p != v.prompt and p in text], f"session {v.index} shows another's prompt"
    # Serialized: four run turns, none overlapping another in wall-clock time, each given back with its work done.
    runs = [t for t in turns if t.what == "run"]
    assert len(runs) == SESSIONS, turns
    spans = sorted((t.granted_unix_s, t.released_unix_s) for t in runs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    assert all(t.ended == "released" and 1 <= t.passes <= int(NEW_TOKENS) for t in runs), runs
    # The three that waited saw their place in line while waiting, and their page says where they were.
    waiters = [v for v, text in zip(visitors, texts) if "Waited" in text]
    assert len(waiters) == SESSIONS - 1
    assert all(v.saw_queue for v in waiters), [(v.index, v.saw_queue) for v in waiters]
    places = sorted(t.first_ahead for t in runs)
    assert places == list(range(SESSIONS)), places
    # Clean timings: every waiting run's prefill within PREFILL_FACTOR of the solo median.
    ratios = {v.index: round(_prefill_ms(t) / solo_ms, 2) for v, t in zip(visitors, traces)}
    print(f"[load test] prefill / solo median, by session: {ratios}")
    flagged = {v.index for v, text in zip(visitors, texts) if CONTENDED in text}
    slow = {v.index: ratios[v.index] for v in waiters if ratios[v.index] >= PREFILL_FACTOR and v.index not in flagged}
    assert not slow, f"waiting runs' prefill over {PREFILL_FACTOR}x solo ({solo_text} ms), not marked: {slow}"


def test_a_waiting_visitor_can_leave_the_queue(
    site: tuple[str, Path, Path], open_visitors: Callable[[int], list[Visitor]]
) -> None:
    _, turn_log, folder = site
    runner, leaver = open_visitors(2)
    _run_alone(leaver, "Before: name one bird.", COLD_RUN_TIMEOUT_S)
    before = _trace(leaver, folder)
    _fill_inputs(runner, "Hold the device: count from one to twenty.", "48")
    _fill_inputs(leaver, "This should never run.", NEW_TOKENS)
    mark = mark_run_state(runner.page)
    _sidebar(runner.page).get_by_role("button", name="Run", exact=True).click()
    runner.page.wait_for_function(STARTED_SINCE_JS, arg=mark, timeout=PAGE_TIMEOUT_S * 1000)
    runner.page.get_by_text(HOLDING_TEXT).wait_for(timeout=PAGE_TIMEOUT_S * 1000)  # its run has taken the device
    _sidebar(leaver.page).get_by_role("button", name="Run", exact=True).click()
    leave = leaver.page.get_by_role("button", name="Leave the queue")
    leave.wait_for(timeout=PAGE_TIMEOUT_S * 1000)
    assert any(t in leaver.page.evaluate("() => document.body.innerText") for t in QUEUE_TEXT)
    leave.click()
    leaver.page.get_by_text("You left the queue: nothing ran.").wait_for(timeout=PAGE_TIMEOUT_S * 1000)
    wait_until_rerun_done(runner.page, mark, ALL_RUNS_TIMEOUT_S)
    leaver.page.wait_for_function(IDLE_JS, timeout=PAGE_TIMEOUT_S * 1000)
    after = _trace(leaver, folder)
    assert after.prompt_text == before.prompt_text == "Before: name one bird."  # nothing ran
    # The owner drops the job at its next look at the line (every TICK_S), which on a loaded machine can come after the
    # runner's release: the cancelled turn is waited for, not expected at once.
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    while "cancelled" not in (ended := [t.ended for t in read_turn_log(turn_log) if t.what == "run"]):
        assert time.monotonic() < deadline, ended
        time.sleep(0.2)
    assert sorted(ended[-2:]) == ["cancelled", "released"]  # the leaver's, dropped in line; the runner's
