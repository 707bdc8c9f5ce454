"""In a real browser (issue 42 §3, §4): a click away during the attention replay loses nothing, and every link lands.

1. A Run with attention capture on; while "Replaying the same tokens with eager attention…" shows, a click on another
   page in the sidebar; then Attention: within 10 s it shows the maps, or says they are on their way (the replay the
   click left running, or a new one), or offers "Capture now" (whose click gets them); then the maps. Never
   "Capturing attention…" for good.
2. `/room/CODE` lands on the Room page with the code (the page's line for that room link) and `/a/b/c` on the main
   page with Streamlit's "Page not found" line, as `/nosuchpage` does; neither is the white page it was.

One Chromium context on the session's hosted server (tests/conftest.py), reaching only this machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest

from explorer.ui.attention_view import CAPTURE_NOW, CUT_SHORT_LINE, STILL_REPLAYING_LINE
from explorer.ui.runner import REPLAYING
from tests.browser_support import (
    HostedApp,
    full_screenshot,
    keep_to_this_machine,
    log_tail,
    screenshot_folder,
    skip_module_without_browser,
)

skip_module_without_browser("a capture cut short and links with a slash")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 900}
PAGE_TIMEOUT_S = 90.0
RUN_TIMEOUT_S = 240.0  # a first run on the session's server may load the model; the machine is shared
SHOWN_WITHIN_S = 10.0  # the bound: the Attention page shows maps, or a way to get them, this soon
REPLAY_TIMEOUT_S = 120.0  # a replay the page runs again, on a busy 2-core machine
PROMPT = "Write a long story about a lighthouse keeper and the storm that came one night."
NEW_TOKENS = "48"  # a replay long enough to click during (the hosted cap is 64)
ROOM_CODE = "Y5PMA"  # no such room on the server: the Room page says so, naming the code the link carried
MAIN_TITLE = "Inside one inference"
# Maps drawn, the Capture now button, or a line saying the maps are on their way (the replay the click left running,
# or a new one): what the page shows within 10 s.
SHOWN_JS = f"""() => {{
  const main = document.querySelector("[data-testid='stMain']");
  if (!main) return false;
  if ([...main.querySelectorAll("button")].some(b => b.innerText.trim() === {CAPTURE_NOW!r})) return "button";
  const title = (main.querySelector("h1") || {{}}).innerText;
  if (title !== "Attention") return false;  // the page left behind still shows its own charts for a moment
  const fresh = [...main.querySelectorAll("[data-testid='stVegaLiteChart']")]
    .filter(c => !c.closest("[data-stale='true']"));
  if (fresh.length) return "maps";
  if (main.innerText.includes({STILL_REPLAYING_LINE!r})) return "still replaying";
  return main.innerText.includes({CUT_SHORT_LINE!r}) ? "replaying again" : false;
}}"""
# The Attention page's maps drawn: at least two charts that are not the greyed leftovers of the page before (Streamlit
# keeps a left page's elements, stale, until the new page's script run ends: the KV cache page's charts, during a
# replay), every one painted, under the Layer picker.
MAPS_DRAWN_JS = """() => {
  const main = document.querySelector("[data-testid='stMain']");
  if (!main || !main.innerText.includes("Layer")) return false;
  const charts = [...main.querySelectorAll("[data-testid='stVegaLiteChart']")]
    .filter(c => !c.closest("[data-stale='true']") && c.checkVisibility());
  return charts.length >= 2 && charts.every(c => {
    const g = c.querySelector("canvas, svg.marks");
    const r = g ? g.getBoundingClientRect() : {width: 0, height: 0};
    return r.width > 0 && r.height > 0;
  });
}"""
BODY_HAS_JS = "(text) => document.body.innerText.includes(text)"
TITLE_IS_JS = "(text) => (document.querySelector(\"[data-testid='stMain'] h1\") || {}).innerText === text"


@dataclass
class Tab:
    page: object
    url: str
    page_errors: list[str] = field(default_factory=list)

    def main_text(self) -> str:
        return self.page.locator("[data-testid='stMain']").inner_text()  # type: ignore[attr-defined]

    def link(self, label: str):  # noqa: ANN201 - playwright's Locator
        return self.page.locator("[data-testid='stSidebarNavLink']").filter(has_text=label).first  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def tab(hosted_app: HostedApp, chromium: object) -> Iterator[Tab]:
    context = chromium.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]
    try:
        keep_to_this_machine(context)
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        t = Tab(page, hosted_app.url)
        page.on("pageerror", lambda error: t.page_errors.append(str(error)))
        yield t
    finally:
        context.close()


def open_link(tab: Tab, path: str, text: str) -> None:
    """Open `path` and wait until the page shows `text` (not for idle: a server still warming up redraws its
    sidebar's line every second)."""
    page = tab.page
    page.goto(f"{tab.url}{path}")  # type: ignore[attr-defined]
    page.wait_for_selector("[data-testid='stApp']", state="attached")  # type: ignore[attr-defined]
    page.wait_for_function(BODY_HAS_JS, arg=text, timeout=PAGE_TIMEOUT_S * 1000)  # type: ignore[attr-defined]


def test_browser_a_room_link_with_a_slash_and_any_deep_path_land_with_a_line(
    tab: Tab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shots = screenshot_folder(tmp_path_factory, "links")
    page = tab.page
    open_link(tab, f"/room/{ROOM_CODE}", f"no room {ROOM_CODE}")  # the Room page's line for that room link
    assert urlsplit(page.url).path == "/room"  # type: ignore[attr-defined]  # (an unknown code leaves the link)
    full_screenshot(page, shots / "room-link-with-a-slash.png", **VIEWPORT)

    lines = {}
    for path in ("/nosuchpage", "/a/b/c", "/a/b/c/", "/attention/extra"):
        open_link(tab, path, "Page not found")
        page.wait_for_function(BODY_HAS_JS, arg=MAIN_TITLE, timeout=PAGE_TIMEOUT_S * 1000)  # type: ignore[attr-defined]
        full_screenshot(page, shots / f"{path.strip('/').replace('/', '-')}.png", **VIEWPORT)
        lines[path] = page.get_by_text("Page not found").count()  # type: ignore[attr-defined]
    assert all(count >= 1 for count in lines.values()), lines
    assert tab.page_errors == [], tab.page_errors  # the white page's module script served as HTML raised here


def test_browser_a_click_away_during_the_replay_loses_no_capture(
    tab: Tab, hosted_app: HostedApp, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shots = screenshot_folder(tmp_path_factory, "capture-cut-short")
    page = tab.page
    open_link(tab, "/", MAIN_TITLE)
    sidebar = page.locator("[data-testid='stSidebar']")  # type: ignore[attr-defined]
    prompt = sidebar.get_by_label("Prompt", exact=True)
    prompt.fill(PROMPT)
    prompt.blur()  # commits a Streamlit text area
    tokens = sidebar.get_by_label("Max new tokens", exact=True)
    tokens.fill(NEW_TOKENS)
    tokens.blur()
    assert sidebar.get_by_label("Capture attention maps", exact=True).first.is_checked()
    sidebar.get_by_role("button", name="Run", exact=True).click()
    try:
        page.get_by_text(REPLAYING, exact=False).first.wait_for(timeout=RUN_TIMEOUT_S * 1000)  # type: ignore[attr-defined]
    except Exception:
        full_screenshot(page, shots / "no-replay-seen.png", **VIEWPORT)
        raise AssertionError(f"the replay's line never showed; server log:\n{log_tail(hosted_app.log)}") from None
    tab.link("KV cache").click()  # away, during the replay
    page.wait_for_function(TITLE_IS_JS, arg="The KV cache", timeout=PAGE_TIMEOUT_S * 1000)  # type: ignore[attr-defined]
    full_screenshot(page, shots / "clicked-away.png", **VIEWPORT)

    tab.link("Attention").click()
    started = time.monotonic()
    shown = page.wait_for_function(SHOWN_JS, timeout=SHOWN_WITHIN_S * 1000, polling=100).json_value()  # type: ignore[attr-defined]
    print(f"[browser test] Attention after a click away: {shown!r} after {time.monotonic() - started:.1f} s")
    if shown == "button":
        page.get_by_role("button", name=CAPTURE_NOW).click()  # type: ignore[attr-defined]
    try:
        page.wait_for_function(MAPS_DRAWN_JS, timeout=REPLAY_TIMEOUT_S * 1000, polling=200)  # type: ignore[attr-defined]
    except Exception:
        full_screenshot(page, shots / "attention-without-maps.png", **VIEWPORT)
        raise AssertionError(f"no maps drawn on the Attention page: {tab.main_text()[:500]}") from None
    full_screenshot(page, shots / "attention-after-a-click-away.png", **VIEWPORT)
    text = tab.main_text()
    assert "Capturing attention" not in text
    assert "Layer" in text  # the picker above the maps
    assert tab.page_errors == [], tab.page_errors
