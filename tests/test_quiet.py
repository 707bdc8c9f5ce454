"""Timed passes kept apart from drawing (`explorer.hosting.quiet`), what ran beside them (`explorer.hosting.beside`),
and how a disturbed pass is marked: threads and events for the gate, hand-made counters for the arithmetic."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import StopException

from explorer.charts import step_mode as step_charts
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import DISTURBED_SHARE, Trace
from explorer.hosting import beside
from explorer.hosting.queue import SERVER_OWNER, DeviceQueue
from explorer.hosting.quiet import DRAWING_WAIT_SHARE, SHARED_WITHIN_S, PassGate, TimedRun
from explorer.hosting.server_session import ServerSession

WAIT_S = 10.0  # a bound no healthy step here comes near: a hang fails instead of blocking the suite


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drawing_in_a_thread(gate: PassGate, inside: threading.Event, leave: threading.Event) -> threading.Thread:
    """A thread that enters a drawing section, says so, and stays until `leave` is set."""

    def draw() -> None:
        with gate.drawing():
            inside.set()
            leave.wait(WAIT_S)

    thread = threading.Thread(target=draw)
    thread.start()
    assert inside.wait(WAIT_S)
    return thread


def timing_in_a_thread(gate: PassGate, inside: threading.Event, leave: threading.Event) -> threading.Thread:
    """A thread, not yet started, that times a pass through `gate`, says so, and stays in it until `leave` is set."""

    def time_a_pass() -> None:
        with gate.timing():
            inside.set()
            leave.wait(WAIT_S)

    return threading.Thread(target=time_a_pass)


def test_a_pass_waits_for_the_chart_in_flight_then_new_charts_wait_for_the_pass() -> None:
    gate = PassGate(wait_for_drawing_s=WAIT_S, drawing_waits_at_most_s=WAIT_S)
    inside, leave = threading.Event(), threading.Event()
    chart = drawing_in_a_thread(gate, inside, leave)
    timed_pass = threading.Event()
    order: list[str] = []

    def time_a_pass() -> None:
        with gate.timing() as timed:
            order.append("pass")
            timed_pass.set()
            time.sleep(0.2)  # the pass: a chart started now must wait for its end
            order.append("pass ends")
        assert timed.beside is not None and timed.drawing_in_flight == 0

    timer = threading.Thread(target=time_a_pass)
    timer.start()
    assert not timed_pass.wait(0.2)  # held back by the chart in flight
    leave.set()
    chart.join(WAIT_S)
    assert timed_pass.wait(WAIT_S)
    with gate.drawing():  # a new chart, started during the pass
        order.append("chart")
    timer.join(WAIT_S)
    assert order == ["pass", "pass ends", "chart"]


def test_a_pass_waits_no_longer_than_its_bound_and_counts_the_chart_it_ran_beside() -> None:
    gate = PassGate(wait_for_drawing_s=0.05)
    inside, leave = threading.Event(), threading.Event()
    chart = drawing_in_a_thread(gate, inside, leave)
    try:
        with gate.timing() as timed:
            pass
        assert timed.drawing_in_flight == 1 and 0.05 <= timed.waited_for_drawing_s < WAIT_S
    finally:
        leave.set()
        chart.join(WAIT_S)


def test_a_pass_waits_for_charts_at_most_a_share_of_the_last_sections_time() -> None:
    """In a room nearly every pass found a chart in flight: a 60 ms decode then waited 0.25 s for it. The bound follows
    the passes: at most DRAWING_WAIT_SHARE of the last timed section, never more than `wait_for_drawing_s`."""
    now = [10.0]
    gate = PassGate(wait_for_drawing_s=0.25, clock=lambda: now[0])
    assert gate.drawing_wait_s() == 0.25  # nothing timed yet
    with gate.timing():
        now[0] += 0.06  # a 60 ms decode
    assert gate.drawing_wait_s() == pytest.approx(DRAWING_WAIT_SHARE * 0.06)
    with gate.timing():
        now[0] += 2.0  # a long prefill
    assert gate.drawing_wait_s() == 0.25
    run = TimedRun(gate)
    with run:
        now[0] += 0.08
        run.between()  # each of a run's passes is a section of its own
        assert gate.drawing_wait_s() == pytest.approx(DRAWING_WAIT_SHARE * 0.08)


def test_on_a_crowded_device_a_pass_waits_for_no_chart_and_counts_the_one_it_ran_beside() -> None:
    """Each turn in line would pay for the wait (a room of 8 waited for everyone's charts ahead of it): the pass goes
    at once, with the chart in flight counted beside it."""
    in_line = [2]
    gate = PassGate(wait_for_drawing_s=WAIT_S, in_line=lambda: in_line[0])
    inside, leave = threading.Event(), threading.Event()
    chart = drawing_in_a_thread(gate, inside, leave)
    try:
        assert gate.drawing_wait_s() == 0.0 and gate.crowded()
        with gate.timing() as timed:
            pass
        assert timed.drawing_in_flight == 1 and timed.waited_for_drawing_s < WAIT_S / 2
        in_line[0] = 0  # nobody behind it: the pass waits for the chart again, up to its bound
        assert gate.drawing_wait_s() > 0 and not gate.crowded()
        gate.shared = lambda: True  # but another session used the device lately: whoever clicks next would pay
        assert gate.drawing_wait_s() == 0.0
    finally:
        leave.set()
        chart.join(WAIT_S)


def test_the_device_is_crowded_with_turns_in_line_or_other_sessions_lately() -> None:
    assert not PassGate().crowded()  # one person's app: no line, nobody else
    assert PassGate(in_line=lambda: 1).crowded()
    assert PassGate(shared=lambda: True).crowded()


def test_a_server_sessions_gate_reads_the_line_and_who_used_the_device_lately() -> None:
    now = [1000.0]
    session = ServerSession(queue=DeviceQueue(wall_clock=lambda: now[0]))
    queue, gate = session.queue, session.gate
    warm_up = queue.enter("warm-up", SERVER_OWNER)
    queue.release(warm_up)  # the server's own turn: nobody's session
    mine = queue.enter("step", "a", passes=1)
    assert queue.wait(mine, 0) and gate.in_line() == 0 and not gate.crowded()
    other = queue.enter("step", "b", passes=1)
    assert gate.in_line() == 1 and gate.crowded()
    queue.release(mine)
    assert queue.wait(other, 0)
    queue.release(other)
    mine = queue.enter("step", "a", passes=1)
    assert queue.wait(mine, 0) and gate.in_line() == 0 and gate.crowded()  # b's turn just ended: a shared device
    now[0] += SHARED_WITHIN_S + 1
    assert not gate.crowded()  # the room has gone: a's passes get their twins again
    queue.release(mine)


def test_a_chart_waits_no_longer_than_its_bound_for_a_pass() -> None:
    gate = PassGate(drawing_waits_at_most_s=0.05)
    in_pass, leave = threading.Event(), threading.Event()
    timer = timing_in_a_thread(gate, in_pass, leave)
    timer.start()
    assert in_pass.wait(WAIT_S)
    started = time.monotonic()
    with gate.drawing():
        waited = time.monotonic() - started
    leave.set()
    timer.join(WAIT_S)
    assert 0.05 <= waited < WAIT_S


def test_the_thread_timing_passes_draws_its_own_page_without_waiting() -> None:
    gate = PassGate(drawing_waits_at_most_s=WAIT_S)
    with gate.timing(), gate.drawing(), gate.drawing():  # its live stream drawn between its own passes
        pass


def test_between_a_runs_passes_the_charts_held_back_go_first() -> None:
    gate = PassGate(wait_for_drawing_s=WAIT_S, drawing_waits_at_most_s=WAIT_S)
    order: list[str] = []
    waiting = threading.Event()
    with TimedRun(gate) as run:
        order.append("pass 0")

        def chart() -> None:
            waiting.set()
            with gate.drawing():
                order.append("chart")

        thread = threading.Thread(target=chart)
        thread.start()
        assert waiting.wait(WAIT_S)
        time.sleep(0.1)  # the chart is waiting for the run now
        run.between()  # the clock paused: the chart goes before pass 1
        order.append("pass 1")
        run.between()
    thread.join(WAIT_S)
    assert order == ["pass 0", "chart", "pass 1"] and len(run.passes_beside) == 2


def test_work_before_a_pass_is_inside_its_section_so_charts_wait_for_it_too() -> None:
    """A step's warm twin (`timing(before=...)`): a chart that starts during it waits, as during the pass."""
    gate = PassGate()
    twin_running, chart_in = threading.Event(), threading.Event()
    chart_in_during_twin: list[bool] = []

    def chart() -> None:
        assert twin_running.wait(WAIT_S)
        with gate.drawing():
            chart_in.set()

    thread = threading.Thread(target=chart)
    thread.start()

    def twin() -> None:
        twin_running.set()
        chart_in_during_twin.append(chart_in.wait(0.3))  # it would have drawn by now, were it let in

    with gate.timing(before=twin):
        chart_in_during_pass = chart_in.is_set()
    thread.join(WAIT_S)
    assert chart_in_during_twin == [False] and not chart_in_during_pass and chart_in.is_set()


def test_a_run_that_ends_while_another_thread_times_a_pass_leaves_that_section_alone() -> None:
    gate = PassGate()
    timing, leave = threading.Event(), threading.Event()
    thread = timing_in_a_thread(gate, timing, leave)  # another session's Next token

    def let_through_then_stopped() -> None:  # the run lets a Next token through and is stopped meanwhile
        thread.start()
        assert timing.wait(WAIT_S)
        raise StopException  # Streamlit's stop, raised at the pause line's next draw

    with pytest.raises(StopException), TimedRun(gate) as run:
        run.between(also=let_through_then_stopped)  # its exit must not end the Next token's section
    with gate._cond:  # noqa: SLF001 - whose section it is
        assert gate._timing == thread.ident  # noqa: SLF001
    leave.set()
    thread.join(WAIT_S)
    assert gate._timing is None  # noqa: SLF001


def test_the_device_is_warm_right_after_work_and_cold_after_a_pause() -> None:
    clock = FakeClock()
    gate = PassGate(clock=clock)
    assert gate.quiet_for_s() == float("inf")  # nothing has run yet
    with gate.timing():
        clock.now += 0.06
    clock.now += 0.2
    assert gate.quiet_for_s() == pytest.approx(0.2)
    gate.worked()
    assert gate.quiet_for_s() == 0.0


# --- what ran beside ---------------------------------------------------------------------------------------------
def test_beside_counts_each_threads_growth_and_other_processes_beyond_the_tick_allowance() -> None:
    before = beside.CpuSnapshot({1: 2.0, 2: 5.0, 3: 1.0}, process_s=10.0, machine_busy_s=100.0)
    after = beside.CpuSnapshot({1: 2.25, 2: 5.0, 4: 0.5}, process_s=11.0, machine_busy_s=101.5)
    # thread 1 grew 0.25 s, thread 4 started meanwhile (0.5 s), thread 3 ended (unreadable: nothing)
    found = beside.beside(before, after)
    assert found.other_threads_s == pytest.approx(0.75)
    assert found.other_processes_s == pytest.approx(1.5 - 1.0 - beside.TICK_ALLOWANCE_S)
    quiet = beside.beside(before, replace(after, machine_busy_s=101.01))  # busy within a tick of the process
    assert quiet.other_processes_s == 0.0 and quiet.cpu_s == pytest.approx(0.75)


def test_beside_reads_another_threads_cpu_from_proc() -> None:
    if beside.thread_cpu_s(threading.get_native_id()) is None:
        pytest.skip("no /proc/self/task/*/schedstat on this system: nothing is claimed there")
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        before = beside.snapshot()
        time.sleep(0.3)
        after = beside.snapshot()
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert beside.beside(before, after).other_threads_s > 0.01  # it ran while this thread slept


# --- a disturbed pass, marked -----------------------------------------------------------------------------------
@pytest.fixture
def trace(tiny_lm: LoadedModel) -> Trace:
    """A run of five passes on the tiny model, outside any server: nothing measured beside them."""
    return measure(tiny_lm, Request("hi there", max_new_tokens=5, use_chat_template=False))


def disturbed_at(trace: Trace, *indices: int) -> Trace:
    """`trace` with other work's CPU beside each pass: just over the threshold at `indices`, none elsewhere."""
    return trace.with_beside_cpu(
        [p.wall_s * DISTURBED_SHARE * 1.5 if p.index in indices else 0.0 for passes in trace.repeats for p in passes]
    )


def test_a_pass_is_disturbed_past_its_share_and_unmeasured_passes_never_are(trace: Trace) -> None:
    p = trace.passes[1]
    assert not p.disturbed and p.beside_cpu_s is None
    assert not replace(p, beside_cpu_s=p.wall_s * DISTURBED_SHARE).disturbed
    assert replace(p, beside_cpu_s=p.wall_s * DISTURBED_SHARE * 1.01).disturbed
    marked = disturbed_at(trace, 2)
    assert [q.index for q in marked.disturbed_passes] == [2]
    assert Trace.from_json(marked.to_json()).passes[2].beside_cpu_s == marked.passes[2].beside_cpu_s  # in the JSON
    assert trace.with_beside_cpu([0.1]) is trace  # a count that does not match changes nothing


def test_disturbed_passes_are_named_in_one_line_and_marked_in_the_step_itl_chart(trace: Trace) -> None:
    clean = trace
    trace = disturbed_at(clean, 2)
    line = step_charts.disturbed_sentence(trace.passes, "marked here")
    assert line.startswith(f"Disturbed: 1 of {trace.new_tokens} passes (pass 2) were timed while other work")
    assert "up to 30% of a pass's time" in line and line.endswith(
        "Run again on a quiet server for a clean measurement."
    )
    assert step_charts.disturbed_sentence(clean.passes) == ""
    frame = step_charts.step_itl_frame(trace, 0.1)
    assert frame.loc[frame["pass"] == 2, "timing"].item().startswith("disturbed")
    assert set(frame.loc[frame["pass"] != 2, "timing"]) == {"clean"}
    spec = step_charts.step_itl_chart(frame, 0.1).to_dict()
    assert any(layer.get("mark", {}).get("text") == step_charts.DISTURBED_MARK for layer in spec["layer"])
    assert "⚠ disturbed" in step_charts.newest_pass_line(disturbed_at(trace, trace.passes[-1].index), str)
    assert "⚠" not in step_charts.newest_pass_line(clean, str)
