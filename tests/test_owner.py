"""The device owner's own promises (explorer/owner/server.py), over its real HTTP protocol: it refuses a network
address without a token, and with a token answers nothing and runs nothing for a request without it; a job streams
its events and ends on one "done" or one "error"; a Run's tokens are greedy generate()'s; a job whose client went away
while it waited in line leaves the line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from explorer.checks.greedy_reference import generate_tokens
from explorer.core.errors import BadInput, ExplorerError
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import Trace, pass_from_dict
from explorer.hosting.client import TOKEN_ENV, URL_ENV, Event
from explorer.hosting.settings import HostedPolicy
from explorer.owner.server import check_bind
from explorer.owner.state import Owner
from tests.owner_support import OwnerInThread

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "a-token-for-this-test"


@pytest.fixture
def owner_with_token() -> Iterator[OwnerInThread]:
    started = OwnerInThread(HostedPolicy(), token=TOKEN)
    yield started
    started.stop()


@pytest.fixture
def open_owner() -> Iterator[OwnerInThread]:
    """An owner on loopback with no token (as a developer runs one), outside hosted mode: a local model folder runs."""
    started = OwnerInThread(HostedPolicy())
    yield started
    started.stop()


def jobs_started(owner: Owner, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every job the owner is asked to start, by kind, from here on."""
    started: list[str] = []
    start = owner.start

    def counted(kind: str, body: dict) -> object:
        started.append(kind)
        return start(kind, body)

    monkeypatch.setattr(owner, "start", counted)
    return started


# --- binding ---------------------------------------------------------------------------------------------------------
def test_a_network_address_without_a_token_is_refused_in_one_line_before_torch_loads() -> None:
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, URL_ENV)}
    # The command as `python -m explorer` runs it, in a process of its own; afterwards, whether torch was imported.
    script = (
        "import sys; from explorer.cli.main import main; code = main(['owner', '--host', '0.0.0.0', '--no-warm']); "
        "print('torch imported:', 'torch' in sys.modules); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert TOKEN_ENV in lines[0] and "0.0.0.0" in lines[0]
    assert done.stdout.strip() == "torch imported: False"

    # And as the console command, exactly as an operator types it.
    typed = subprocess.run(
        [sys.executable, "-m", "explorer", "owner", "--host", "0.0.0.0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert typed.returncode != 0
    assert len(typed.stderr.strip().splitlines()) == 1 and TOKEN_ENV in typed.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.org"])
def test_any_address_but_loopback_needs_a_token(host: str) -> None:
    with pytest.raises(BadInput, match=TOKEN_ENV):
        check_bind(host, None)
    with pytest.raises(BadInput):
        check_bind(host, "")
    check_bind(host, TOKEN)  # with one, it may listen there


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_token(host: str) -> None:
    check_bind(host, None)


# --- the token -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("given", [None, "Bearer wrong-token", f"Bearer {TOKEN[:-1]}", TOKEN, f"Basic {TOKEN}"])
def test_a_request_without_the_token_gets_401_and_runs_nothing(
    owner_with_token: OwnerInThread, given: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = jobs_started(owner_with_token.owner, monkeypatch)
    headers = {} if given is None else {"Authorization": given}
    body = {"request": {"prompt": "hello", "max_new_tokens": 2}, "model": "embedded"}
    url = owner_with_token.url
    for method, path in [("GET", "/health"), ("GET", "/turns"), ("POST", "/jobs/run"), ("POST", "/jobs/figures")]:
        response = httpx.request(method, url + path, headers=headers, json=body if method == "POST" else None)
        assert response.status_code == 401, (path, response.text)
        assert "token" in response.json()["message"]
    time.sleep(0.3)  # a job started anyway would have taken its place in line by now
    assert started == []
    assert list(owner_with_token.owner.queue.turns) == [] and owner_with_token.owner.queue.waiting == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("job-")]


def test_the_token_opens_health_and_turns(owner_with_token: OwnerInThread) -> None:
    client = owner_with_token.client()
    health = client.health()
    assert health["ok"] is True and health["pid"] == os.getpid()
    assert client.turns() == []


def test_the_client_says_a_refused_token_in_one_line(owner_with_token: OwnerInThread) -> None:
    from explorer.hosting.client import OwnerClient

    wrong = OwnerClient(owner_with_token.url, "wrong-token")
    with pytest.raises(ExplorerError, match=r"401.*EXPLORER_DEVICE_TOKEN"):
        wrong.health()
    with pytest.raises(ExplorerError, match="401"):
        list(wrong.job("run", {}))


# --- a job's events --------------------------------------------------------------------------------------------------
def test_a_job_that_does_not_exist_gives_one_error_event(open_owner: OwnerInThread) -> None:
    events = list(open_owner.client().job("no-such-job", {}))
    assert [e.name for e in events] == ["error"]
    assert "no-such-job" in events[0].data["message"]


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]", b'"a string"', b""])
def test_a_malformed_body_gets_400(open_owner: OwnerInThread, content: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    started = jobs_started(open_owner.owner, monkeypatch)
    response = httpx.post(
        f"{open_owner.url}/jobs/run", content=content, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert response.status_code == 400
    assert "JSON object" in response.json()["message"]
    assert started == []


def test_a_malformed_request_is_one_error_event_and_no_turn(open_owner: OwnerInThread) -> None:
    events = list(open_owner.client().job("run", {"request": {"prompt": "hi", "max_new_tokens": "many"}}))
    assert [e.name for e in events] == ["error"]
    assert "malformed" in events[0].data["message"]
    assert list(open_owner.owner.queue.turns) == []


def run_body(model_dir: Path, new_tokens: int) -> dict:
    request = {"prompt": "hello <b>world</b>", "max_new_tokens": new_tokens, "use_chat_template": False}
    request["stop_at_eos"] = False  # exactly `new_tokens`, as generate_tokens (EOS ignored) makes
    return {"model": str(model_dir), "device": "cpu", "dtype": "float32", "request": request, "session": "test"}


def test_a_run_streams_its_passes_then_its_trace_then_done_with_generates_tokens(
    open_owner: OwnerInThread, tiny_llama_dir: Path, tiny_lm: LoadedModel
) -> None:
    new_tokens = 6
    events: list[Event] = list(open_owner.client().job("run", run_body(tiny_llama_dir, new_tokens)))
    names = [e.name for e in events if e.name not in ("line", "progress", "note", "tick")]
    assert names == ["pass"] * new_tokens + ["trace", "done"], names
    passes = [pass_from_dict(e.data) for e in events if e.name == "pass"]
    trace = Trace.from_dict(next(e.data for e in events if e.name == "trace"))
    assert [p.phase for p in passes] == ["prefill"] + ["decode"] * (new_tokens - 1)
    assert tuple(p.token_id for p in passes) == trace.generated_token_ids  # streamed as they ran: the same tokens
    assert trace.generated_token_ids == generate_tokens(tiny_lm, trace.prompt_token_ids, new_tokens)
    assert events[-1].data == {}  # no capture asked: no maps
    # Its turn is in the owner's log, with the passes it ran.
    (turn,) = open_owner.client().turns()
    assert turn["what"] == "run" and turn["ended"] == "released" and turn["passes"] == new_tokens


def test_a_job_whose_client_leaves_while_it_waits_in_line_leaves_the_line(
    open_owner: OwnerInThread, tiny_llama_dir: Path
) -> None:
    line = open_owner.owner.queue
    holder = line.enter("lab", "someone-else")  # another session holds the device meanwhile
    assert line.wait(holder, 1.0)
    try:
        stream = open_owner.client().job("run", run_body(tiny_llama_dir, 4))
        first = next(stream)
        while first.name != "line":
            first = next(stream)
        assert first.data["in_line"] is True and first.data["ahead"] == 1
        stream.close()  # the page stopped: a closed tab, a click elsewhere
        deadline = time.monotonic() + 2.0
        while line.waiting and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line.waiting == 0
        assert [t.ended for t in line.turns if t.what == "run"] == ["cancelled"]
    finally:
        line.release(holder)
    time.sleep(0.6)  # a job still alive would now take the free device
    assert [t.what for t in line.turns] == ["run", "lab"] and line.turns[-1].ended == "released"


# --- a web process's /_device ----------------------------------------------------------------------------------------
def device_page(monkeypatch: pytest.MonkeyPatch, link: object) -> httpx.Response:
    """GET /_device from the route app.py gives its `st.App`, on a web process whose device is `link`."""
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from explorer.ui import device_link as device_link_module

    monkeypatch.setattr(device_link_module, "device_link", lambda: link)
    with TestClient(Starlette(routes=[device_link_module.device_route()])) as web:
        return web.get(device_link_module.DEVICE_PATH)


def test_a_web_process_says_which_owner_it_reaches(
    owner_with_token: OwnerInThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = device_page(monkeypatch, owner_with_token.link())
    assert answer.status_code == 200
    said = answer.json()
    assert said["ok"] is True and said["owner_pid"] == os.getpid() and said["web_pid"] == os.getpid()
    assert said["owner_started_unix_s"] == owner_with_token.owner.started_unix_s and said["restarts"] == 0
    assert TOKEN not in answer.text and owner_with_token.url not in answer.text  # no token, no address


def test_a_web_process_whose_owner_refuses_it_says_so(
    owner_with_token: OwnerInThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    from explorer.hosting.client import DeviceLink, OwnerClient

    answer = device_page(monkeypatch, DeviceLink(OwnerClient(owner_with_token.url, "wrong-token")))
    assert answer.status_code == 503
    assert answer.json()["ok"] is False and "401" in answer.json()["message"]
