"""Step mode in a session: the session's stepped request, one pass per click under the device lock (its attention row
replayed after the turn), freed on reset, on a new prompt, when it finishes (its trace and maps are kept), after an
idle timeout (swept by any session, see `ServerSession.steps`), or with the session itself (its state, tensors
included, goes with it)."""

from __future__ import annotations

import streamlit as st

from explorer.core.engine import Request
from explorer.labs.step_mode import SteppedRequest
from explorer.ui.admission import Admitted, DeviceAsk, on_device
from explorer.ui.shared import server_session
from explorer.ui.state import RUN, STEPPED, RunResult, last_inputs, remember
from explorer.ui.waiting import progress_bar

DEFAULT_STEP = Request("What is the capital of France?", max_new_tokens=16)  # what the Step page's form starts with


def stepped() -> SteppedRequest | None:
    """The session's stepped request; one left idle past the timeout is freed first (if no sweep did already)."""
    current = STEPPED.get()
    if current is None or current.done:
        return current
    if current.freed or current.free_if_idle(server_session().steps.idle_timeout_s):
        say_freed_when_idle()
        return None
    return current


def say_freed_when_idle() -> None:
    STEPPED.pop()
    minutes = server_session().steps.idle_timeout_s / 60
    st.info(f"The stepped request was idle for over {minutes:.0f} minutes: its cache was freed. Press Prefill again.")


def reset_step_mode() -> None:
    current = STEPPED.pop()
    if current is not None:
        current.free()


def start_request(prompt: str, max_new_tokens: int, use_chat_template: bool) -> bool:
    """A new stepped request on the sidebar's model and sampling (a new prompt frees the old one's cache first), and
    its prefill, in one turn on the device; whether both happened. It meets the same caps and rate limit as a run. On a
    failure its one-line error is on screen and no request is kept: one without a pass has nothing to show, and it
    would keep the prompt form locked. Never call it inside a form: waiting in line draws a button with a callback."""
    reset_step_mode()
    inputs = last_inputs()
    request = Request(
        prompt,
        max_new_tokens=max_new_tokens,
        use_chat_template=use_chat_template,
        sampling=inputs.sampling,
        decode_path=inputs.decode_path,
    )

    def start(admitted: Admitted) -> bool:
        assert admitted.checked is not None
        with progress_bar("Preparing the device…") as report:
            cap_bytes, figures = admitted.policy.attention_cap_bytes, admitted.session.figures
            started = SteppedRequest.start(admitted.model, admitted.checked, cap_bytes, report, figures)
        admitted.session.steps.add(started)
        STEPPED.set(started)
        return _step(started, admitted)

    if on_device(DeviceAsk("prefill", "Step mode's prefill", inputs, request, passes=1), start, _replay):
        return True
    reset_step_mode()  # refused, failed, or left the line: no request without a pass
    return False


def _step(current: SteppedRequest, admitted: Admitted) -> bool:
    """The request's next pass, in this turn, through the server's gate; the turn is told what it ran."""
    forward_before_s = current.forward_s
    try:
        record = current.step(admitted.session.gate)
    except Exception:
        reset_step_mode()  # a pass that failed half-way leaves a cache no later pass may extend
        raise
    admitted.turn.ran(1, record.wall_s, current.forward_s - forward_before_s)
    return True


def _replay(admitted: Admitted, stepped: bool) -> bool:
    """After the click's turn: the new pass's attention row, on the model's eager twin, through the server's gate (the
    next session's pass runs meanwhile). A replay that failed half-way frees the request, as a failed pass does."""
    current = STEPPED.get()
    if stepped and current is not None:
        try:
            current.replay_passes(admitted.session.gate)
        except Exception:
            reset_step_mode()
            raise
    return stepped


def step_once() -> bool:
    """ONE real pass in a turn on the device (held for this pass only: other sessions run between clicks); whether it
    stepped. A refusal in line leaves the request as it was; a failed pass frees it."""
    current = stepped()
    if current is None or current.done:
        return False

    def step(admitted: Admitted) -> bool:
        if not current.claim():  # freed by an idle sweep while this click waited in line
            say_freed_when_idle()
            return False
        return _step(current, admitted)

    if not on_device(DeviceAsk("step", "The step", counts=False, passes=1), step, _replay):  # admitted at its start
        return False
    if current.done:  # the finished request becomes the session's current run, as if it had been run at once
        result = remember(current.to_trace(), current.request.prompt)
        RUN.set(RunResult(result.trace, current.attention(), "", result.label))
    return True


def run_to_end() -> None:
    """Every remaining pass, one turn each, until the request is done or a step did not run (its error is shown):
    a refusal in line must not loop forever."""
    while step_once():
        pass
