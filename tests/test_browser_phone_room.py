"""The Room on a phone (390 x 844, touch), in a real browser, with a presenter on a 1280 px laptop beside it. The
phone joins by the room's link: its prompt box and Send are in its first screen. Both send a prompt, the presenter
runs a round of 4 tokens on the embedded model, and the phone reloads (as a phone does to a tab it discarded): it is
the same participant, with the same lane and answer, and the room still counts 2 people. On both screens the lanes
chart gives each person a row of at least 20 px, no label over another, and no chart runs past its column.

With `$EXPLORER_SCREENSHOTS` set, the phone's page after the answer (room-phone.png) and the presenter's lanes chart
(room-lanes.png) are kept there."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser_support import (
    HostedApp,
    full_screenshot,
    keep_to_this_machine,
    screenshot_folder,
    skip_module_without_browser,
)
from tests.test_browser_room import PAGE_TIMEOUT_S, ROUND_TIMEOUT_S, Tab, start_round_1
from tests.workshop_support import WATCH_JS

skip_module_without_browser("the Room on a phone")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}
MIN_ROW_PX = 20
PROMPTS = {"presenter": "Presenter: name one river.", "phone": "Phone: name one colour."}
LANE_LABEL = r"^(you|participant \d+)$"

# The lanes chart (drawn as SVG) as the browser laid it out: each lane label's box, each cell's box, and the main
# column's content box; and every chart's drawing box, to check none runs past the column.
LAYOUT_JS = """(pattern) => {
  const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, top: r.top, right: r.right,
    bottom: r.bottom, width: r.width, height: r.height}; };
  const lane = new RegExp(pattern);
  const main = document.querySelector("[data-testid='stMainBlockContainer']");
  const style = getComputedStyle(main), outer = box(main);
  const column = {left: outer.left + parseFloat(style.paddingLeft),
    right: outer.right - parseFloat(style.paddingRight)};
  const drawings = [...document.querySelectorAll("[data-testid='stVegaLiteChart']")]
    .map(c => c.querySelector("canvas, svg.marks")).filter(Boolean);
  const svg = drawings.find(d => d.tagName === "svg" && [...d.querySelectorAll(".role-axis-label text")]
    .some(t => lane.test(t.textContent.trim())));
  if (!svg) return {column, charts: drawings.map(box), labels: [], cells: []};
  const labels = [...svg.querySelectorAll(".role-axis-label text")].filter(t => lane.test(t.textContent.trim()))
    .map(t => ({text: t.textContent.trim(), ...box(t)}));
  const layer = svg.querySelector(".mark-rect.role-mark");  // the cells; the outline of your row is the next layer
  const cells = layer ? [...layer.querySelectorAll("path")].map(box) : [];
  return {column, charts: drawings.map(box), labels, cells, lanes: box(svg)};
}"""


@pytest.fixture
def phone_and_laptop(chromium: object) -> Iterator[tuple[Tab, Tab]]:
    contexts = []

    def tab(**options: object) -> Tab:
        context = chromium.new_context(**options)  # type: ignore[attr-defined]
        contexts.append(context)
        keep_to_this_machine(context)
        context.add_init_script(WATCH_JS)
        page = context.new_page()
        page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        return Tab(page)

    yield tab(viewport=PHONE, is_mobile=True, has_touch=True), tab(viewport=LAPTOP)
    for context in contexts:
        with contextlib.suppress(Exception):
            context.close()


def link_params(tab: Tab) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(tab.page.url).query).items()}  # type: ignore[attr-defined]


def answer_line(tab: Tab) -> str:
    text = tab.main().inner_text()
    found = re.search(r"^The answer: .*$", text, re.MULTILINE)
    assert found, text[-2000:]
    return found.group(0)


def check_lanes(tab: Tab, people: int, where: str) -> None:
    """The lanes chart: `people` labels, each lane's cells at least `MIN_ROW_PX` tall, no label box over another,
    and every chart inside the main column."""
    tab.page.wait_for_function(  # type: ignore[attr-defined]
        f"(p) => ({LAYOUT_JS})(p).labels.length === {people}", arg=LANE_LABEL, timeout=PAGE_TIMEOUT_S * 1000
    )
    layout = tab.page.evaluate(LAYOUT_JS, LANE_LABEL)  # type: ignore[attr-defined]
    labels = sorted(layout["labels"], key=lambda b: b["top"])
    assert [b["text"] for b in labels][0] == "you", (where, labels)
    assert layout["cells"] and min(c["height"] for c in layout["cells"]) >= MIN_ROW_PX, (where, layout["cells"][:4])
    for above, below in zip(labels, labels[1:]):
        assert below["top"] >= above["bottom"] - 0.5, (where, above, below)  # no label over another
    column = layout["column"]
    for drawing in layout["charts"]:
        assert drawing["left"] >= column["left"] - 1 and drawing["right"] <= column["right"] + 1, (where, drawing)


def test_browser_a_phone_keeps_its_place_in_the_room_across_a_reload_and_its_charts_fit(
    hosted_app: HostedApp, phone_and_laptop: tuple[Tab, Tab], tmp_path_factory: pytest.TempPathFactory
) -> None:
    phone, presenter = phone_and_laptop
    shots = screenshot_folder(tmp_path_factory, "room-phone")
    presenter.page.goto(f"{hosted_app.url}/room")  # type: ignore[attr-defined]
    presenter.main().get_by_role("button", name="Open a room").click()
    presenter.until_main_has("You opened this room")
    code = link_params(presenter)["room"]

    phone.page.goto(f"{hosted_app.url}/room?room={code}")  # type: ignore[attr-defined]
    phone.until_main_has("You are participant 2")
    token = link_params(phone).get("me")
    assert token and link_params(phone)["room"] == code  # the page switched to the phone's personal link
    box = phone.main().get_by_label("Your prompt", exact=True).bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    send = phone.main().get_by_role("button", name="Submit my prompt").bounding_box()
    assert send is not None and send["y"] + send["height"] <= PHONE["height"], send  # prompt and Send, first screen
    phone.submit(PROMPTS["phone"])
    presenter.submit(PROMPTS["presenter"])

    start_round_1(presenter, new_tokens=4)
    presenter.until_main_has("Your TTFT", ROUND_TIMEOUT_S)
    phone.until_main_has("Your TTFT", 60.0)  # its live line redraws the page within a poll or two
    answer = answer_line(phone)
    assert PROMPTS["phone"] in phone.main().inner_text()
    check_lanes(phone, 2, "phone")

    phone.page.reload()  # type: ignore[attr-defined]
    phone.until_main_has("Your TTFT")
    after = phone.main().inner_text()
    assert "You are participant 2" in after and "2 people" in after, after[:600]  # the same person, counted once
    assert link_params(phone) == {"room": code, "me": token}
    assert answer_line(phone) == answer and PROMPTS["phone"] in after and PROMPTS["presenter"] not in after
    check_lanes(phone, 2, "phone, reloaded")
    full_screenshot(phone.page, shots / "room-phone.png", PHONE["width"], PHONE["height"])

    presenter.page.reload()  # type: ignore[attr-defined]  # the presenter's count too: 2 people, not 3
    presenter.until_main_has("Your TTFT")
    people = presenter.page.locator("[data-testid='stMetric']", has_text="People")  # type: ignore[attr-defined]
    assert people.inner_text().split()[-1] == "2", people.inner_text()
    check_lanes(presenter, 2, "laptop")
    lanes = presenter.page.locator("[data-testid='stVegaLiteChart']", has=presenter.page.locator("svg.marks"))  # type: ignore[attr-defined]
    lanes.first.scroll_into_view_if_needed()
    lanes.first.screenshot(path=str(shots / "room-lanes.png"))
    assert phone.errors() == [] and presenter.errors() == []
    print(f"\n[room phone] screenshots in {shots}")
