"""A warm server: the device owner loads the default model, takes the device figures and runs the warm-up passes as it
starts (`Owner.warm_up`), so a first visitor's Run pays for none of it; the sidebar says what it is doing meanwhile,
from the owner's `/health`.

How it starts: `streamlit run app.py` finds the `st.App` that app.py defines when it is imported and enters its
lifespan, `warm_lifespan`, as the server starts, before any browser connects: that reaches the device link, which
starts this server's own owner (unless `EXPLORER_DEVICE_URL` names one). `EXPLORER_WARM=0` switches the warm-up off.
A job sent meanwhile waits in the owner for the warm-up, and its page says so.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import streamlit as st

from explorer.hosting.client import OwnerGone
from explorer.hosting.settings import warming_on
from explorer.owner.warm import LOG, WarmStatus
from explorer.ui.device_link import device_link

POLL_S = 1.0  # how often a sidebar that saw the device warming redraws its line (that fragment only)


@asynccontextmanager
async def warm_lifespan(_app: object) -> AsyncIterator[None]:
    """The server's lifespan (`st.App(..., lifespan=warm_lifespan)` in app.py): the device owner starts, and warms
    up, as the server does."""
    try:
        device_link()
    except Exception as exc:  # noqa: BLE001 - a server whose owner cannot start still serves; jobs say why
        LOG.warning("The device owner could not start with the server: %s", exc, exc_info=True)
    yield


def owner_status() -> tuple[WarmStatus | None, str]:
    """The owner's warm state (None when it does not answer), and a line on its restarts ("" if none)."""
    link = device_link()
    restarted = ""
    if link.restarts and link.local is not None and link.local.restarted_unix_s is not None:
        at = time.strftime("%H:%M:%S", time.localtime(link.local.restarted_unix_s))
        restarted = f"The device restarted at {at}: a job that was running then must be run again."
    try:
        warm = link.client.health(timeout_s=1.0)["warm"]
    except OwnerGone:
        return None, restarted or "The device is starting (or restarting): a job sent now waits for it."
    return WarmStatus(**warm), restarted


def _draw(status: WarmStatus | None, restarted: str) -> None:
    if restarted:
        st.caption(restarted)
    if status is None:
        return
    if status.state == "failed":
        st.warning(status.line())
    elif status.line():
        st.caption(status.line())


def _stop_polling() -> None:
    """Tell this session's browser to stop rerunning the fragment that is running now: warming has ended. Streamlit
    has no public call for it; where its internals differ, the fragment keeps redrawing the same line (cheap)."""
    try:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
        from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState, get_script_run_ctx

        ctx, fragment_id = get_script_run_ctx(suppress_warning=True), ThreadState.get().fragment_id
        if ctx is None or not fragment_id:
            return
        msg = ForwardMsg()
        msg.stop_auto_rerun.fragment_ids.append(fragment_id)
        ctx.enqueue(msg)
    except Exception:  # noqa: BLE001, S110 - only the polling goes on
        pass


def _warming_fragment() -> None:
    status, restarted = owner_status()
    _draw(status, restarted)
    if status is not None and status.ended:
        _stop_polling()


def warming_line() -> None:
    """The sidebar's line on the device's warm-up: while it runs (or the owner starts), redrawn every POLL_S by a
    fragment of its own (nothing else on the page reruns), which stops once warming has ended; then what was done and
    when. A restart of the owner is said here too."""
    if not warming_on():
        return
    status, restarted = owner_status()
    with st.sidebar:
        if status is None or status.state in ("warming", "not started"):
            st.fragment(_warming_fragment, run_every=POLL_S)()
        else:
            _draw(status, restarted)
