"""A Step click that must wait for the device says its place in line as the click lands, not after: "Queued: 2 passes
ahead, about 0.1 s", drawn by the click's own script run while another session still holds the device, redrawn while
it waits, and without the ⚠ that marks a disturbed pass. Read from what the script run has sent to the page (its
forward messages) while the device owner's device is held, on the tiny model."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from streamlit.testing.v1 import app_test
from streamlit.testing.v1.local_script_runner import LocalScriptRunner

from explorer.charts.step_mode import DISTURBED_MARK
from explorer.core.loaded_model import LoadedModel
from explorer.owner.job import TICK_S
from explorer.owner.line import QueueStatus
from explorer.ui import device_link as ui_turn
from explorer.ui import step_mode
from tests.apptest_support import navigation_like_a_server  # noqa: F401 - the fixture patches AppTest's pages
from tests.owner_support import OwnersOfATest
from tests.test_step_mode import app_owner, prefill_on_the_step_page

DEADLINE_S = 60.0  # a bound no healthy script run here comes near: a hang fails instead of blocking the suite
HELD_AFTER_SEEN_S = 2.5 * TICK_S  # the other session keeps the device this long after the line is seen


def test_the_queued_line_says_the_work_ahead_and_the_estimate_in_one_short_line() -> None:
    third = ui_turn.queued_line(QueueStatus(False, True, 2, 2, (), 0.12, 0.0))
    assert third == "Queued: 2 passes ahead, about 0.1 s. You are number 2 in line."
    next_one = ui_turn.queued_line(QueueStatus(False, True, 1, 1, (), 0.04, 0.3))
    assert next_one == "Queued: 1 pass ahead, any moment now. You are next in line."
    behind_a_lab = ui_turn.queued_line(QueueStatus(False, True, 1, 0, ("lab",), None, 0.0))
    assert behind_a_lab.startswith("Queued: a lab ahead, how long is not known")
    # waiting disturbs no pass's timing: the disturbed mark is the pass line's own (one mark, never a second)
    assert DISTURBED_MARK not in third + next_one + behind_a_lab and DISTURBED_MARK != ui_turn.QUEUED_ICON


class RecordedRunner(LocalScriptRunner):
    """AppTest's script runner, kept where a test can read what its run has sent so far."""

    made: list[RecordedRunner] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        RecordedRunner.made.append(self)

    def alerts_sent(self) -> list[str]:
        """The bodies of the alerts (st.info, st.error, ...) this run has sent to the page so far."""
        messages = list(self.forward_msg_queue._queue)  # noqa: SLF001 - the queue AppTest builds its tree from
        return [
            m.delta.new_element.alert.body
            for m in messages
            if m.WhichOneof("type") == "delta" and m.delta.new_element.WhichOneof("type") == "alert"
        ]


@pytest.fixture
def recorded_runs() -> Iterator[list[RecordedRunner]]:
    RecordedRunner.made = []
    with mock.patch.object(app_test, "LocalScriptRunner", RecordedRunner):
        yield RecordedRunner.made


def test_a_next_token_that_waits_draws_its_place_in_line_before_it_gets_the_device(
    tiny_llama_dir: Path,
    tiny_lm: LoadedModel,
    recorded_runs: list[RecordedRunner],
    monkeypatch: pytest.MonkeyPatch,
    fresh_device_owner: OwnersOfATest,
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there", max_new_tokens=4)
    lines: list[str] = []
    real_line = ui_turn.queued_line
    monkeypatch.setattr(ui_turn, "queued_line", lambda status: lines.append(real_line(status)) or lines[-1])
    queue = app_owner(fresh_device_owner).queue  # the owner's line, which the click's job joins
    other = queue.enter("run", owner="other session", passes=2)  # another session's run of two passes
    assert queue.wait(other, DEADLINE_S)
    seen: list[tuple[str, bool]] = []  # (the queued line on the page, whether the other session still held the device)

    def other_session() -> None:
        """Keeps the device until the click's script has drawn its place in line (then a little longer, so that the
        line is redrawn), or until the deadline."""
        until = time.monotonic() + DEADLINE_S
        try:
            while time.monotonic() < until and not seen:
                runner = recorded_runs[-1] if recorded_runs else None
                drawn = [a for a in runner.alerts_sent() if a.startswith("Queued:")] if runner is not None else []
                if drawn:
                    seen.append((drawn[-1], queue.holds(other)))
                time.sleep(0.01)
            time.sleep(HELD_AFTER_SEEN_S)
        finally:
            queue.release(other)

    holder = threading.Thread(target=other_session, name="other-session", daemon=True)
    holder.start()
    try:
        at.button(key="step-next").click().run(timeout=DEADLINE_S)
    finally:
        holder.join(DEADLINE_S)
    assert not at.exception, at.exception
    assert seen, "the click's script never drew its place in line while the device was held"
    line, other_held = seen[0]
    assert other_held  # drawn before its turn came
    assert line.startswith("Queued: 2 passes ahead, ") and line.endswith("You are next in line."), line
    assert DISTURBED_MARK not in line
    assert len(lines) >= 2  # redrawn while it waited (the owner sends its place every TICK_S)
    # Then it ran: one more pass, its turn granted once the other session's had ended; the line is gone, the wait said
    assert len(at.session_state[step_mode.STEPPED].passes) == 2
    step = next(t for t in queue.turns if t.what == "step" and t.number > other.number)
    assert step.waited_s >= HELD_AFTER_SEEN_S and step.first_ahead == 1
    assert not [i.value for i in at.info if i.value.startswith("Queued:")]
    assert any(c.value.startswith("Waited ") and "number 1 in line" in c.value for c in at.caption)


def test_a_job_that_waits_twice_in_one_script_run_draws_its_place_twice() -> None:
    """A step waits for its pass, then its attention replay waits for the Next tokens pressed after it (an untimed turn
    of its own): two places in line in one script run, each with its own widgets (a workshop of 8 met Streamlit's
    duplicate-key error here)."""

    def script() -> None:
        from explorer.owner.line import QueueStatus
        from explorer.ui.device_link import JobView

        view = JobView(one_pass=True, max_wait_s=None)
        in_line = QueueStatus(False, True, 2, 2, (), 0.2, 0.1)
        view.waiting(in_line)
        view.waiting(QueueStatus(True, False, 0, 0, (), 0.0, 0.3))  # the pass's turn
        view.waiting(in_line)  # the replay's wait
        view.end()

    at = app_test.AppTest.from_function(script).run()
    assert not at.exception, at.exception
