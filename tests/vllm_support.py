"""The real vLLM for tests marked `server`: `real_vllm` yields the /v1 base URL of the server `./run vllm` serves.

It reuses a launch that is already alive (the one `./run tests` starts in the background before its first part, so
that vLLM's install and start overlap the other tests, or a developer's own `./run vllm`), else starts one with
`./run vllm --background`, and stops at the end of the session only what it started. A vLLM that does not come up
fails the test with its log's tail: these tests are the proof that the explorer talks to a real engine."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from explorer.remote import engine

RUN = engine.REPO_ROOT / "run"
STATE = engine.REPO_ROOT / ".vllm" / "server.json"  # where `./run vllm` writes it (tests/conftest.py hides it)
# Install (~30 s on a fresh clone, seconds once the venv is there) and start (~1 min on 2 idle cores), with room for
# a machine busy with other tests.
VLLM_START_TIMEOUT_S = 600.0


def log_tail(path: str, chars: int = 3000) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return f"(no log at {path})"


@pytest.fixture(scope="session")
def real_vllm() -> Iterator[str]:
    started_here = engine.read_state(STATE) is None
    if started_here:
        launched = subprocess.run(
            [str(RUN), "vllm", "--background"], cwd=engine.REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        if launched.returncode != 0:
            pytest.fail(f"./run vllm --background failed ({launched.returncode}): {launched.stderr[-2000:]}")
    try:  # a launch of ours that never came up is stopped too
        try:
            state = engine.wait_for_engine(VLLM_START_TIMEOUT_S, STATE)
        except RuntimeError as exc:
            written = engine.load_state(STATE)
            pytest.fail(f"{exc}\n{log_tail(written.log) if written else ''}")
        yield state.base_url
    finally:
        if started_here:
            subprocess.run([str(RUN), "vllm", "--stop"], cwd=engine.REPO_ROOT, capture_output=True, timeout=120)


def with_real_vllm() -> dict[str, str]:
    """The environment of a process that should find the real vLLM by default, as a user's shell does."""
    return {**os.environ, engine.STATE_ENV: str(STATE)}
