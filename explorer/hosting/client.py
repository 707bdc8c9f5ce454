"""The web tier's side of the device owner (`explorer.owner.server`): a client that sends a job and reads its events
as they stream (httpx + httpx-sse), and the owner the app starts for itself, watched and restarted when it dies.
Torch-free: the web tier never imports torch.

Which owner: `EXPLORER_DEVICE_URL` (and `EXPLORER_DEVICE_TOKEN`) names one on another host, or one that several web
processes share; unset, the app starts its own on a free loopback port with a fresh token, as a child process.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

from explorer.core.errors import ExplorerError
from explorer.hosting.cores import CPUS_ENV, cores_for_owner, cpu_list, leave_to_owner

URL_ENV = "EXPLORER_DEVICE_URL"
TOKEN_ENV = "EXPLORER_DEVICE_TOKEN"
WATCH_S = 0.5  # how often the app's own owner is checked: a dead one is restarted within a second
START_TIMEOUT_S = 120.0  # importing torch and binding the port; the model loads after, in the background
RESTARTED = "The device restarted: run again."
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds `explorer/`
READ_TIMEOUT_S = 60.0  # a stream sends a keep-alive every 2 s; a minute of silence is a lost owner


class OwnerGone(ExplorerError):
    """The owner could not be reached, or its stream broke off: a restart (or a network) lost the job."""


@dataclass(frozen=True)
class Event:
    """One event of a job's stream: "line" (its place in line), "progress", "note", "pass", its job's own records,
    and a last "done" (the result) or "error" (one line)."""

    name: str
    data: Any


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once for every client here. Why: httpx makes one for each client, and
    loading the CA bundle took 22-38 ms here (2026-11-29), paid by every Next token before its job was sent. Shared by
    every client: do not change it (a client certificate, http2) for one of them."""
    return httpx.create_ssl_context()


class OwnerClient:
    """Jobs sent to one owner over HTTP. Thread-safe: each call opens its own connection."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        return self._get("/health", timeout_s)

    def turns(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        return self._get("/turns", timeout_s)

    def _get(self, path: str, timeout_s: float) -> Any:
        try:
            response = httpx.get(self.url + path, headers=self.headers, timeout=timeout_s, verify=tls_context())
        except httpx.HTTPError as exc:
            raise OwnerGone(f"The device owner at {self.url} did not answer ({type(exc).__name__}).") from exc
        refuse_status(response)
        return response.json()

    def job(self, kind: str, body: dict[str, Any]) -> Iterator[Event]:
        """The job's events as they arrive. Closing the iterator (a page that stops) closes the stream, and the owner
        drops the job at its next place in line or pass boundary."""
        timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
        try:
            with httpx.Client(timeout=timeout, headers=self.headers, verify=tls_context()) as http:
                with connect_sse(http, "POST", f"{self.url}/jobs/{kind}", json=body) as source:
                    refuse_status(source.response)
                    for sse in source.iter_sse():
                        event = Event(sse.event, sse.json())
                        yield event
                        if event.name in ("done", "error"):
                            return
        except httpx.HTTPError as exc:
            raise OwnerGone(RESTARTED) from exc
        raise OwnerGone(RESTARTED)  # the stream ended without its last event: the owner died mid-job


def refuse_status(response: httpx.Response) -> None:
    if response.status_code == 401:
        raise ExplorerError("The device owner refused this server's token (401): check EXPLORER_DEVICE_TOKEN.")
    if response.status_code >= 400:
        response.read()
        raise ExplorerError(f"The device owner refused the job ({response.status_code}): {response.text[:200]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalOwner:
    """The owner the app starts for itself: a child process on a free loopback port, with a token of its own, checked
    every WATCH_S and started again when it has died. `restarts` counts those, so a page can say so."""

    def __init__(self, env: dict[str, str] | None = None, *, share_cores: bool = False) -> None:
        self.env = dict(os.environ if env is None else env)
        self.token = secrets.token_urlsafe(24)
        self.port = free_port()
        self.client = OwnerClient(f"http://127.0.0.1:{self.port}", self.token)
        self.restarts = 0
        self.restarted_unix_s: float | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.listening = False  # this process of the owner has answered once (`ready`); False again after a restart
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        web_cpus = self._owner_cores() if share_cores else None  # the app's; not a test's, whose process is shared
        self._start()
        watch = threading.Thread(target=self._watch, name="owner-watch", daemon=True)
        watch.start()
        if web_cpus is not None:
            # After the first owner and its watch have started: a child inherits its parent thread's priority and
            # cannot raise it again, so the thread that starts the owners again keeps this one.
            leave_to_owner(web_cpus, keep=watch.native_id)

    def _owner_cores(self) -> set[int] | None:
        """The owner takes every core but one (unless `EXPLORER_OWNER_CPUS` already says which), and this web process
        will keep the one left, so the passes have cores of their own (`explorer.hosting.cores`); None: no split."""
        split = cores_for_owner()
        if split is None or self.env.get(CPUS_ENV, "").strip():
            return None
        owner_cpus, web_cpus = split
        self.env[CPUS_ENV] = cpu_list(owner_cpus)
        return web_cpus

    def _start(self) -> None:
        self.listening = False
        env = {**self.env, TOKEN_ENV: self.token}
        env.pop(URL_ENV, None)
        # `-m explorer` finds this very package wherever the app was started from (`streamlit run /path/app.py`).
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        command = [
            sys.executable,
            "-m",
            "explorer",
            "owner",
            "--port",
            str(self.port),
            "--parent-pid",
            str(os.getpid()),
        ]
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)

    def _watch(self) -> None:
        while not self._stopped.wait(WATCH_S):
            with self._lock:  # not while `stop` runs: a child it has just killed is not started again
                if not self._stopped.is_set() and self.process is not None and self.process.poll() is not None:
                    self.restarts += 1
                    self.restarted_unix_s = time.time()
                    self._start()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.client.health(timeout_s=1.0)
                return
            except OwnerGone:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def ready(self) -> None:
        """Before a job: a freshly started owner is still importing torch and binding its port, and a job sent then
        would be refused at connect (read as "the device restarted"); wait for it once per process of the owner."""
        if not self.listening:
            self.wait_ready()
            self.listening = True

    def stop(self) -> None:
        """End the child for good (the app or a test is done with it); the watch then ends too."""
        with self._lock:
            self._stopped.set()
            if self.process is not None:
                self.process.kill()
                self.process.wait()
                self.process = None


@dataclass
class DeviceLink:
    """How this web process reaches its device: the client, and the owner it started (None: one named by URL)."""

    client: OwnerClient
    local: LocalOwner | None = None

    @property
    def restarts(self) -> int:
        return self.local.restarts if self.local is not None else 0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> DeviceLink:
        env = dict(os.environ if env is None else env)
        url = env.get(URL_ENV, "").strip()
        if url:
            return cls(OwnerClient(url, env.get(TOKEN_ENV) or None))
        local = LocalOwner(env, share_cores=True)
        return cls(local.client, local)
