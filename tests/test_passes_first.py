"""The interpreter's switch interval is short while a session holds the device, and what was there before comes back
after (`explorer.hosting.passes_first`, `explorer.ui.device_turn.device_turn`). The speed-up itself is a benchmark's
(`benchmarks/gil_beside.py`), not a timed test."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from explorer.hosting.passes_first import PASS_SWITCH_INTERVAL_S, SwitchInterval
from explorer.hosting.queue import DeviceQueue
from explorer.hosting.server_session import ServerSession
from explorer.ui import device_turn as ui_turn

WAIT_S = 10.0


@pytest.fixture
def switch_interval_kept() -> Iterator[float]:
    """The process's interval before the test, put back after it whatever the test did."""
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)


def test_short_while_held_nested_and_from_two_threads_then_as_before(switch_interval_kept: float) -> None:
    sys.setswitchinterval(0.004)
    passes_first = SwitchInterval(25e-6)
    inside, leave = threading.Event(), threading.Event()

    def other_holder() -> None:
        with passes_first.held():
            inside.set()
            leave.wait(WAIT_S)

    with passes_first.held():
        assert sys.getswitchinterval() == pytest.approx(25e-6)
        with passes_first.held():
            assert sys.getswitchinterval() == pytest.approx(25e-6)
        thread = threading.Thread(target=other_holder)
        thread.start()
        assert inside.wait(WAIT_S)
    assert sys.getswitchinterval() == pytest.approx(25e-6)  # the other holder is still inside
    leave.set()
    thread.join(WAIT_S)
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_a_device_turn_holds_the_short_interval_and_gives_it_back_even_when_its_work_fails(
    monkeypatch: pytest.MonkeyPatch, switch_interval_kept: float
) -> None:
    queue = DeviceQueue()
    monkeypatch.setattr(ui_turn, "server_session", lambda: ServerSession(queue=queue))
    monkeypatch.setattr(ui_turn, "get_script_run_ctx", lambda **_: SimpleNamespace(session_id="visitor"))
    with ui_turn.device_turn("step", passes=1):
        assert sys.getswitchinterval() == pytest.approx(PASS_SWITCH_INTERVAL_S)
    assert sys.getswitchinterval() == pytest.approx(switch_interval_kept)
    with pytest.raises(RuntimeError), ui_turn.device_turn("step", passes=1):
        raise RuntimeError("the pass failed")
    assert sys.getswitchinterval() == pytest.approx(switch_interval_kept)
    assert [t.ended for t in queue.turns] == ["released", "released"]
