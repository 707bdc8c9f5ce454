"""Step mode in a session: the session's stepped request, one pass per click under the device lock, freed on reset,
on a new prompt, after an idle timeout, or with the session itself (its state, tensors included, goes with it)."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from explorer.device import device_profile
from explorer.engine import Request
from explorer.errors import ExplorerError, one_line
from explorer.stepping import IDLE_TIMEOUT_S, SteppedRequest
from explorer.ui.runner import device_turn, get_model, hosting_policy
from explorer.ui.state import LAST_INPUTS, RUN, RunInputs, RunResult, remember
from explorer.ui.widgets import show_error

STEPPED = "explorer_stepped"  # the session's SteppedRequest, or absent


def stepped() -> SteppedRequest | None:
    """The session's stepped request; one left idle past the timeout is freed first."""
    current = st.session_state.get(STEPPED)
    if current is not None and current.idle_for_s() > IDLE_TIMEOUT_S:
        reset_stepping()
        st.info(f"The stepped request was idle for over {IDLE_TIMEOUT_S / 60:.0f} minutes: its cache was freed.")
        return None
    return current


def reset_stepping() -> None:
    current = st.session_state.pop(STEPPED, None)
    if current is not None:
        current.free()


def start_stepping(prompt: str, max_new_tokens: int, use_chat_template: bool) -> None:
    """A new stepped request on the sidebar's model (a new prompt frees the old one's cache first)."""
    reset_stepping()
    inputs = st.session_state.get(LAST_INPUTS, RunInputs())
    request = Request(prompt, max_new_tokens=max_new_tokens, use_chat_template=use_chat_template)
    policy = hosting_policy()  # a stepped request meets the same caps as a run
    try:
        inputs = replace(inputs, model=policy.check_model(inputs.model))
        policy.check_request(prompt, max_new_tokens, 1)
        with device_turn("step"):
            lm = get_model(inputs)
            device = device_profile(lm.torch_device.type, lm.info.dtype)
            started = SteppedRequest.start(lm, request, device, policy.attention_cap_bytes)
            if policy.max_prompt_tokens is not None:
                policy.check_prompt_tokens(len(started.live.prompt_ids))
            st.session_state[STEPPED] = started
    except ExplorerError as exc:
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app must keep running; the message says what failed
        show_error(f"Step mode could not start: {one_line(exc)}")


def step_once() -> None:
    """ONE real pass under the device lock (held for this pass only: other sessions run between clicks)."""
    current = stepped()
    if current is None or current.done or current.freed:
        return
    try:
        with device_turn("step"):  # one pass: other sessions go between clicks
            current.step()
    except ExplorerError as exc:
        show_error(str(exc))
        return
    if current.done:  # the finished request becomes the session's current run, as if it had been run at once
        result = remember(current.to_trace(), current.request.prompt)
        st.session_state[RUN] = RunResult(result.trace, current.attention(), "", result.label)
