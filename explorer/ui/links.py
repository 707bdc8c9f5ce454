"""Every link lands: it runs the router (`app.py`), also on a freshly started server, and a path Streamlit has no page
for at any depth reaches one (`EveryLinkLands`)."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode

from starlette.middleware import Middleware
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from streamlit import config
from streamlit.runtime.pages_manager import PagesManager
from streamlit.web.server.starlette.starlette_routes import (
    BASE_ROUTE_APP_STATIC,
    BASE_ROUTE_COMPONENT,
    BASE_ROUTE_CORE,
    BASE_ROUTE_MEDIA,
    BASE_ROUTE_STATIC,
)

from explorer.ui.room_view import ROOM_PARAM

ROOM_PAGE = "room"  # the Room page's address: `st.Page("pages/room.py")` in app.py takes its file's name
# Streamlit's own many-segment routes (its static assets, the websocket and health under _stcore, media, components,
# the app's static files, login): a path holding one is never redirected, wherever it starts. At a page's path the
# front end looks for the server's base path (`/room/_stcore/health`, then `/_stcore/health`): a redirect to a page
# would answer 200 there, and it would open its websocket under the page, refused (403).
STREAMLIT_ROUTES = frozenset(
    (BASE_ROUTE_CORE, BASE_ROUTE_MEDIA, BASE_ROUTE_COMPONENT, BASE_ROUTE_STATIC, BASE_ROUTE_APP_STATIC, "auth")
)


def route_every_link_through_the_app() -> None:
    """Streamlit 1.67 treats an app beside a `pages/` folder as an old-style multipage app until some session's script
    has called `st.navigation` (`PagesManager.uses_pages_directory`, process-wide). Until then a link straight to a
    page, such as a talk's slide link `/tour?recording=short-chat&presenter=1`, runs that page's file alone: no
    router, so no sidebar, no presenter mode and no recording from the link, under Streamlit's file-name navigation.
    On a freshly started server that was every visitor's view until someone opened `/`. The flag is only set while
    unset, so setting it before any session starts makes every URL run `app.py`, as its `st.navigation` would."""
    PagesManager.uses_pages_directory = False


def landing(path: str, query: str = "", base: str = "") -> str | None:
    """Where a GET of `path` (under the server's `base` URL path) is sent instead, relative to it; None: served as is.

    Streamlit answers a path it has no file for with its index.html, whose scripts are named relative to the path:
    under `/a/b/c` they were asked for as `/a/b/static/...` and came back as HTML, a white page. A one-segment path
    loads and Streamlit says "Page not found" itself; so `/room/CODE` (the room link typed with a slash) goes to
    `/room?room=CODE`, and any other path of two or more segments to one segment that names no page (its segments
    joined by "-", which no page's name holds), where Streamlit shows the main page under its "Page not found" line,
    as for `/nosuchpage`: `/attention/extra` is as unknown as `/a/b/c`. The answer climbs one `..` per directory of the
    path, so it holds behind a proxy that strips a prefix, as Streamlit's own redirects do."""
    prefix = "/" + base.strip("/") if base.strip("/") else ""
    if prefix and not (path == prefix or path.startswith(prefix + "/")):
        return None
    within = path[len(prefix) :]  # "/a/b/c"
    if within.startswith("//"):  # Streamlit refuses a protocol-relative path itself (400)
        return None
    segments = [s for s in within.split("/") if s]
    joined = f"/{'/'.join(segments)}/"
    if len(segments) < 2 or any(f"/{route}/" in joined for route in STREAMLIT_ROUTES):
        return None  # also under a page's path: the front end probes `/room/_stcore/health` for its base path
    kept = parse_qsl(query, keep_blank_values=True)
    if segments[0] == ROOM_PAGE and len(segments) == 2:
        kept = [(k, v) for k, v in kept if k != ROOM_PARAM] + [(ROOM_PARAM, segments[1])]
    up = "../" * (within.count("/") - 1)  # from the path's directory back to the app's root
    target = ROOM_PAGE if segments[0] == ROOM_PAGE and len(segments) == 2 else "-".join(segments)
    return f"{up}{quote(target)}" + (f"?{urlencode(kept)}" if kept else "")


class EveryLinkLands:
    """ASGI middleware (`st.App(middleware=...)`, ahead of Streamlit's own): a GET or HEAD of a path Streamlit has no
    page for, of two or more segments, is redirected where it lands (`landing`); everything else passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            query = scope.get("query_string", b"").decode("latin-1")
            target = landing(scope["path"], query, config.get_option("server.baseUrlPath") or "")
            if target is not None:
                # 302 and no caching: a page added later at that path must not be hidden by a remembered redirect
                redirect = RedirectResponse(target, status_code=302, headers={"Cache-Control": "no-cache"})
                await redirect(scope, receive, send)
                return
        await self.app(scope, receive, send)


def every_link_lands() -> list[Middleware]:
    """The middleware app.py hands to `st.App`."""
    return [Middleware(EveryLinkLands)]
