"""Every link lands (issue 42 §4): `/room/CODE` goes to the Room page with its code, any other path Streamlit has no
page for, at any depth, to one segment that names no page (Streamlit then shows the main page under its own "Page not
found" line, as for `/nosuchpage`), and a
`?slide=` outside the tour opens the nearest slide and says which slides exist. Streamlit's own routes pass untouched.
"""

from __future__ import annotations

import asyncio

import pytest

from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace
from explorer.teach import tour
from explorer.ui import state as ui_state
from explorer.ui import tour_view
from explorer.ui.links import EveryLinkLands, landing
from explorer.ui.room_view import ROOM_PARAM
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        ("/room/Y5PMA", "", f"../room?{ROOM_PARAM}=Y5PMA"),
        ("/room/Y5PMA/", "", f"../../room?{ROOM_PARAM}=Y5PMA"),  # from the directory `/room/Y5PMA/`, two up
        ("/room/Y5PMA", "presenter=1&room=OLD", f"../room?presenter=1&{ROOM_PARAM}=Y5PMA"),  # the path's code wins
        ("/room/a b&x=y", "", f"../room?{ROOM_PARAM}=a+b%26x%3Dy"),  # a code is a value, never more parameters
        ("/a/b/c", "", "../../a-b-c"),
        ("/a/b/c/", "x=1", "../../../a-b-c?x=1"),
        ("/attention/extra", "", "../attention-extra"),  # a page's name with more after it is no page
        ("/room/A/B", "", "../../room-A-B"),
    ],
)
def test_a_path_of_several_segments_goes_where_it_lands(path: str, query: str, expected: str) -> None:
    assert landing(path, query) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/nosuchpage",  # one segment: Streamlit loads and says "Page not found" itself
        "/room",
        "/_stcore/health",
        "/_stcore/stream",
        "/_stcore/upload_file/s/f",
        "/static/js/index.js",
        "/media/abc.png",
        "/component/some.component/index.html",
        "/app/static/picture.png",
        "/auth/login",
        "/room/_stcore/health",  # the front end's probe for its base path at a page's address: Streamlit's 404 stands
        "/a/b/_stcore/host-config",
        "/room/static/js/index.js",
        "//example.com/x",  # Streamlit refuses a protocol-relative path itself
    ],
)
def test_streamlits_own_routes_and_one_segment_paths_pass_untouched(path: str) -> None:
    assert landing(path) is None


def test_under_a_base_url_path_the_segments_count_from_it() -> None:
    assert landing("/explorer/room/AB", "", "/explorer/") == f"../room?{ROOM_PARAM}=AB"
    assert landing("/explorer/a/b", "", "explorer") == "../a-b"
    assert landing("/explorer/_stcore/health", "", "explorer") is None
    assert landing("/explorer/attention", "", "explorer") is None
    assert landing("/elsewhere/a/b", "", "explorer") is None  # not this app's


def answer(path: str, method: str = "GET", query: bytes = b"") -> tuple[list[dict], list[str]]:
    """What the middleware sends for one request, and the paths that reached the app behind it."""
    reached: list[str] = []
    sent: list[dict] = []

    async def app(scope: dict, _receive: object, _send: object) -> None:
        reached.append(scope["path"])

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": []}
    asyncio.run(EveryLinkLands(app)(scope, receive, send))
    return sent, reached


def test_the_middleware_redirects_a_get_and_passes_everything_else() -> None:
    sent, reached = answer("/room/Y5PMA", query=b"presenter=1")
    assert reached == [] and sent[0]["status"] == 302
    headers = dict(sent[0]["headers"])
    assert headers[b"location"] == f"../room?presenter=1&{ROOM_PARAM}=Y5PMA".encode()
    assert headers[b"cache-control"] == b"no-cache"
    for path, method in (("/a/b/c", "POST"), ("/nosuchpage", "GET"), ("/static/js/index.js", "GET")):
        sent, reached = answer(path, method)
        assert sent == [] and reached == [path]


# --- ?slide= ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "index", "asked"),
    [("99999", tour.SLIDE_COUNT - 1, "slide 99999"), ("0", 0, "slide 0"), ("-3", 0, "slide -3"), ("abc", 0, "“abc”")],
)
def test_a_slide_outside_the_tour_opens_the_nearest_and_says_which_exist(raw: str, index: int, asked: str) -> None:
    wanted, said = tour_view.nearest_slide(raw)
    assert wanted == index
    assert said.startswith(f"The tour has slides 1–{tour.SLIDE_COUNT}: opened slide {index + 1}") and asked in said
    assert tour_view.nearest_slide("3") == (2, "")


@pytest.fixture
def a_run(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("slides", max_new_tokens=3))


def test_slide_99999_opens_the_last_slide_and_says_which_slides_exist(a_run: Trace) -> None:
    result = ui_state.RunResult(a_run, None, "Attention capture was off for this run.", "run 1: slides")
    at = open_page("pages/tour.py", result)
    at.query_params["slide"] = "99999"
    at.run()
    assert not at.exception and at.title[0].value == tour.TITLES[-1]
    said = [t.value.replace("\\", "") for t in at.toast]
    assert said == [
        f"The tour has slides 1–{tour.SLIDE_COUNT}: opened slide {tour.SLIDE_COUNT} (the link asked for slide 99999)."
    ]
    assert at.query_params["slide"] == str(tour.SLIDE_COUNT)  # the link now names the slide shown
    at.run()  # said once, when the link lands
    assert not at.toast and at.title[0].value == tour.TITLES[-1]
