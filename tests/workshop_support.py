"""A workshop on one server, driven from one headless Chromium: N browser sessions at once (one context each, run side
by side with asyncio), each doing what an attendee does:

1. opens the app;
2. on Step by step, types its own prompt and presses Prefill, then Next token 3 times (one pass per click), noting
   after each the page's own "Last ITL" and whether it marked that pass as disturbed;
3. presses Run in the sidebar with its own prompt (4 new tokens), and sees its run on "Inside one inference";
4. opens the Tour from a recording link (`/tour?recording=short-chat`), a new session in the same tab.

Every document a session opens carries a watcher (WATCH_JS) that notes, every 100 ms in the page itself, the queue's
place-in-line line ("You are next in line", "You are number n in line"), the "Waited x s ... you were number n in
line" caption a turn leaves, and any error line (`st.error`) or exception element (`st.exception`): short waits and
short-lived errors are seen even while the driver is busy with another session.

Used by `benchmarks/workshop.py` (8 sessions, figures printed) and `tests/test_workshop.py` (fewer, asserted): one
driver. Every wait has a deadline; pages reach only 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from explorer.teach.tour import TITLES
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS, HOST, IDLE_JS

RECORDING = "short-chat"  # a bundled recording: the Tour opens on it with no model and no device
STEP_PASSES = 4  # Prefill, then Next token 3 times
RUN_NEW_TOKENS = "4"
VIEWPORT = {"width": 1200, "height": 900}
QUEUE_TEXTS = ("You are next in line", "You are number")  # the live line while a session waits for the device
# The caption a turn that waited leaves on the page (explorer/ui/device_link.py): the server's own measure of the wait.
WAITED = re.compile(
    r"Waited (\d+(?:\.\d+)?) s for the device while other sessions used it \(you were number (\d+) in line"
)

# Installed in every document (add_init_script): polls the page every 100 ms and keeps every distinct queue line,
# place in line ("You are number 3 in line"), waited caption, error line and exception it saw, and whether the main
# area said it waits for the server's warm-up.
WATCH_JS = """(() => {
  const seen = window.__workshop = {queue: [], waited: [], warming: [], errors: []};
  const keep = (list, text) => { if (text && !list.includes(text)) list.push(text); };
  setInterval(() => {
    for (const el of document.querySelectorAll("[data-testid='stAlert'], [data-testid='stCaptionContainer']")) {
      const text = el.innerText || "";
      const place = text.match(/You are (next in line|number \\d+ in line)/);
      if (place) keep(seen.queue, place[0]);
      if (text.includes("for the device while other sessions used it")) keep(seen.waited, text);
    }
    for (const el of document.querySelectorAll(
        "[data-testid='stMain'] [data-testid='stAlert'], [data-testid='stMain'] [data-testid='stProgress']")) {
      // a job waiting for the warm-up: the owner's progress line ("The device is warming up: …") or an alert
      if (/warming up/i.test(el.innerText || "")) keep(seen.warming, "Warming up");
    }
    for (const el of document.querySelectorAll(
        "[data-testid='stException'], [data-testid='stAlertContentError']")) keep(seen.errors, el.innerText);
  }, 100);
})()"""
SEEN_JS = "() => window.__workshop || {queue: [], waited: [], warming: [], errors: []}"
# What the driver waits on: "error" as soon as a new error is seen (more than `before`), "done" once the page is idle
# and `cond` holds. Each condition holds only after its action (a new pass count, a new text): no stale "idle" passes.
DONE_OR_ERROR_JS = (
    """([cond, arg, before]) => {
  if (window.__workshop && window.__workshop.errors.length > before) return "error";
  const idle = ("""
    + IDLE_JS.strip()
    + """)();
  return idle && new Function("arg", cond)(arg) ? "done" : false;
}"""
)
PASSES_JS = """const m = [...document.querySelectorAll("[data-testid='stMetric']")]
  .find(e => (e.querySelector("[data-testid='stMetricLabel']") || {}).innerText === "Passes");
return !!m && m.querySelector("[data-testid='stMetricValue']").innerText.trim().split(" ")[0] === String(arg);"""
MAIN_HAS_JS = """const main = document.querySelector("[data-testid='stMain']");
return !!main && main.textContent.includes(arg);"""
# After a Next token: the page's "Last ITL" (`explorer.charts.step_mode.running_figures`) and its newest pass's line.
NEWEST_PASS_JS = """() => {
  const m = [...document.querySelectorAll("[data-testid='stMetric']")]
    .find(e => (e.querySelector("[data-testid='stMetricLabel']") || {}).innerText === "Last ITL");
  const line = document.querySelector(".st-key-step-first-screen [data-testid='stMarkdownContainer']");
  return {itl: m ? m.querySelector("[data-testid='stMetricValue']").innerText : "", line: line ? line.innerText : ""};
}"""
TOUR_JS = """const main = document.querySelector("[data-testid='stMain']");
const h = main && main.querySelector("h1");
const drawn = main && main.querySelector("[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg");
return !!h && h.innerText.trim() === arg && !!drawn;"""
ANY_JS = "return true;"


class StageFailed(Exception):
    """A stage of a session did not reach its result (a timeout, or an error shown on the page)."""


@dataclass
class Visit:
    """One attendee: what its browser session did, saw and ended with."""

    index: int
    prompt: str
    stages: dict[str, float] = field(default_factory=dict)  # stage -> seconds it took, for those that finished
    failures: list[str] = field(default_factory=list)  # stage: why it did not finish
    queue_lines: list[str] = field(default_factory=list)  # the place-in-line lines seen while waiting
    waits: list[tuple[float, int]] = field(default_factory=list)  # (seconds waited, place in line) per waited turn
    saw_warming: bool = False  # a device action said it waits for the server's warm-up
    errors: list[str] = field(default_factory=list)  # error lines and exceptions shown, any page
    page_errors: list[str] = field(default_factory=list)  # uncaught JavaScript errors
    seconds: float = 0.0
    itl_ms: list[float] = field(default_factory=list)  # each Next token's "Last ITL", as its page showed it
    disturbed: list[bool] = field(default_factory=list)  # whether its page marked that pass as disturbed

    @property
    def ok(self) -> bool:
        return not self.failures and not self.errors and not self.page_errors

    @property
    def waited(self) -> bool:
        return bool(self.waits)

    @property
    def showed_place(self) -> bool:
        return bool(self.queue_lines)

    def line(self) -> str:
        waits = ", ".join(f"{s:.1f} s (number {n})" for s, n in self.waits) or "none"
        stages = " · ".join(f"{k} {v:.1f} s" for k, v in self.stages.items())
        problems = "; ".join(self.failures + self.errors + self.page_errors) or "none"
        return (
            f"session {self.index}: {'ok' if self.ok else 'FAILED'} in {self.seconds:.1f} s; waits {waits}; "
            f"place shown {'yes' if self.showed_place else 'no'}{'; warm-up wait shown' if self.saw_warming else ''}; "
            f"{stages}; errors {len(self.errors)}: {problems}"
        )


def shown_ms(text: str) -> float | None:
    """A time as `explorer.core.units.short_time` shows it ("87 ms", "1.44 s"), in milliseconds."""
    found = re.fullmatch(r"([\d.]+) (ms|s)", text.strip())
    if not found:
        return None
    return float(found.group(1)) * (1.0 if found.group(2) == "ms" else 1e3)


def session_prompt(index: int) -> str:
    things = ["fruit", "river", "colour", "planet", "tree", "bird", "metal", "city", "flower", "ocean"]
    return f"Attendee {index}: name one {things[index % len(things)]}."


class _Session:
    def __init__(self, browser: object, url: str, visit: Visit, timeout_s: float) -> None:
        self.browser, self.url, self.visit, self.timeout_s = browser, url, visit, timeout_s
        self.page: object = None

    async def open(self) -> None:
        context = await self.browser.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]

        async def only_local(route) -> None:  # noqa: ANN001 - never let a page reach past this machine
            url = route.request.url
            local = urlsplit(url).hostname == HOST or url.startswith(("data:", "blob:"))
            await (route.continue_() if local else route.abort())

        await context.route("**/*", only_local)
        await context.add_init_script(WATCH_JS)
        self.page = await context.new_page()
        self.page.set_default_timeout(self.timeout_s * 1000)
        self.page.on("pageerror", lambda error: self.visit.page_errors.append(str(error)[:300]))

    async def close(self) -> None:
        if self.page is not None:
            with contextlib.suppress(Exception):
                await self.harvest()
            with contextlib.suppress(Exception):
                await self.page.context.close()

    async def harvest(self) -> None:
        """Keep what this document's watcher saw (a navigation starts a new document and a new watcher)."""
        seen = await self.page.evaluate(SEEN_JS)
        for text in seen["queue"]:
            if text not in self.visit.queue_lines:
                self.visit.queue_lines.append(text)
        for text in seen["waited"]:
            found = WAITED.search(text)
            wait = (float(found.group(1)), int(found.group(2))) if found else (0.0, 0)
            if found and wait not in self.visit.waits:
                self.visit.waits.append(wait)
        self.visit.saw_warming = self.visit.saw_warming or bool(seen["warming"])
        for text in seen["errors"]:
            if text[:300] not in self.visit.errors:
                self.visit.errors.append(text[:300])

    async def errors_shown(self) -> int:
        return await self.page.evaluate("() => window.__workshop ? window.__workshop.errors.length : 0")

    async def until(self, cond_js: str, arg: object, what: str, before: int | None = None) -> None:
        """Wait until the page is idle and `cond_js` holds; StageFailed on an error shown (beyond the `before` this
        document showed already) or at the deadline."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        before = await self.errors_shown() if before is None else before
        try:
            handle = await self.page.wait_for_function(
                DONE_OR_ERROR_JS, arg=[cond_js, arg, before], timeout=self.timeout_s * 1000, polling=100
            )
            state = await handle.json_value()
        except PlaywrightTimeout:
            state = "timeout"
        await self.harvest()
        if state != "done":
            raise StageFailed(f"{what}: {'error shown' if state == 'error' else f'not done in {self.timeout_s:.0f} s'}")

    async def click_and_wait(self, locator: object, cond_js: str, arg: object, what: str) -> None:
        before = await self.errors_shown()
        await locator.click()  # type: ignore[attr-defined]
        await self.until(cond_js, arg, what, before)

    # --- the stages ------------------------------------------------------------------------------------------------
    async def opens_the_app(self) -> None:
        await self.page.goto(self.url)
        await self.page.locator("[data-testid='stSidebarNavLink']").filter(has_text="Step by step").wait_for()
        await self.until(ANY_JS, None, "open the app")

    async def steps(self) -> None:
        link = self.page.locator("[data-testid='stSidebarNavLink']").filter(has_text="Step by step")
        prefill = self.page.locator("[data-testid='stMain']").get_by_role("button", name="Prefill")
        await link.click()
        await prefill.wait_for()
        await self.until(ANY_JS, None, "open Step by step")
        box = self.page.locator("[data-testid='stMain']").get_by_label("Prompt", exact=True)
        await box.fill(self.visit.prompt)
        await self.click_and_wait(prefill, PASSES_JS, 1, "Prefill")
        next_token = self.page.locator("[data-testid='stMain']").get_by_role("button", name="Next token")
        for passes in range(2, STEP_PASSES + 1):
            await self.click_and_wait(next_token, PASSES_JS, passes, f"Next token ({passes} passes)")
            newest = await self.page.evaluate(NEWEST_PASS_JS)
            itl_ms = shown_ms(newest["itl"])
            if itl_ms is not None:
                self.visit.itl_ms.append(itl_ms)
                self.visit.disturbed.append("disturbed" in newest["line"])
        await self.until(MAIN_HAS_JS, self.visit.prompt.split()[-1].rstrip("."), "Step shows its own prompt")

    async def runs(self) -> None:
        sidebar = self.page.locator("[data-testid='stSidebar']")
        await sidebar.get_by_label("Prompt", exact=True).fill(self.visit.prompt)
        tokens = sidebar.get_by_label("Max new tokens", exact=True)
        await tokens.fill(RUN_NEW_TOKENS)
        await tokens.blur()
        await self.click_and_wait(
            sidebar.get_by_role("button", name="Run", exact=True), MAIN_HAS_JS, "(TTFT)", "Run (sidebar)"
        )
        link = self.page.locator("[data-testid='stSidebarNavLink']").filter(has_text="Inside one inference")
        await self.click_and_wait(link, MAIN_HAS_JS, self.visit.prompt, "Inside one inference shows its own run")

    async def tours(self) -> None:
        await self.harvest()  # the Tour's link opens a new document: keep what this one saw
        await self.page.goto(f"{self.url}/tour?recording={RECORDING}")
        await self.until(TOUR_JS, TITLES[0], f"Tour from ?recording={RECORDING}")

    async def attend(self, only: tuple[str, ...] | None = None) -> Visit:
        """Every stage in order (`only`: those named)."""
        started = time.monotonic()
        stages: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            (name, stage)
            for name, stage in (
                ("open", self.opens_the_app),
                ("step", self.steps),
                ("run", self.runs),
                ("tour", self.tours),
            )
            if only is None or name in only
        ]
        try:
            await self.open()
            for name, stage in stages:
                began = time.monotonic()
                try:
                    await stage()
                    self.visit.stages[name] = time.monotonic() - began
                except StageFailed as exc:
                    self.visit.failures.append(str(exc))
                    if name == "open":
                        break
        except Exception as exc:  # noqa: BLE001 - one session's driver failure is its result, the others go on
            self.visit.failures.append(f"driver: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            await self.close()
            self.visit.seconds = time.monotonic() - started
        return self.visit


def browser_processes() -> list[object]:
    """Every Chromium process this process started (through Playwright's driver)."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "chrom" in proc.name().lower():
                found.append(proc)
    return found


def browser_niceness() -> list[int]:
    """The nice value of every thread of every Chromium process this process started, sorted, each value once."""
    import psutil

    seen = set()
    for proc in browser_processes():
        for tid in thread_ids(proc.pid):  # type: ignore[attr-defined]
            with contextlib.suppress(psutil.Error):
                seen.add(psutil.Process(tid).nice())
    return sorted(seen)


def lower_browsers(nice: int) -> int:
    """Every thread of every Chromium process this process started at `nice` at least; how many were lowered.

    Why threads, and again and again: Chromium sets its own threads' and renderers' nice values (-8 for its display
    threads, 5 for a background renderer, where it may), over what it inherited, and Linux keeps a nice value per
    thread; so the benchmark lowers them while the browsers run (`--nice-browsers`)."""
    import psutil

    lowered = 0
    for proc in browser_processes():
        for tid in thread_ids(proc.pid):  # type: ignore[attr-defined]
            with contextlib.suppress(psutil.Error, OSError):
                thread = psutil.Process(tid)
                if thread.nice() < nice:
                    thread.nice(nice)
                    lowered += 1
    return lowered


def thread_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


async def _workshop(url: str, sessions: int, stage_timeout_s: float, only: tuple[str, ...] | None) -> list[Visit]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            visits = [Visit(i, session_prompt(i)) for i in range(sessions)]
            attending = (_Session(browser, url, v, stage_timeout_s).attend(only) for v in visits)
            return list(await asyncio.gather(*attending))
        finally:
            await browser.close()


def run_workshop(
    url: str,
    sessions: int,
    stage_timeout_s: float = 180.0,
    only: tuple[str, ...] | None = None,
    nice: int = 0,
) -> list[Visit]:
    """N sessions at once on the server at `url`, each attending the whole workshop (`only`: the stages named, e.g.
    ("open", "step") for one person stepping alone); their visits, in order.

    Runs in a thread of its own with its own event loop and Chromium, so that it works beside Playwright's sync API
    (the tests' shared browser) in the caller's thread. `nice` > 0 lowers that thread's priority before Playwright
    starts, so its driver and every Chromium process inherit it (Linux: a thread's nice value is its own, and a
    child's is its parent thread's): a room's browsers run on their own machines, not beside the server."""

    def attend() -> list[Visit]:
        if nice > 0:
            os.nice(nice)  # this worker thread only; it ends with the pool
        return asyncio.run(_workshop(url, sessions, stage_timeout_s, only))

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(attend).result()
