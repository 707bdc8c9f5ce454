"""A run lets other sessions' one-pass turns (a Next token, a step-mode Prefill) through between its passes
(`DeviceQueue.step_aside`, `explorer.ui.device_turn.RunOnTurn`): the Next token waits for one pass of the run, not the
whole run, and the run's own times do not change (its clock is paused). Hand-made clocks for the queue's bookkeeping;
threads and the tiny model for the run itself."""

from __future__ import annotations

import threading
import time

import pytest
from explorer.hosting.quiet import PassGate, TimedRun
from explorer.ui.device_turn import DeviceTurn, RunOnTurn

from explorer.core import engine
from explorer.core.device import FiguresStore
from explorer.core.engine import OnPass, Request, check_request, generate, warm_up
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile
from explorer.hosting.queue import DeviceQueue
from explorer.labs.room_size import waits_against_work_ahead
from explorer.ui import runner
from tests.test_hosted import FakeClock  # the queue's hand-made clock

WAIT_S = 10.0  # a bound no healthy turn here comes near: a hang fails instead of blocking the suite


def test_a_run_steps_aside_for_the_one_pass_turns_waiting_and_resumes_before_the_rest() -> None:
    clock = FakeClock()
    queue = DeviceQueue(clock=clock)
    run = queue.enter("run", "a", passes=24)
    other_run = queue.enter("run", "b", passes=10)
    step = queue.enter("step", "c", passes=1)
    prefill = queue.enter("prefill", "d", passes=1)
    assert queue.holds(run)
    clock.now = 2.0
    queue.record_work(run, 4, 1.6, 1.9)

    resumed = queue.step_aside(run)  # 24 passes said, 4 recorded

    assert resumed is not None and resumed.resumed and resumed.passes == 20 and not resumed.one_pass
    assert queue.holds(step)  # the one-pass turns first, in their own order
    assert [queue.status(t).ahead for t in (prefill, resumed, other_run)] == [1, 2, 3]  # then the run, then the rest
    aside = queue.turns[-1]
    assert (aside.ended, aside.passes, aside.pass_s, aside.held_s) == ("stepped aside", 4, 1.6, 2.0)
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


def test_a_next_token_behind_a_run_that_steps_aside_is_told_one_pass_not_the_whole_run() -> None:
    clock = FakeClock()
    queue = DeviceQueue(clock=clock)
    warm = queue.enter("step", passes=1)  # one finished turn: 0.1 s a pass, for the estimates
    clock.now = 0.1
    queue.release(warm)
    run = queue.enter("run", passes=24, steps_aside=True)
    lab = queue.enter("lab")
    step = queue.enter("step", passes=1)
    other_run = queue.enter("run", passes=10, steps_aside=True)
    status = queue.status(step)
    assert (status.ahead, status.passes_ahead, status.other_work_ahead) == (1, 1, ())  # not the run's 24, nor the lab
    assert status.expected_wait_s == pytest.approx(0.1)
    assert queue.status(other_run).passes_ahead == 24 + 1  # a longer turn waits for the whole run (and the step)
    queue.release(lab)
    queue.release(run)
    # behind work that does not step aside (a run from At scale, a lab), a one-pass turn waits for all of it
    queue.enter("run", passes=24)
    waiting = queue.enter("step", passes=1)
    assert queue.holds(step) and queue.status(waiting).passes_ahead == 1 + 10 + 24


def test_a_run_keeps_the_device_when_no_one_pass_turn_waits() -> None:
    queue = DeviceQueue()
    run = queue.enter("run", passes=24)
    queue.enter("run", passes=10)
    queue.enter("lab")
    assert queue.step_aside(run) is None and queue.holds(run)
    assert queue.step_aside(queue.enter("step", passes=1)) is None  # only the holder steps aside


def test_the_generic_warm_up_lets_others_through_after_each_forward(tiny_lm: LoadedModel) -> None:
    calls: list[int] = []
    warm_up(tiny_lm, between=lambda: calls.append(1))
    assert len(calls) == 3  # after the prefill and after each of the two decodes


def test_a_next_token_runs_between_a_runs_passes_and_the_runs_times_exclude_it(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    """A run of 12 tokens holds the device; a Next token asks after the run's first pass. It gets the device at the
    next pass boundary, holds it for 0.4 s, and the run's ITLs (its clock paused meanwhile) stay far below that."""
    queue, gate = DeviceQueue(), PassGate()
    hold_s = 0.4
    first_pass = threading.Event()
    step_done: dict[str, float] = {}

    def next_token() -> None:
        assert first_pass.wait(WAIT_S)
        ticket = queue.enter("step", "visitor", passes=1)
        assert queue.wait(ticket, WAIT_S)
        with gate.timing():
            time.sleep(hold_s)  # its pass, as far as the run can tell
        step_done["at"] = time.monotonic()
        queue.release(ticket)

    turn = DeviceTurn(queue, queue.enter("run", "presenter", passes=12))
    on_turn = RunOnTurn(turn)

    def tally(record: object) -> None:
        on_turn.tally(record)  # type: ignore[arg-type]
        first_pass.set()
        time.sleep(0.02)  # a pass boundary the visitor can reach before the run ends

    visitor = threading.Thread(target=next_token)
    visitor.start()
    checked = check_request(tiny_lm, Request("The cat sat", max_new_tokens=12, stop_at_eos=False))
    with TimedRun(gate) as timed:
        trace = generate(tiny_lm, checked, cpu_figures, OnPass(None, lambda: timed.between(on_turn.let_through), tally))
    run_ended = time.monotonic()
    on_turn.done()
    queue.release(turn.ticket)
    visitor.join(WAIT_S)

    assert step_done["at"] < run_ended  # it went between the run's passes, not after the run
    assert len(trace.passes) == 12 and max(trace.itl_s) < hold_s  # the run's clock was paused while it waited
    stretches = [t for t in queue.turns if t.what == "run"]
    assert [t.ended for t in stretches] == ["stepped aside", "released"] and stretches[1].resumed
    assert sum(t.passes for t in stretches) == 12
    assert sum(t.pass_s for t in stretches) == pytest.approx(sum(p.wall_s for p in trace.passes))
    step_turn = next(t for t in queue.turns if t.what == "step")
    assert step_turn.waited_s < 2.0 and step_turn.ended == "released"


def test_a_runs_warm_up_forwards_run_inside_the_gates_section(
    tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_streaming` (outside a script run, Streamlit draws nothing): with the device idle, the generic warm-up
    runs, each of its forwards while the run's thread holds the gate, as its timed passes are."""
    gate = PassGate()
    inside: list[bool] = []
    real_decode = engine.decode_one_token

    def decode(*args: object) -> object:
        inside.append(gate._timing == threading.get_ident())  # noqa: SLF001 - whose section it is
        return real_decode(*args)

    monkeypatch.setattr(engine, "decode_one_token", decode)
    checked = check_request(tiny_lm, Request("The cat sat", max_new_tokens=3, stop_at_eos=False))
    trace = runner.run_streaming(tiny_lm, checked, FiguresStore(), gate)
    assert len(trace.passes) == 3
    assert inside and all(inside)  # the warm-up's decodes (and the run's own, on the eager path)
