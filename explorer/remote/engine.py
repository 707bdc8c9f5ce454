"""The local vLLM that `./run vllm` starts: where it writes what it started (pid, port, log), how the Endpoint page and
`python -m explorer remote` find it by default, and a waiter with a deadline (`python -m explorer.remote.engine wait`)
for whoever started it in the background (CI starts it early and waits for it later).

Plain Python and httpx only: the web tier imports this, and it never imports torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from explorer.core.paths import EMBEDDED

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_ENV = "EXPLORER_VLLM_STATE"  # another state file (a test's own server), else REPO_ROOT/.vllm/server.json
DEFAULT_PORT = 8017  # `./run vllm`'s port unless --port: away from 8000/8080, which other servers take first
MODEL_NAME = EMBEDDED  # served as the explorer's own model name, so one name means the same model on both sides
START_HINT = "no local vLLM is running (`./run vllm` starts one in about a minute, found here by default)"
HEALTH_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class EngineState:
    """What `./run vllm` wrote when it started a server: enough to find it, wait for it and stop it."""

    pid: int  # the process group leader (./run's launcher, which becomes the API server by exec)
    port: int
    log: str  # the server's log: install, conversion and vLLM's own lines
    started_at: float  # time.time() when the launch began

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> EngineState:
        return cls(int(data["pid"]), int(data["port"]), str(data["log"]), float(data["started_at"]))  # type: ignore[arg-type]


def state_path() -> Path:
    return Path(os.environ.get(STATE_ENV) or REPO_ROOT / ".vllm" / "server.json")


def load_state(path: Path | None = None) -> EngineState | None:
    """The state `./run vllm` last wrote, alive or not; None when there is none or it cannot be read."""
    try:
        return EngineState.from_dict(json.loads((path or state_path()).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_state(path: Path | None = None) -> EngineState | None:
    """The state `./run vllm` wrote, when its process still lives; None otherwise (never started, or it ended)."""
    state = load_state(path)
    return state if state is not None and process_alive(state.pid) else None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def healthy(base_url: str) -> bool:
    """vLLM's GET /health (beside /v1) answers 200 once the engine can take requests."""
    root = base_url.removesuffix("/v1")
    try:
        return httpx.get(f"{root}/health", timeout=HEALTH_TIMEOUT_S, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def local_engine_url() -> str | None:
    """The base URL of a running, healthy `./run vllm` server; None when there is none (the caller says START_HINT)."""
    state = read_state()
    return state.base_url if state is not None and healthy(state.base_url) else None


def wait_for_engine(deadline_s: float, path: Path | None = None, poll_s: float = 1.0) -> EngineState:
    """Poll until the started server answers /health; RuntimeError with one line naming the log when it ended or the
    deadline passed."""
    end = time.monotonic() + deadline_s
    where = path or state_path()
    while True:
        state = load_state(where)
        if state is None:
            raise RuntimeError(f"no vLLM was started (no state file {where}): run `./run vllm --background` first")
        if not process_alive(state.pid):
            raise RuntimeError(f"the vLLM launch (pid {state.pid}) ended before answering /health; see {state.log}")
        if healthy(state.base_url):
            return state
        if time.monotonic() >= end:
            raise RuntimeError(f"vLLM did not answer {state.base_url} /health within {deadline_s:g} s; see {state.log}")
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer.remote.engine")
    commands = parser.add_subparsers(dest="command", required=True)
    wait = commands.add_parser("wait", help="wait for the server `./run vllm --background` started; print its URL")
    wait.add_argument("--deadline-s", type=float, default=600.0)
    commands.add_parser("url", help="print the running server's base URL, or fail with a hint")
    args = parser.parse_args(argv)
    try:
        if args.command == "wait":
            print(wait_for_engine(args.deadline_s).base_url)
            return 0
        url = local_engine_url()
        if url is None:
            raise RuntimeError(START_HINT)
        print(url)
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
