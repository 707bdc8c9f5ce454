"""The owner the app starts for itself (explorer/hosting/client.py `LocalOwner`) is watched: killed, it is started again
within seconds and says so (`restarts`), and the job it was running ends in the one line the page shows; it never
outlives the web process that started it. Real child processes (EXPLORER_WARM=0: they load nothing at start)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from explorer.hosting.client import RESTARTED, LocalOwner, OwnerGone

pytestmark = pytest.mark.server

REPO_ROOT = Path(__file__).resolve().parent.parent
SAYS_SO_S = 5.0  # the bound: the web tier says the device restarted, and has a new one, within 5 s


@pytest.fixture
def local_owner() -> Iterator[LocalOwner]:
    started = LocalOwner({**os.environ, "EXPLORER_WARM": "0"})
    try:
        started.wait_ready(60)
        yield started
    finally:
        started.stop()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_owner_is_restarted_within_5_s_and_its_job_ends_in_one_line(local_owner: LocalOwner) -> None:
    first = local_owner.client.health()
    assert first["pid"] == local_owner.process.pid and local_owner.restarts == 0

    # A job in flight: re-measuring the device figures, which takes seconds; killed once it holds the device.
    stream = local_owner.client.job("figures", {"device": "cpu", "dtype": "float32"})
    event = next(stream)
    while event.name != "line":
        event = next(stream)
    assert event.data["holding"] is True

    os.kill(first["pid"], signal.SIGKILL)
    killed_s = time.monotonic()
    with pytest.raises(OwnerGone) as lost:
        for _ in stream:
            pass
    assert str(lost.value) == RESTARTED == "The device restarted: run again."
    assert time.monotonic() - killed_s < SAYS_SO_S

    while True:
        try:
            health = local_owner.client.health(timeout_s=1.0)
            if health["pid"] != first["pid"]:
                break
        except OwnerGone:
            pass
        child = local_owner.process
        said = f"restarts {local_owner.restarts}, child {child.pid} exit code {child.poll()}"
        assert time.monotonic() - killed_s < SAYS_SO_S, f"no new owner answered within 5 s ({said})"
        time.sleep(0.05)
    assert health["ok"] is True and health["pid"] == local_owner.process.pid
    assert local_owner.restarts == 1 and local_owner.restarted_unix_s is not None
    # The new owner takes jobs at once (a job that needs no device ends in one "error" event once torch is in, with
    # no more OwnerGone; meanwhile it says the owner is starting).
    events = [e.name for e in local_owner.client.job("no-such-job", {})]
    assert [e for e in events if e not in ("tick", "progress")] == ["error"], events
    time.sleep(1.0)
    assert local_owner.restarts == 1  # started once, and it stayed up


def test_stop_ends_the_child_and_nothing_starts_it_again(local_owner: LocalOwner) -> None:
    pid = local_owner.process.pid
    local_owner.stop()
    assert gone(pid)
    time.sleep(1.5)  # three rounds of the watch
    assert local_owner.process is None and local_owner.restarts == 0
    with pytest.raises(OwnerGone):
        local_owner.client.health(timeout_s=1.0)


# A web process that starts its owner, says the owner's pid, and then waits to be killed.
WEB_PROCESS = """
import os, sys, time
from explorer.hosting.client import LocalOwner
owner = LocalOwner({**os.environ, "EXPLORER_WARM": "0"})
owner.wait_ready(60)
print(owner.process.pid, flush=True)
time.sleep(600)
"""


def test_the_owner_does_not_outlive_the_web_process_that_started_it() -> None:
    web = subprocess.Popen(
        [sys.executable, "-c", WEB_PROCESS], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        owner_pid = int(web.stdout.readline())
        assert not gone(owner_pid)
        web.kill()  # no stop(), no atexit: only the owner's own watch of its parent can end it
        web.wait(10)
        deadline = time.monotonic() + 5.0
        while not gone(owner_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(owner_pid), "the owner outlived the web process that started it"
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the web process's group (its own session)
            os.killpg(web.pid, signal.SIGKILL)
        web.wait(10)
