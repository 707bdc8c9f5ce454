"""Step mode in a session: the session keeps a torch-free view of its stepped request (`SteppedView`: the handle, the
trace and maps so far); the request itself, its KV cache, lives in the device owner (`explorer.owner.steps`). Each
click is a job of one pass on the owner ("prefill", "step"), which goes between two passes of a long Run; Reset
frees it there ("reset"). The owner frees it too when it finishes (its trace and maps come back and are kept), after
an idle timeout, or when a pass fails: the next click then says so in one line and the form unlocks."""

from __future__ import annotations

from typing import Any

from explorer.core.request import Request
from explorer.labs.stepped_view import SteppedView
from explorer.ui.admission import DeviceAsk, ask_owner
from explorer.ui.state import RUN, STEPPED, RunResult, last_inputs, remember

DEFAULT_STEP = Request("What is the capital of France?", max_new_tokens=16)  # what the Step page's form starts with
FREED = "freed"  # the owner's event when it freed the request (gone, or a failed pass): the session lets it go


def stepped() -> SteppedView | None:
    """The session's stepped request, as the owner last sent it."""
    return STEPPED.get()


def reset_step_mode() -> None:
    """Let the session's stepped request go, and free its cache on the owner (a finished one's is freed already)."""
    current = STEPPED.pop()
    if current is not None and not current.done:
        ask_owner(DeviceAsk("reset", "The reset", counts=False), "reset", {"handle": current.handle})


def _forget(_data: Any) -> None:
    STEPPED.pop()


def _keep(view: SteppedView) -> None:
    """The request as the owner sent it; a finished one becomes the session's current run, as if run at once."""
    STEPPED.set(view)
    if view.done:
        result = remember(view.trace, view.request.prompt)
        RUN.set(RunResult(result.trace, view.maps, "", result.label))


def start_request(prompt: str, max_new_tokens: int, use_chat_template: bool) -> bool:
    """A new stepped request on the sidebar's model and sampling (a new prompt frees the old one's cache first), and
    its prefill, in one turn of one pass on the owner; whether both happened. It meets the same caps and rate limit as
    a run. On a failure its one-line error is on screen and no request is kept: one without a pass has nothing to
    show, and it would keep the prompt form locked. Never call it inside a form: waiting in line draws a button with a
    callback."""
    reset_step_mode()
    inputs = last_inputs()
    request = Request(
        prompt,
        max_new_tokens=max_new_tokens,
        use_chat_template=use_chat_template,
        sampling=inputs.sampling,
        decode_path=inputs.decode_path,
    )
    data = ask_owner(DeviceAsk("prefill", "Step mode's prefill", inputs, request, passes=1), "prefill", {})
    if data is None:  # refused, failed, or left the line: the owner keeps no request without a pass
        return False
    _keep(SteppedView.first(request, data))
    return True


def step_once() -> bool:
    """ONE real pass in a turn on the owner (held for this pass only: other sessions run between clicks); whether it
    stepped. A refusal in line leaves the request as it was; a failed pass, or a request the owner no longer holds,
    lets it go (the line on screen says which)."""
    current = stepped()
    if current is None or current.done:
        return False
    ask = DeviceAsk("step", "The step", counts=False, passes=1)  # admitted at its start
    data = ask_owner(ask, "step", {"handle": current.handle}, on={FREED: _forget})
    if data is None:
        return False
    _keep(current.then(data))
    return True


def run_to_end() -> None:
    """Every remaining pass, one job each, until the request is done or a step did not run (its error is shown):
    a refusal in line must not loop forever."""
    while step_once():
        pass
