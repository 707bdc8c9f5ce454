"""How the explorer finds the vLLM `./run vllm` started (its state file), waits for it and says when there is none,
without starting one: a fake /health on loopback stands in for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from explorer.cli.main import main
from explorer.remote import engine
from explorer.remote.sweep import DEFAULT_COMPLETION_PROMPT, DEFAULT_PROMPT, default_prompt
from tests.test_remote import stdlib_server


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def write_state(path: Path, pid: int, port: int) -> None:
    path.write_text(json.dumps({"pid": pid, "port": port, "log": "/tmp/vllm.log", "started_at": 0.0}))


def test_a_live_launch_with_a_healthy_server_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "server.json"
    monkeypatch.setenv(engine.STATE_ENV, str(state))
    assert engine.local_engine_url() is None  # no state file
    with stdlib_server(Health) as base_url:
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        write_state(state, os.getpid(), port)
        assert engine.local_engine_url() == f"http://127.0.0.1:{port}/v1"
        assert engine.wait_for_engine(5.0).port == port


def test_a_launch_that_ended_or_never_answers_is_one_line_naming_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "server.json"
    monkeypatch.setenv(engine.STATE_ENV, str(state))
    with pytest.raises(RuntimeError, match="no vLLM was started"):
        engine.wait_for_engine(1.0)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_state(state, int(ended.stdout), 9)
    assert engine.read_state() is None and engine.local_engine_url() is None
    with pytest.raises(RuntimeError, match=r"ended before answering /health; see /tmp/vllm.log"):
        engine.wait_for_engine(1.0)
    write_state(state, os.getpid(), 9)  # alive, nothing listening
    with pytest.raises(RuntimeError, match=r"did not answer .*/health within 0.5 s; see /tmp/vllm.log"):
        engine.wait_for_engine(0.5, poll_s=0.1)


def test_remote_without_a_url_or_a_local_vllm_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(engine.STATE_ENV, str(tmp_path / "none.json"))
    assert main(["remote", "--api", "completions"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --base-url not given and {engine.START_HINT}."
    assert main(["remote", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--model is required with --base-url" in capsys.readouterr().err


def test_each_api_has_a_default_prompt_its_answer_starts_from() -> None:
    assert default_prompt("chat") == DEFAULT_PROMPT
    assert default_prompt("completions") == DEFAULT_COMPLETION_PROMPT and DEFAULT_COMPLETION_PROMPT.startswith(
        DEFAULT_PROMPT
    )
