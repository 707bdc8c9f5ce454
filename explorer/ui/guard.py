"""A page's unexpected error as one line for the visitor and its whole traceback in the server's log: no traceback,
server path or library message reaches a hosted visitor's browser (`client.showErrorDetails = "none"` covers what
Streamlit itself catches; this covers every page run through app.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from explorer.core.errors import BadInput, ExplorerError, one_line
from explorer.hosting.settings import HostedPolicy
from explorer.ui.widgets import escape_markdown

LOG = logging.getLogger(__name__)


def hosted_or_unsure() -> bool:
    """Hosted mode, or a malformed setting: then say as little as a hosted server would."""
    try:
        return HostedPolicy.from_env().hosted
    except BadInput:
        return True


def error_line(exc: Exception, hosted: bool) -> str:
    """What a visitor reads: a hosted server names only the exception's type (its message can quote a server path);
    locally the type and the message's first line. An ExplorerError is written for users: its first line as it is."""
    if isinstance(exc, ExplorerError):
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if hosted:
        return f"Something went wrong on this page ({type(exc).__name__}); the error is in the server log."
    return f"Something went wrong on this page: {one_line(exc)} (the traceback is in the server log)."


@contextmanager
def one_line_errors(where: str = "page") -> Iterator[None]:
    """Run a block so that an unexpected error ends it with one line (`st.error`) and a logged traceback. Only
    `Exception` is caught: Streamlit's st.rerun, st.stop and st.switch_page raise BaseException subclasses
    (ScriptControlException), which pass through untouched, as do KeyboardInterrupt and SystemExit."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes a visitor's line
        LOG.exception("Unexpected error while drawing the %s", where)
        st.error(escape_markdown(error_line(exc, hosted_or_unsure())))
