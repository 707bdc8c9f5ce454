"""The device owner over HTTP: the one process that runs the model on a device (its state: `explorer.owner.state`)
takes jobs and streams each job's records back as server-sent events, in the JSON the records already write
(`Trace.to_dict`, the labs' `to_dict`).

Why a process of its own: the passes ran on the web server's session threads, beside every visitor's chart drawing,
and every gain fought the interpreter lock and the scheduler. Here nothing draws: a pass competes with nothing but the
HTTP loop, which only moves finished events. The web tier (`explorer.hosting.client`) may be the app's own child
process or a laptop talking to a GPU box (`EXPLORER_DEVICE_URL`).

Scheduling lives in the owner and only there: every job takes a turn in one line (`explorer.owner.line`); a job of one
pass (a Next token, a step's Prefill) goes between two passes of a long one (`Turn.make_way`); a job whose client went
away is dropped (`Job.gone`, set when its stream ends) at its next place in line or pass boundary.

Security: loopback by default; any other address only with a token (`serve` refuses to start without one); with a
token every request carries it (`Authorization: Bearer …`) or gets 401 and runs nothing. Job sizes are held to the
same hosted limits (`HostedPolicy`) as the pages that ask.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import queue
import secrets
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any

from explorer.core.errors import BadInput
from explorer.hosting.client import TOKEN_ENV
from explorer.hosting.cores import take_owner_cores
from explorer.owner.job import TICK_S, Job
from explorer.owner.state import Owner

FINAL_EVENTS = ("done", "error")


# --- HTTP ------------------------------------------------------------------------------------------------------------
def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def job_events(job: Job) -> AsyncIterator[str]:
    """The job's events as they come; the stream's end (the client gone) marks the job gone, which stops it at its
    next place in line or pass boundary."""
    loop = asyncio.get_running_loop()
    nudge = asyncio.Event()
    job.wake = lambda: loop.call_soon_threadsafe(nudge.set)
    try:
        while True:
            try:
                event, data = job.events.get_nowait()
            except queue.Empty:
                nudge.clear()
                if job.events.empty():
                    try:
                        await asyncio.wait_for(nudge.wait(), TICK_S)
                    except TimeoutError:
                        yield sse("tick", {})  # an event, not a comment: the reader checks its page is still there
                continue
            yield sse(event, data)
            if event in FINAL_EVENTS:
                return
    finally:
        job.gone.set()


def create_app(owner: Owner, token: str | None) -> Any:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def check_token(request: Request, call_next: Callable[[Request], Any]) -> Response:
        given = request.headers.get("authorization", "")
        if token is not None and not secrets.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return JSONResponse({"message": "This device owner needs its token."}, status_code=401)
        return await call_next(request)

    async def health(_request: Request) -> Response:
        return JSONResponse(owner.health())

    async def turns(_request: Request) -> Response:
        return JSONResponse([asdict(t) for t in owner.queue.turns])

    async def start_job(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"message": "A job's body is one JSON object."}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"message": "A job's body is one JSON object."}, status_code=400)
        job = owner.start(request.path_params["kind"], body)
        return StreamingResponse(job_events(job), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    routes = [
        Route("/health", health),
        Route("/turns", turns),
        Route("/jobs/{kind}", start_job, methods=["POST"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=check_token)])


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Loopback needs no token; any other address does: a device open to a network must not run anyone's jobs."""
    if not is_loopback(host) and not token:
        raise BadInput(
            f"Refusing to listen on {host} without a token: set {TOKEN_ENV} (every request must then carry it), "
            "or listen on 127.0.0.1."
        )


def watch_parent(parent_pid: int) -> None:
    """The app's own owner ends with the app: when its parent is gone it is reparented, and it exits."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="owner-parent", daemon=True).start()


def serve(host: str, port: int, token: str | None, *, warm: bool = True, parent_pid: int | None = None) -> None:
    import uvicorn

    check_bind(host, token)
    cores = take_owner_cores()  # before any thread starts: threads inherit the cores of the thread that starts them
    owner = Owner()
    owner.start_torch()  # after the port opens, not before: a restarted owner answers /health within a second or two
    if warm:
        owner.warm_up()
    if parent_pid is not None:
        watch_parent(parent_pid)
    where = f"; {cores}" if cores else ""
    print(f"Device owner on http://{host}:{port} (pid {os.getpid()}){where}", file=sys.stderr, flush=True)
    uvicorn.run(create_app(owner, token), host=host, port=port, log_level="warning", timeout_graceful_shutdown=1)
