"""A recording's own words in a real browser: a `.pdx` whose note, title, busy note, names and prompt carry a markdown
link, an external image and HTML is uploaded on the session's app server (hosted, as deployed) and opened on the
pages that show those texts. The DOM holds no `<a href>` and no `<img>` made from the file, the browser asks for none
of its URLs, and the literal text is on screen (an earlier round found the browser fetching a recording's image).

Needs Debian's chromium at /usr/bin/chromium and the `playwright` package (its own browser download is not used).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.browser_support import (
    HOST,
    HostedApp,
    mark_run_state,
    skip_module_without_browser,
    wait_until_rerun_done,
)
from tests.recording_support import hostile_text_recording

skip_module_without_browser("a recording's text")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

PAGES = ("Inside one inference", "Attention", "Cost (roofline)", "By hand")  # the prompt, the note, the busy note
TIMEOUT_S = 60
LITERAL = "![track](http://127.0.0.1:8622/t.png)"  # from tests/recording_support.py's HOSTILE, as a visitor reads it
# Anchors and images the file's text would make if it reached markdown or HTML, open shadow roots included.
FROM_THE_FILE_JS = """() => {
  const roots = [document];
  for (let i = 0; i < roots.length; i++)
    for (const el of roots[i].querySelectorAll("*")) if (el.shadowRoot) roots.push(el.shadowRoot);
  const found = [];
  for (const r of roots)
    for (const el of r.querySelectorAll("a[href*='8622'], img[src*='8622'], img[src='x'], [onerror]"))
      found.push((el.closest("[data-testid^='st']") || {dataset: {}}).getAttribute?.("data-testid") + ": " +
                 el.outerHTML.slice(0, 160));
  return found;
}"""


@pytest.fixture
def page(hosted_app: HostedApp, chromium) -> Iterator[tuple[object, list[str]]]:
    """A tab on the session's app server and every request it made for the file's URLs (none may be made)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    fetched: list[str] = []

    def only_local(route) -> None:
        url = route.request.url
        if urlsplit(url).port == 8622:
            fetched.append(url)
            route.abort()
        elif urlsplit(url).hostname == HOST or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            route.abort()

    try:
        context.route("**/*", only_local)
        tab = context.new_page()
        tab.set_default_timeout(TIMEOUT_S * 1000)
        tab.goto(hosted_app.url)
        yield tab, fetched
    finally:
        context.close()


def test_a_recordings_markdown_and_html_are_shown_as_text_in_the_browser(page: tuple[object, list[str]]) -> None:
    tab, fetched = page
    sidebar = tab.locator("[data-testid='stSidebar']")
    uploader = sidebar.locator("input[type='file']")
    uploader.wait_for(state="attached")
    mark = mark_run_state(tab)
    uploader.set_input_files(
        {"name": "hostile.pdx", "mimeType": "application/octet-stream", "buffer": hostile_text_recording()}
    )
    wait_until_rerun_done(tab, mark, TIMEOUT_S)
    tab.get_by_text("Recorded run, not live", exact=False).first.wait_for()
    links = tab.locator("[data-testid='stSidebarNavLink']")
    shown_literally = []
    for label in PAGES:
        mark = mark_run_state(tab)
        links.filter(has_text=label).first.click()
        wait_until_rerun_done(tab, mark, TIMEOUT_S)
        main = tab.locator("[data-testid='stMain']")
        assert not tab.locator("[data-testid='stException']").count(), label
        assert tab.evaluate(FROM_THE_FILE_JS) == [], label
        if LITERAL in main.inner_text().replace("\u200b", ""):  # escaping breaks a bare URL with an invisible space
            shown_literally.append(label)
    assert {"Attention", "Cost (roofline)"} <= set(shown_literally), shown_literally
    assert fetched == [], fetched
