"""Several web processes share one device owner, behind the sticky load balancer of deploy/nginx.conf: the workshop
layout of docs/hosting.md ("A workshop of 100"), run here as it is deployed. One owner (`python -m explorer owner`,
with a token), two `streamlit run app.py` processes (deploy/run.sh) pointed at it by EXPLORER_DEVICE_URL and
EXPLORER_DEVICE_TOKEN, and nginx in front with deploy/nginx.conf rendered to free ports.

`workshop_stack` starts the whole stack; a browser test (a session on each web process stepping at once, in one
waiting line) opens `stack.url` in two browser contexts whose `explorer_web` cookies reach different web processes
(`cookies_for_each_web_process`)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from explorer.hosting.client import TOKEN_ENV, URL_ENV, OwnerClient, OwnerGone
from tests.browser_support import HOST, REPO_ROOT, free_port, log_tail, streamlit_server

pytestmark = pytest.mark.server

NGINX_CONF = REPO_ROOT / "deploy" / "nginx.conf"
STICKY_COOKIE = "explorer_web"  # the cookie deploy/nginx.conf hashes on


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def render_nginx_conf(web_ports: list[int], listen_port: int, access_log: Path) -> str:
    """deploy/nginx.conf as an operator would edit it: one upstream `server` line per web process, listening on
    `listen_port` of loopback, its access log in `access_log`. Everything else is the file as shipped."""
    text = NGINX_CONF.read_text()
    upstream = re.compile(r"^(\s*)server 127\.0\.0\.1:85\d\d;\n", re.MULTILINE)
    indent = upstream.search(text).group(1)
    servers = "".join(f"{indent}server {HOST}:{port};\n" for port in web_ports)
    text = upstream.sub("", text, count=0)
    text = re.sub(r"(hash \$explorer_web_key consistent;[^\n]*\n)", lambda m: m.group(1) + servers, text)
    assert text.count(f"server {HOST}:") == len(web_ports), "deploy/nginx.conf's upstream is not where it was"
    text, listens = re.subn(r"listen 80;", f"listen {HOST}:{listen_port};", text)
    text, logs = re.subn(r"access_log /var/log/nginx/explorer\.access\.log", f"access_log {access_log}", text)
    assert listens == 1 and logs == 1, "deploy/nginx.conf's listen or access_log line changed"
    return text


def nginx_main_conf(folder: Path, site: Path) -> str:
    """The least of an nginx.conf around the site file (as /etc/nginx/nginx.conf includes conf.d/*.conf), with its
    pid and temporary files in `folder`."""
    user = "user root root;\n" if os.geteuid() == 0 else ""  # workers may read and write the test's private folder
    temp = "".join(
        f"    {kind}_temp_path {folder / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        f"{user}worker_processes 1;\npid {folder / 'nginx.pid'};\ndaemon off;\n"
        "events { worker_connections 512; }\n"
        f"http {{\n{temp}    include {site};\n}}\n"
    )


@contextlib.contextmanager
def nginx_in_front(web_urls: list[str], folder: Path) -> Iterator[str]:
    """nginx with deploy/nginx.conf in front of `web_urls`, on a free port; yields its URL; always stopped."""
    binary = nginx_binary()
    if binary is None:
        reason = "SERVER TEST SKIPPED, deploy/nginx.conf was NOT checked: nginx is missing (apt-get install nginx)"
        warnings.warn(reason, stacklevel=3)
        pytest.skip(reason)
    port = free_port()
    site = folder / "explorer.conf"
    site.write_text(render_nginx_conf([int(u.rsplit(":", 1)[1]) for u in web_urls], port, folder / "access.log"))
    main = folder / "nginx.conf"
    main.write_text(nginx_main_conf(folder, site))
    error_log = folder / "error.log"
    command = [binary, "-p", str(folder), "-c", str(main), "-e", str(error_log)]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, f"nginx refuses deploy/nginx.conf:\n{checked.stderr}"
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start ({proc.poll()}):\n{log_tail(error_log)}")
            time.sleep(0.1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@dataclass(frozen=True)
class OwnerProcess:
    client: OwnerClient  # with the owner's token
    pid: int
    log: Path


@contextlib.contextmanager
def owner_process(
    log_path: Path, token: str, env: dict[str, str] | None = None, warm: bool = False, start_timeout_s: float = 60.0
) -> Iterator[OwnerProcess]:
    """`python -m explorer owner` in its own process, as an operator starts it on a GPU box (here on loopback, with a
    token); `env` adds settings (a turn log, hosted limits), `warm` its warm-up at start. Yields its client and pid
    once it answers; always stopped. The benchmark (benchmarks/workshop.py) starts its owner here too."""
    port = free_port()
    env = {**os.environ, TOKEN_ENV: token, "EXPLORER_WARM": "1" if warm else "0", "HF_HUB_OFFLINE": "1", **(env or {})}
    env.pop(URL_ENV, None)
    command = [sys.executable, "-m", "explorer", "owner", "--port", str(port)] + ([] if warm else ["--no-warm"])
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    client = OwnerClient(f"http://{HOST}:{port}", token)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                client.health(timeout_s=1.0)
                break
            except OwnerGone:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the device owner did not start:\n{log_tail(log_path)}") from None
                time.sleep(0.1)
        yield OwnerProcess(client, proc.pid, log_path)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@contextlib.contextmanager
def device_owner(log_path: Path, token: str) -> Iterator[OwnerClient]:
    """The stack's owner: no warm-up; yields a client with its token."""
    with owner_process(log_path, token) as owner:
        yield owner.client


@dataclass(frozen=True)
class WorkshopStack:
    url: str  # nginx: what the room's browsers open
    web_urls: list[str]  # each web process, directly
    owner: OwnerClient  # the one device owner, with its token
    folder: Path  # every log: owner.log, web-N.log, access.log, error.log


@contextlib.contextmanager
def workshop_stack(folder: Path, web_processes: int = 2, env: dict[str, str] | None = None) -> Iterator[WorkshopStack]:
    """The workshop layout on this machine: one device owner, `web_processes` Streamlit processes pointed at it, nginx
    in front with deploy/nginx.conf. `env` adds settings for the web processes (e.g. `EXPLORER_HOSTED`). Everything
    is stopped at the end, in the reverse order."""
    token = secrets.token_urlsafe(24)
    with contextlib.ExitStack() as stack:
        owner = stack.enter_context(device_owner(folder / "owner.log", token))
        settings = {URL_ENV: owner.url, TOKEN_ENV: token, **(env or {})}
        web_urls = [
            stack.enter_context(streamlit_server(folder / f"web-{n}.log", startup_timeout_s=120, env=settings))
            for n in range(1, web_processes + 1)
        ]
        url = stack.enter_context(nginx_in_front(web_urls, folder))
        print(f"\n[workshop stack] nginx {url}, web {web_urls}, owner {owner.url}; logs in {folder}")
        yield WorkshopStack(url, web_urls, owner, folder)


def device_answer(url: str, cookie: str | None = None) -> httpx.Response:
    cookies = {STICKY_COOKIE: cookie} if cookie is not None else None
    return httpx.get(f"{url}/_device", cookies=cookies, timeout=10)


def cookies_for_each_web_process(stack: WorkshopStack, tries: int = 40) -> dict[int, str]:
    """One sticky cookie value per web process (its pid -> the value): browsers with these reach different processes."""
    found: dict[int, str] = {}
    for n in range(tries):
        value = f"visitor-{n}"
        found.setdefault(device_answer(stack.url, value).json()["web_pid"], value)
        if len(found) == len(stack.web_urls):
            return found
    raise AssertionError(f"{tries} cookies reached only {len(found)} of {len(stack.web_urls)} web processes")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkshopStack]:
    with workshop_stack(tmp_path_factory.mktemp("workshop-stack")) as started:
        yield started


def test_both_web_processes_answer_through_nginx_and_share_one_owner(stack: WorkshopStack) -> None:
    owner = stack.owner.health()
    direct = [httpx.get(f"{url}/_device", timeout=30).json() for url in stack.web_urls]
    assert len({d["web_pid"] for d in direct}) == 2  # two web processes ...
    for answer in direct:  # ... and one device owner: the one started above, reached with its token, no other
        assert answer["ok"] is True, answer
        assert (answer["owner_pid"], answer["owner_started_unix_s"]) == (owner["pid"], owner["started_unix_s"])
        assert answer["restarts"] == 0

    # Through nginx: each web process is reached, and says it reaches the same owner.
    by_pid = cookies_for_each_web_process(stack)
    assert set(by_pid) == {d["web_pid"] for d in direct}
    for cookie in by_pid.values():
        health = httpx.get(f"{stack.url}/_stcore/health", cookies={STICKY_COOKIE: cookie}, timeout=10)
        assert health.status_code == 200 and health.text.strip() == "ok"
        assert device_answer(stack.url, cookie).json()["owner_pid"] == owner["pid"]


def test_a_browser_stays_on_its_web_process(stack: WorkshopStack) -> None:
    first = device_answer(stack.url)  # no cookie yet: nginx picks a process and names it in a cookie
    given = first.cookies.get(STICKY_COOKIE)
    assert given, first.headers
    pid = first.json()["web_pid"]
    for _ in range(8):
        assert device_answer(stack.url, given).json()["web_pid"] == pid
    page = httpx.get(stack.url, cookies={STICKY_COOKIE: given}, timeout=10)  # the app's page itself, and its cookie
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert page.cookies.get(STICKY_COOKIE) == given


def websocket_handshake(url: str, path: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Open a websocket as a browser does (RFC 6455's upgrade request) and return the answer's status line and headers;
    the socket is closed straight after."""
    key = base64.b64encode(os.urandom(16)).decode()
    address = urlsplit(url)
    lines = [
        f"GET {path} HTTP/1.1",
        *([] if "Host" in headers else [f"Host: {address.netloc}"]),
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    status, *rest = answer.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    said = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in rest)}
    accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    assert said.get("sec-websocket-accept", accept) == accept
    return status, said


def test_the_websocket_upgrades_through_nginx(stack: WorkshopStack) -> None:
    """Streamlit's websocket through nginx, as a browser on the room's address opens it (same origin, the `streamlit`
    subprotocol): without the upgrade headers, or with a Host that lost its port, Streamlit refuses it and every page
    stays blank. The address is a name, not loopback: Streamlit lets any localhost origin in."""
    site = f"workshop.example:{urlsplit(stack.url).port}"  # what the browsers typed, nginx's port included
    for cookie in cookies_for_each_web_process(stack).values():
        headers = {"Host": site, "Origin": f"http://{site}", "Cookie": f"{STICKY_COOKIE}={cookie}"}
        status, said = websocket_handshake(
            stack.url, "/_stcore/stream", headers | {"Sec-WebSocket-Protocol": "streamlit"}
        )
        assert status.startswith("HTTP/1.1 101"), (status, said)
        assert said.get("sec-websocket-protocol") == "streamlit"
        # Another site's page may not open it (Streamlit's own origin check, kept behind the proxy).
        status, _ = websocket_handshake(stack.url, "/_stcore/stream", headers | {"Origin": "http://elsewhere.example"})
        assert not status.startswith("HTTP/1.1 101"), status
