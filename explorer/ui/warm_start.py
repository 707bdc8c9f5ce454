"""A warm server: when it starts, the server loads the default model (the sidebar's defaults), takes the device
figures and runs the warm-up passes in a background thread, so a first visitor's Run pays for none of it; the
sidebar says what it is doing meanwhile.

How it starts: `streamlit run app.py` finds the `st.App` that app.py defines when it is imported (Streamlit's ASGI
mode, which serves the same routes as its plain mode) and enters its lifespan, `warm_lifespan`, as the server starts,
before any browser connects. A process that never enters it (an AppTest, an older way of serving) starts warming in
its first script run instead (`warming_line`). `EXPLORER_WARM=0` switches it off.

The warm-up takes a turn on the device like a run (`explorer.hosting.queue.DeviceQueue`), so it never shares the
cores with a visitor's timed passes; a Run pressed meanwhile waits for it (`explorer.ui.waiting.wait_for_warming`) and
finds the model in the session's store: it is loaded once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import streamlit as st

from explorer.core.engine import Request, check_request
from explorer.core.errors import BadInput
from explorer.core.measure import prepare_device
from explorer.hosting.queue import SERVER_OWNER
from explorer.hosting.server_session import ServerSession
from explorer.hosting.settings import warming_on
from explorer.hosting.warm import LOG, Say, WarmStatus, Work
from explorer.ui.shared import hosting_policy, server_session
from explorer.ui.state import RunInputs

POLL_S = 1.0  # how often a sidebar that saw the server warming redraws its line (that fragment only)
THREAD_NAME = "explorer-warm"
CONTEXT_LOGGER = "streamlit.runtime.scriptrunner_utils.script_run_context"  # where that warning is logged


def warm_target() -> RunInputs:
    """What a first Run with the sidebar's defaults loads: the default model, device and dtype (the first allowed
    model where the server's allow-list leaves the default out)."""
    target = RunInputs()
    try:
        policy = hosting_policy()
    except BadInput:  # a malformed setting: the sidebar says so and runs are refused until it is fixed
        return target
    try:
        return replace(target, model=policy.check_model(target.model))
    except BadInput:
        return replace(target, model=policy.allowed_models[0])


def warm_work(target: RunInputs, session: ServerSession) -> Work:
    """The warm-up: in a turn on the device, load `target`'s model into the session's store, tokenize the default
    prompt, take the device figures (into the session's) and run the warm-up passes that every run's `prepare_device`
    runs."""
    queue = session.queue

    def work(say: Say) -> None:
        ticket = queue.enter("warm-up", SERVER_OWNER)
        try:
            say("waiting for the device")
            queue.wait(ticket, None)
            say(f"loading the model ({target.model}, device {target.device}, {target.dtype})")
            lm = session.models.get(target.model, target.device, target.dtype)
            request = Request(target.prompt, target.max_new_tokens, decode_path=target.decode_path)
            checked = check_request(lm, request)  # the chat template compiled once here, not in the first run

            def report(fraction: float, what: str) -> None:
                capturing = "CUDA graph" in what  # the first capture of a shape takes seconds: say so
                say(
                    "taking the device figures (microbenchmarks)"
                    if fraction < 0.8
                    else "capturing the decode step as a CUDA graph"
                    if capturing
                    else "running warm-up passes"
                )

            # The default request's own shapes: a first Run with the sidebar's defaults finds them warm (and on a
            # GPU its decode graph captured).
            prepare_device(lm, session.figures, checked, progress=report)
        finally:
            queue.release(ticket)

    return work


class _NoContextWarning(logging.Filter):
    """Outside any script run by design: the server importing app.py (its `st.Page`s, in the main thread) and the
    warm-up thread reaching the shared `ServerSession` (`explorer.ui.shared`). Streamlit's "missing
    ScriptRunContext" warning for those two threads says nothing an operator needs; script threads keep it."""

    def filter(self, record: logging.LogRecord) -> bool:
        quiet = record.threadName in (THREAD_NAME, "MainThread")
        return not (quiet and "missing ScriptRunContext" in record.getMessage())


logging.getLogger(CONTEXT_LOGGER).addFilter(_NoContextWarning())  # once, when app.py imports this module


def start_warming(target: RunInputs | None = None) -> bool:
    """Start the warm-up once per process (unless `EXPLORER_WARM=0`); True if this call started it."""
    session = server_session()
    if not warming_on() or session.warmer.status().state != "not started":
        return False
    if not LOG.handlers:  # the server log says when warming starts and ends, as Streamlit's own lines do
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
        LOG.propagate = False
    started = session.warmer.start(warm_work(target or warm_target(), session), THREAD_NAME)
    if started:
        LOG.info("Warming up: loading the default model and taking the device figures in the background.")
    return started


@asynccontextmanager
async def warm_lifespan(_app: object) -> AsyncIterator[None]:
    """The server's lifespan (`st.App(..., lifespan=warm_lifespan)` in app.py): warming starts as the server does."""
    try:
        start_warming()
    except Exception as exc:  # noqa: BLE001 - a server that cannot warm up still serves; the first run loads
        LOG.warning("Warming up at server start could not begin: %s", exc, exc_info=True)
    yield


def _draw(status: WarmStatus) -> None:
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
    status = server_session().warmer.status()
    _draw(status)
    if status.ended:
        _stop_polling()


def warming_line() -> None:
    """The sidebar's line on the warm-up: while it runs, redrawn every POLL_S by a fragment of its own (nothing else
    on the page reruns), which stops once warming has ended; then what was done and when. Starts the warm-up if the
    server's start did not."""
    if not warming_on():
        return
    start_warming()
    status = server_session().warmer.status()
    with st.sidebar:
        if status.state == "warming":
            st.fragment(_warming_fragment, run_every=POLL_S)()
        else:
            _draw(status)
