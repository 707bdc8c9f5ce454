"""A turn's thread runs ahead of other work for the CPU where the OS allows it, and gets its own priority back after
the turn; where it is refused, nothing changes and the turn log says so."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from explorer.hosting.pass_priority import PASS_NICE, PassPriority
from explorer.hosting.queue import DeviceQueue
from explorer.hosting.server_session import ServerSession
from explorer.ui import device_turn as ui_turn


class FakeNice:
    """Per-thread nice values, and what was set on which thread."""

    def __init__(self, start: int = 0, refuse: bool = False) -> None:
        self.values: dict[int, int] = {}
        self.start, self.refuse = start, refuse
        self.calls: list[tuple[int, int]] = []

    def get(self, thread_id: int) -> int:
        return self.values.get(thread_id, self.start)

    def set(self, thread_id: int, nice: int) -> None:
        if self.refuse and nice < self.get(thread_id):
            raise PermissionError("raising a priority needs CAP_SYS_NICE")
        self.calls.append((thread_id, nice))
        self.values[thread_id] = nice


def priority(fake: FakeNice, supported: bool = True) -> PassPriority:
    return PassPriority(supported=supported, get=fake.get, set=fake.set)


def test_the_turns_thread_runs_at_the_raised_priority_and_gets_its_own_back() -> None:
    fake, me = FakeNice(), threading.get_native_id()
    with priority(fake).raised() as nice:
        assert nice == PASS_NICE and fake.get(me) == PASS_NICE
    assert fake.get(me) == 0 and fake.calls == [(me, PASS_NICE), (me, 0)]


def test_its_own_priority_comes_back_when_the_turn_fails() -> None:
    fake, me = FakeNice(start=5), threading.get_native_id()
    with pytest.raises(RuntimeError), priority(fake).raised():
        raise RuntimeError("a pass failed")
    assert fake.get(me) == 5


def test_where_raising_is_refused_or_not_supported_nothing_changes() -> None:
    refused = FakeNice(refuse=True)
    with priority(refused).raised() as nice:
        assert nice is None
    assert refused.calls == []
    elsewhere = FakeNice()
    with priority(elsewhere, supported=False).raised() as nice:  # not Linux: a thread id would name a process
        assert nice is None
    assert elsewhere.calls == []


def test_a_thread_already_that_high_is_left_alone() -> None:
    fake = FakeNice(start=-15)
    with priority(fake).raised() as nice:
        assert nice == -15
    assert fake.calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_on_this_machine_the_thread_reads_what_the_turn_says() -> None:
    me = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, me)
    with PassPriority().raised() as nice:
        inside = os.getpriority(os.PRIO_PROCESS, me)
        assert inside == (before if nice is None else nice)  # refused: unchanged, and the turn says None
    assert os.getpriority(os.PRIO_PROCESS, me) == before


def test_the_turn_log_keeps_the_priority_a_turn_ran_at(tmp_path: Path) -> None:
    queue = DeviceQueue(log_path=tmp_path / "turns.jsonl")
    ticket = queue.enter("step", "abc", passes=1)
    assert queue.wait(ticket, 0)
    queue.record_work(ticket, 1, 0.06, 0.06, threads=1, nice=PASS_NICE)
    queue.release(ticket)
    assert queue.turns[-1].nice == PASS_NICE


def test_a_device_turns_work_runs_at_the_raised_priority_and_the_log_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, me = FakeNice(), threading.get_native_id()
    session = ServerSession(priority=priority(fake))
    monkeypatch.setattr(ui_turn, "server_session", lambda: session)
    monkeypatch.setattr(ui_turn, "get_script_run_ctx", lambda **_: SimpleNamespace(session_id="visitor"))
    with ui_turn.device_turn("step", passes=1) as turn:
        assert fake.get(me) == PASS_NICE
        turn.ran(1, 0.06, 0.06)
    assert fake.get(me) == 0 and session.queue.turns[-1].nice == PASS_NICE


def test_a_turn_waiting_in_line_already_runs_at_the_raised_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken for its turn at nice 0, a thread in a room took up to 0.2 s to start, with everyone behind it waiting."""
    fake = FakeNice()
    session = ServerSession(priority=priority(fake))
    monkeypatch.setattr(ui_turn, "server_session", lambda: session)
    monkeypatch.setattr(ui_turn, "get_script_run_ctx", lambda **_: SimpleNamespace(session_id="visitor"))
    holder = session.queue.enter("run", "someone else", passes=4)
    assert session.queue.wait(holder, 0)
    waiter_id: list[int] = []
    done = threading.Event()

    def next_token() -> None:
        waiter_id.append(threading.get_native_id())
        with ui_turn.device_turn("step", passes=1):
            pass
        done.set()

    thread = threading.Thread(target=next_token)
    thread.start()
    for _ in range(200):  # until it has raised its priority: it entered the line just before
        if waiter_id and fake.get(waiter_id[0]) == PASS_NICE:
            break
        threading.Event().wait(0.05)
    assert fake.get(waiter_id[0]) == PASS_NICE and session.queue.waiting == 1  # in line, not holding the device yet
    session.queue.release(holder)
    assert done.wait(10.0)
    thread.join(10.0)
    assert fake.get(waiter_id[0]) == 0


def test_the_systemd_unit_lets_its_user_raise_a_turn_to_pass_nice_and_no_further() -> None:
    unit = (Path(__file__).resolve().parents[1] / "deploy" / "explorer.service").read_text(encoding="utf-8")
    limits = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("LimitNICE=")]
    assert len(limits) == 1 and 20 - int(limits[0]) == PASS_NICE  # RLIMIT_NICE r allows nice values down to 20 - r
