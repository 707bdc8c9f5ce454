"""A run lets other sessions' one-pass turns (a Next token, a step-mode Prefill) through between its passes
(`DeviceQueue.make_way`, called by the device owner's run job at each pass boundary, `Turn.make_way`): the Next token
waits for one pass of the run, not the whole run, and the run's own times do not change (its clock is paused).
Hand-made clocks for the queue's bookkeeping; the owner, its jobs and the tiny model for the run itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from explorer.core.engine import Request, warm_up
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import Trace
from explorer.owner.line import DeviceQueue
from explorer.owner.room_size import waits_against_work_ahead
from tests.owner_support import OwnerInThread
from tests.test_hosted import FakeClock  # the queue's hand-made clock

WAIT_S = 10.0  # a bound no healthy turn here comes near: a hang fails instead of blocking the suite


def test_a_run_makes_way_for_the_one_pass_turns_waiting_and_resumes_before_the_rest() -> None:
    clock = FakeClock()
    queue = DeviceQueue(clock=clock)
    run = queue.enter("run", "a", passes=24)
    other_run = queue.enter("run", "b", passes=10)
    step = queue.enter("step", "c", passes=1)
    prefill = queue.enter("prefill", "d", passes=1)
    assert queue.holds(run)
    clock.now = 2.0
    queue.record_work(run, 4, 1.6, 1.9)

    resumed = queue.make_way(run)  # 24 passes said, 4 recorded

    assert resumed is not None and resumed.resumed and resumed.passes == 20 and not resumed.one_pass
    assert queue.holds(step)  # the one-pass turns first, in their own order
    assert [queue.status(t).ahead for t in (prefill, resumed, other_run)] == [1, 2, 3]  # then the run, then the rest
    aside = queue.turns[-1]
    assert (aside.ended, aside.passes, aside.pass_s, aside.held_s) == ("made way", 4, 1.6, 2.0)
    assert not aside.resumed
    for ticket in (step, prefill):
        clock.now += 0.5
        queue.release(ticket)
    assert queue.holds(resumed)
    assert queue.status(other_run).passes_ahead == 20  # the waiting line counts what the run has left
    clock.now += 4.0
    queue.record_work(resumed, 20, 3.2, 3.8)
    queue.release(resumed)
    back = queue.turns[-1]
    assert (back.ended, back.resumed, back.waited_s, back.passes) == ("released", True, 1.0, 20)
    # the estimate for the next run: the whole turn's 6 s held over its 24 passes, not the last stretch's 4 s over 20
    assert queue.status(other_run).holding
    waiting = queue.enter("run", "e", passes=24)
    assert queue.status(waiting).expected_wait_s == pytest.approx(10 * 6.0 / 24)
    # a resumed run waited for the turns it let through: that is no visitor's wait
    assert [w.turn.what for w in waits_against_work_ahead(list(queue.turns))] == ["step", "prefill"]


def test_a_next_token_behind_a_run_that_makes_way_is_told_one_pass_not_the_whole_run() -> None:
    clock = FakeClock()
    queue = DeviceQueue(clock=clock)
    warm = queue.enter("step", passes=1)  # one finished turn: 0.1 s a pass, for the estimates
    clock.now = 0.1
    queue.release(warm)
    run = queue.enter("run", passes=24, makes_way=True)
    lab = queue.enter("lab")
    step = queue.enter("step", passes=1)
    other_run = queue.enter("run", passes=10, makes_way=True)
    status = queue.status(step)
    assert (status.ahead, status.passes_ahead, status.other_work_ahead) == (1, 1, ())  # not the run's 24, nor the lab
    assert status.expected_wait_s == pytest.approx(0.1)
    assert queue.status(other_run).passes_ahead == 24 + 1  # a longer turn waits for the whole run (and the step)
    queue.release(lab)
    queue.release(run)
    # behind work that does not make way (a run from At scale, a lab), a one-pass turn waits for all of it
    queue.enter("run", passes=24)
    waiting = queue.enter("step", passes=1)
    assert queue.holds(step) and queue.status(waiting).passes_ahead == 1 + 10 + 24


def test_a_run_keeps_the_device_when_no_one_pass_turn_waits() -> None:
    queue = DeviceQueue()
    run = queue.enter("run", passes=24)
    queue.enter("run", passes=10)
    queue.enter("lab")
    assert queue.make_way(run) is None and queue.holds(run)
    assert queue.make_way(queue.enter("step", passes=1)) is None  # only the holder makes way


def test_the_generic_warm_up_lets_others_through_after_each_forward(tiny_lm: LoadedModel) -> None:
    calls: list[int] = []
    warm_up(tiny_lm, between=lambda: calls.append(1))
    assert len(calls) == 3  # after the prefill and after each of the two decodes


# --- on the device owner: a Next token job between the passes of a Run job ------------------------------------------
@pytest.fixture
def owner() -> Iterator[OwnerInThread]:
    started = OwnerInThread()
    yield started
    started.stop()


def body_for(model_dir: Path, request: Request) -> dict[str, Any]:
    return {"model": str(model_dir), "device": "cpu", "dtype": "float32", "request": asdict(request)}


def done_of(client: Any, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    events = list(client.job(kind, body))
    assert events[-1].name == "done", events[-1]
    return events[-1].data


def test_a_next_token_waits_one_pass_of_a_run_not_the_whole_run(
    owner: OwnerInThread, tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Run of 24 passes (each slowed to `pass_s`) holds the device; a Next token asks after its first pass. It gets
    the device at the next pass boundary (the run makes way) and holds it for `hold_s`, and the run's ITLs (its clock
    paused meanwhile) stay far below that."""
    from explorer.core import engine

    pass_s, hold_s = 0.05, 0.4
    real_decode = engine.decode_one_token

    def slow_decode(*args: object, **kwargs: object) -> object:
        time.sleep({"job-run": pass_s, "job-step": hold_s}.get(threading.current_thread().name, 0.0))
        return real_decode(*args, **kwargs)

    client = owner.client()
    body = body_for(tiny_llama_dir, Request("hi", max_new_tokens=4, use_chat_template=False))
    handle = done_of(client, "prefill", body)["handle"]
    monkeypatch.setattr(engine, "decode_one_token", slow_decode)
    run_request = Request("The cat sat", max_new_tokens=24, use_chat_template=False, stop_at_eos=False)
    first_pass, ends = threading.Event(), {}

    def run() -> None:
        for event in client.job("run", {**body_for(tiny_llama_dir, run_request), "capture": False}):
            if event.name == "pass":
                first_pass.set()
            if event.name == "trace":
                ends["run"] = (time.monotonic(), Trace.from_dict(event.data))

    runner = threading.Thread(target=run)
    runner.start()
    assert first_pass.wait(60)
    step = done_of(client, "step", {"handle": handle})
    ends["step"] = time.monotonic()
    runner.join(60)
    run_ended, trace = ends["run"]
    assert ends["step"] < run_ended  # it went between the run's passes, not after the run
    assert step["record"]["index"] == 1
    assert len(trace.passes) == 24 and max(trace.itl_s) < hold_s  # the run's clock was paused while it waited
    turns = owner.owner.queue.turns
    stretches = [t for t in turns if t.what == "run"]
    assert stretches[0].ended == "made way" and stretches[-1].resumed and stretches[-1].ended == "released"
    assert sum(t.passes for t in stretches) == 24
    step_turn = next(t for t in turns if t.what == "step")
    assert step_turn.waited_s < 12 * pass_s and step_turn.ended == "released"
