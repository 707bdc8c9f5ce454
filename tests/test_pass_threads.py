"""A turn's intra-op threads follow the free cores: all of them on a quiet machine, fewer while other work is
runnable, put back after the turn; the turn log says what each turn ran on."""

from __future__ import annotations

from pathlib import Path

import torch

from explorer.hosting.pass_threads import PassThreads, fitted_threads, runnable_tasks
from explorer.hosting.queue import DeviceQueue


def test_the_threads_are_the_cores_the_other_runnable_tasks_leave_free() -> None:
    assert fitted_threads(most=2, cores=2, runnable=1) == 2  # only the turn's own thread runs: a quiet machine
    assert fitted_threads(most=2, cores=2, runnable=2) == 1
    assert fitted_threads(most=2, cores=2, runnable=11) == 1  # a room's browsers on the same 2 cores: never 0
    assert fitted_threads(most=16, cores=16, runnable=5) == 12
    assert fitted_threads(most=4, cores=16, runnable=1) == 4  # never more than the process would use anyway
    assert fitted_threads(most=2, cores=2, runnable=None) == 2  # unreadable: nothing changes


def test_runnable_tasks_come_from_proc_loadavg(tmp_path: Path) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("9.89 7.12 3.21 5/823 12345\n", encoding="ascii")
    assert runnable_tasks(loadavg) == 5
    loadavg.write_text("garbled\n", encoding="ascii")
    assert runnable_tasks(loadavg) is None and runnable_tasks(tmp_path / "missing") is None
    assert (runnable_tasks() or 1) >= 1  # this machine's own, where /proc has it


def test_a_turn_runs_on_the_fitted_threads_and_gives_them_back() -> None:
    current = [2]
    calls: list[int] = []

    def set_threads(n: int) -> None:
        calls.append(n)
        current[0] = n

    busy = PassThreads(cores=2, read_runnable=lambda: 6, threads=(lambda: current[0], set_threads))
    with busy.fitted() as threads:
        assert threads == 1 and current == [1]
    assert current == [2] and calls == [1, 2]
    quiet = PassThreads(cores=2, read_runnable=lambda: 1, threads=(lambda: current[0], set_threads))
    with quiet.fitted() as threads:
        assert threads == 2
    assert calls == [1, 2]  # nothing to change: torch is not touched


def test_torchs_threads_are_set_on_the_holders_thread_only_for_its_turn() -> None:
    before = torch.get_num_threads()
    with PassThreads(cores=before, read_runnable=lambda: before + 5).fitted() as threads:
        assert threads == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_the_turn_log_keeps_the_threads_a_turn_ran_on(tmp_path: Path) -> None:
    queue = DeviceQueue(log_path=tmp_path / "turns.jsonl")
    ticket = queue.enter("step", "abc", passes=1)
    assert queue.wait(ticket, 0)
    queue.record_work(ticket, 1, 0.06, 0.06, threads=1)
    queue.release(ticket)
    assert queue.turns[-1].threads == 1
