"""The device owner's state: the loaded models, the device figures, the warm-up, the KV caches of stepped requests and
the line every job takes its turn in; each job runs in a thread of its own (`Owner.start`), one at a time on the
device. The HTTP around it is `explorer.owner.server`; what each job does, `explorer.owner.registry`."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from explorer.core.errors import BadInput, ExplorerError
from explorer.core.paths import EMBEDDED
from explorer.hosting.cores import allowed_cpus
from explorer.hosting.settings import HostedPolicy
from explorer.owner.job import TICK_S, Gone, Job
from explorer.owner.line import SERVER_OWNER, DeviceQueue
from explorer.owner.warm import Warmer, failure_sentence

if TYPE_CHECKING:  # torch comes with these, so not at start: /health answers before torch loads
    from explorer.core.device import FiguresStore
    from explorer.core.loaded_model import LoadedModel


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
        """The device figures, made on first use: torch is imported in the owner's start-up thread after its port
        opens (`start_torch`), so a restarted owner answers /health within a second, not after torch's seconds."""
        with self._figures_lock:
            if self._figures is None:
                from explorer.core.device import FiguresStore

                self._figures = FiguresStore()
            return self._figures

    def load(
        self, name: str, device: str, dtype: str, progress: Callable[[float, str], None] | None = None
    ) -> LoadedModel:
        from explorer.models import loading

        key = (name, device, dtype)
        with self.lock:  # two jobs asking for the same new model load it once
            if key not in self.models:
                loaded = loading.load_model(name, device, dtype, on_progress=progress)
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
            from explorer.owner.registry import JOBS, before_each  # the job bodies import the engine: after torch is in

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


def torch_threads_once() -> None:
    """torch's intra-op threads, set once at start (`EXPLORER_TORCH_THREADS`; unset: torch's own choice, at most one
    per core the owner runs on, `explorer.hosting.cores`): nothing is fitted per turn."""
    import torch

    wanted = os.environ.get("EXPLORER_TORCH_THREADS", "").strip()
    if wanted:
        torch.set_num_threads(max(1, int(wanted)))
    elif torch.get_num_threads() > len(allowed_cpus()):
        torch.set_num_threads(len(allowed_cpus()))
