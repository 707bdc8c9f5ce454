"""Every link runs the router (`app.py`), also on a freshly started server."""

from __future__ import annotations

from streamlit.runtime.pages_manager import PagesManager


def route_every_link_through_the_app() -> None:
    """Streamlit 1.67 treats an app beside a `pages/` folder as an old-style multipage app until some session's script
    has called `st.navigation` (`PagesManager.uses_pages_directory`, process-wide). Until then a link straight to a
    page, such as a talk's slide link `/tour?recording=short-chat&presenter=1`, runs that page's file alone: no
    router, so no sidebar, no presenter mode and no recording from the link, under Streamlit's file-name navigation.
    On a freshly started server that was every visitor's view until someone opened `/`. The flag is only set while
    unset, so setting it before any session starts makes every URL run `app.py`, as its `st.navigation` would."""
    PagesManager.uses_pages_directory = False
