"""The device owner: the one process that runs the model on a device. It holds the loaded models, the device figures,
the warm state, the KV caches of stepped requests and the turn log; it takes jobs over HTTP and streams each job's
records back as server-sent events, in the JSON the records already write (`Trace.to_dict`, the labs' `to_dict`).

Why a process of its own: the passes ran on the web server's session threads, beside every visitor's chart drawing,
and every gain fought the interpreter lock and the scheduler. Here nothing draws: a pass competes with nothing but the
HTTP loop, which only moves finished events. The web tier (`explorer.hosting.client`) may be the app's own child
process or a laptop talking to a GPU box (`EXPLORER_DEVICE_URL`).

Scheduling lives here and only here: every job takes a turn in one `DeviceQueue`; a job of one pass (a Next token, a
step's Prefill) goes between two passes of a long one (`Turn.make_way`); a job whose client went away is dropped
(`Job.gone`) at its next place in line or pass boundary.

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
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from explorer.core.errors import BadInput, ExplorerError
from explorer.core.paths import EMBEDDED
from explorer.hosting.client import TOKEN_ENV
from explorer.hosting.queue import SERVER_OWNER, DeviceQueue, Ticket
from explorer.hosting.settings import HostedPolicy
from explorer.hosting.warm import Warmer, failure_sentence

if TYPE_CHECKING:  # torch comes with these, so not at start: a refused bind and /health come before torch loads
    from explorer.core.device import FiguresStore
    from explorer.core.loaded_model import LoadedModel

TICK_S = 0.5  # a waiting job's place in line is sent this often: the page redraws it, and a click can cancel there
FINAL_EVENTS = ("done", "error")


class Gone(Exception):
    """The job's client went away (a closed tab, "Leave the queue", a click elsewhere): the job stops here."""


class Job:
    """One job as it runs on its own thread: what it was asked (`body`), the events it has sent, and whether its client
    is still there. `send` is called from the job's thread; the HTTP side drains the events."""

    def __init__(self, owner: Owner, kind: str, body: dict[str, Any]) -> None:
        self.owner, self.kind, self.body = owner, kind, body
        self.label = str(body.get("session", ""))[:16] or "anonymous"  # a hash from the web tier, never a prompt
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.gone = threading.Event()
        self.wake: Callable[[], None] = lambda: None  # the HTTP loop's nudge, set by the stream

    def send(self, event: str, data: Any) -> None:
        self.events.put((event, data))
        self.wake()

    def check(self) -> None:
        if self.gone.is_set():
            raise Gone

    def progress(self, fraction: float, text: str) -> None:
        self.check()
        self.send("progress", {"fraction": max(0.0, min(1.0, fraction)), "text": text})

    def note(self, text: str) -> None:
        self.send("note", {"text": text})

    @contextmanager
    def turn(self, what: str, passes: int | None = None, makes_way: bool = False) -> Iterator[Turn]:
        """Hold the device for this job's work, waiting in line (its place sent every TICK_S) while others hold it.
        `passes`: the passes it will run at most (for the line's estimate); `makes_way`: it calls `Turn.make_way`
        between its passes."""
        line = self.owner.queue
        turn = Turn(self, line.enter(what, self.label, passes, makes_way))
        try:
            self._wait(turn.ticket, self.owner.policy.max_wait_s)
            yield turn
        finally:
            line.release(turn.ticket)  # also when the client left: its place goes to the next in line

    def _wait(self, ticket: Ticket, max_wait_s: float | None) -> None:
        line = self.owner.queue
        while not line.wait(ticket, 0):
            status = line.status(ticket)
            if not status.in_line:
                raise BadInput("This job lost its place in line: nothing ran.")
            if max_wait_s is not None and status.waited_s > max_wait_s:
                raise BadInput(
                    f"Waited {max_wait_s:.0f} s for the device and {status.ahead} turn(s) are still ahead: nothing "
                    "ran. Try again in a minute."
                )
            self.check()
            self.send("line", asdict(status))
            if line.wait(ticket, TICK_S):
                break
        self.check()
        self.send("line", asdict(line.status(ticket)))

    def load(self, model: str, device: str = "auto", dtype: str = "float32") -> LoadedModel:
        name = self.owner.policy.check_model(model.strip() or EMBEDDED)
        return self.owner.load(name, device, dtype, lambda f, text: self.progress(f, f"Loading {name}: {text}"))


class Turn:
    """A job's turn on the device. Long work calls `make_way()` between two passes; work that runs passes says so
    (`ran`), for the turn log and the next waiting line's estimate."""

    def __init__(self, job: Job, ticket: Ticket) -> None:
        self.job, self.ticket = job, ticket
        self._since_s = time.perf_counter()

    def ran(self, passes: int, pass_s: float) -> None:
        now = time.perf_counter()
        self.job.owner.queue.record_work(self.ticket, passes, pass_s, now - self._since_s)
        self._since_s = now

    def make_way(self, everyone: bool = False) -> None:
        """Between two passes (or a lab's two units): the one-pass jobs waiting (other sessions' Next tokens and
        Prefills) go first, then this turn resumes ahead of the rest of the line; with `everyone`, every job waiting
        goes first and this one waits at the back (a lab: another session waits for one of its units, not all). The
        caller has paused its request's clock. A client that left stops its work here."""
        self.job.check()
        line = self.job.owner.queue
        self.ran(0, 0.0)
        if everyone:
            if line.waiting == 0:
                return
            line.release(self.ticket, "made way")
            resumed: Ticket | None = line.enter(self.ticket.what, self.ticket.owner, self.ticket.passes)
        else:
            resumed = line.make_way(self.ticket)
        if resumed is None:
            return
        self.ticket = resumed
        self.job.note("Paused: another session's job goes first (this one's clock is paused).")
        while not line.wait(resumed, TICK_S):
            if not line.status(resumed).in_line:
                raise BadInput("This job lost its place on the device while it let another session through.")
            self.job.check()
        self.job.note("")
        self._since_s = time.perf_counter()


class Owner:
    """The state of one device owner; jobs run in threads of their own (`start`), one at a time on the device."""

    def __init__(self, policy: HostedPolicy | None = None, *, model_capacity: int = 2) -> None:
        self.policy = policy or HostedPolicy.from_env()
        self.queue = DeviceQueue(log_path=self.policy.turn_log)
        self._figures: FiguresStore | None = None
        self._figures_lock = threading.Lock()
        self.warmer = Warmer()
        self.models: dict[tuple[str, str, str], LoadedModel] = {}
        self.model_capacity = model_capacity
        self.steps: dict[str, Any] = {}  # a stepped request's handle -> its `SteppedRequest` (its KV cache lives here)
        self.lock = threading.Lock()
        self.started_unix_s = time.time()
        self.torch_ready = threading.Event()  # cleared by `start_torch` until torch is in
        self.torch_ready.set()

    @property
    def figures(self) -> FiguresStore:
        """The device figures, made on first use: torch is imported by the first job (or the warm-up's thread), not
        before the port opens, so a restarted owner answers /health within a second, not after torch's seconds."""
        with self._figures_lock:
            if self._figures is None:
                from explorer.core.device import FiguresStore

                self._figures = FiguresStore()
            return self._figures

    def load(
        self, name: str, device: str, dtype: str, progress: Callable[[float, str], None] | None = None
    ) -> LoadedModel:
        from explorer.models.loading import load_model

        key = (name, device, dtype)
        with self.lock:  # two jobs asking for the same new model load it once
            if key not in self.models:
                loaded = load_model(name, device, dtype, on_progress=progress)
                while len(self.models) >= self.model_capacity:
                    self.models.pop(next(iter(self.models)))
                self.models[key] = loaded
            return self.models[key]

    def start(self, kind: str, body: dict[str, Any]) -> Job:
        """Job `kind` in a thread of its own (the HTTP loop never imports the job bodies, which import torch)."""
        job = Job(self, kind, body)
        threading.Thread(target=self._run, args=(job,), name=f"job-{kind}", daemon=True).start()
        return job

    def _run(self, job: Job) -> None:
        try:
            while not self.torch_ready.wait(TICK_S):
                job.progress(0.0, "The device owner is starting: importing torch…")
            from explorer.jobs import JOBS, before_each  # the job bodies import the engine: after torch is in

            work = JOBS.get(job.kind)
            if work is None:
                job.send("error", {"message": f"No job called {job.kind!r}."})
                return
            before_each(self)
            while not self.warmer.wait(TICK_S) and self.warmer.status().state == "warming":
                job.progress(0.0, f"The device is warming up: {self.warmer.status().doing}…")
            job.send("done", work(job))
        except Gone:
            job.send("error", {"message": "The client went away: the job was dropped."})
        except ExplorerError as exc:
            job.send("error", {"message": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one line to the page; the owner keeps serving
            # A hosted owner names only the type: the text can quote a server path (an OSError's filename).
            said = "an unexpected error on the device. Try again in a moment." if self.policy.hosted else None
            job.send("error", {"message": said or failure_sentence(exc), "failed": type(exc).__name__})

    def warm_target(self) -> str:
        """The model a first Run with the sidebar's defaults loads: the default, or the first the server allows."""
        try:
            return self.policy.check_model(EMBEDDED)
        except BadInput:
            return self.policy.allowed_models[0]

    def start_torch(self) -> None:
        """Import torch, set its threads and prime its profiler in a thread of their own; every job (the warm-up too)
        waits for it. Priming where torch was imported: a Profile job in a thread of its own then logs no Kineto
        error (`explorer.core.profiler.prime_profiler`)."""
        self.torch_ready.clear()

        def start() -> None:
            try:
                torch_threads_once()
                from explorer.core.profiler import prime_profiler

                prime_profiler()
            finally:
                self.torch_ready.set()

        threading.Thread(target=start, name="owner-torch", daemon=True).start()

    def warm_up(self) -> None:
        """Load the default model, take the device figures and warm up at the default request's shapes, once, in the
        background, in a turn of its own: a first Run with the sidebar's defaults pays for none of it."""

        def work(say: Callable[[str], None]) -> None:
            from explorer.core.engine import check_request
            from explorer.core.measure import prepare_device
            from explorer.core.request import DEFAULT_MAX_NEW_TOKENS, DEFAULT_PROMPT, Request

            self.torch_ready.wait()
            ticket = self.queue.enter("warm-up", SERVER_OWNER)
            try:
                self.queue.wait(ticket, None)
                model = self.warm_target()
                say(f"loading the model ({model})")
                lm = self.load(model, "auto", "float32")
                checked = check_request(lm, Request(DEFAULT_PROMPT, DEFAULT_MAX_NEW_TOKENS))
                say("taking the device figures and running warm-up passes")
                prepare_device(lm, self.figures, checked)
            finally:
                self.queue.release(ticket)

        self.warmer.start(work, thread_name="owner-warm")

    def health(self) -> dict[str, Any]:
        return {
            "ok": True,
            "pid": os.getpid(),
            "started_unix_s": self.started_unix_s,
            "warm": asdict(self.warmer.status()),
            "waiting": self.queue.waiting,
            "models": [list(key) for key in self.models],
        }


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
    owner = Owner()
    owner.start_torch()  # after the port opens, not before: a restarted owner answers /health within a second or two
    if warm:
        owner.warm_up()
    if parent_pid is not None:
        watch_parent(parent_pid)
    print(f"Device owner on http://{host}:{port} (pid {os.getpid()})", file=sys.stderr, flush=True)
    uvicorn.run(create_app(owner, token), host=host, port=port, log_level="warning", timeout_graceful_shutdown=1)


def torch_threads_once() -> None:
    """torch's intra-op threads, set once at start (`EXPLORER_TORCH_THREADS`; unset: torch's own choice, every core):
    the owner shares its machine with no drawing, so nothing is fitted per turn."""
    wanted = os.environ.get("EXPLORER_TORCH_THREADS", "").strip()
    if wanted:
        import torch

        torch.set_num_threads(max(1, int(wanted)))
