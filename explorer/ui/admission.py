"""The one way onto the device for everything that runs the model: this server's policy, the rate limit, the warm-up,
a turn on the device, the model loaded with progress and the request checked, each refusal one line.

The sidebar's Run, every lab's Run or Measure, step mode's prefill and each step, and "Re-measure device figures" all
ask here, in one order:

this server's policy (the model by name, the request's characters and numbers, a lab's size) → the session's rate
limit → waiting for the server's warm-up → a turn on the device (its place in line and "Leave the queue", drawn
wherever the caller is: never call this inside an `st.form`) → the model, loaded with progress → the request,
tokenized and held to the prompt-token cap → the work. Any refusal or failure is one line on screen and the work
returns None; Streamlit's rerun and stop pass through (the turn is given back, see `device_turn`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from explorer.core.engine import CheckedRequest, Request, check_request, validate
from explorer.core.errors import ExplorerError
from explorer.core.loaded_model import LoadedModel
from explorer.hosting.client import Event
from explorer.hosting.server_session import ServerSession
from explorer.hosting.settings import HostedPolicy, LabSize
from explorer.models.loading import EMBEDDED
from explorer.ui.device_link import OnEvent, on_owner
from explorer.ui.device_turn import DeviceTurn, count_run, device_turn
from explorer.ui.shared import hosting_policy, server_session
from explorer.ui.state import RunInputs, last_inputs
from explorer.ui.waiting import progress_bar, wait_for_warming
from explorer.ui.widgets import failure_line, show_error

T = TypeVar("T")


@dataclass(frozen=True)
class DeviceAsk:
    """What a piece of work asks of the device, for the checks before its turn."""

    what: str  # "run", "lab", "step", "device figures": for the queue's wait message and log
    failure: str  # names the work in a one-line failure: "The run", "Step mode's start"
    inputs: RunInputs | None = None  # the model to load (the sidebar's); None: the work needs no model
    request: Request | None = None  # checked against the caps before the turn, tokenized in it
    lab: LabSize | None = None  # a lab's size (what == "lab"): a hosted server refuses a lab without one
    counts: bool = True  # against the session's rate limit: new work does, a step of an admitted request does not
    passes: int | None = None  # the passes it will run, at most, for the waiting line; None: a lab, the figures
    steps_aside: bool = False  # it lets one-pass turns through between its passes (a sidebar run: `RunOnTurn`)


@dataclass(frozen=True)
class Admitted:
    """What the work gets, on the device in its turn."""

    session: ServerSession
    policy: HostedPolicy
    turn: DeviceTurn
    lm: LoadedModel | None  # loaded when the ask named inputs
    checked: CheckedRequest | None  # when the ask named a request

    @property
    def model(self) -> LoadedModel:
        assert self.lm is not None, "the ask named no model"
        return self.lm


def check_ask(ask: DeviceAsk, policy: HostedPolicy) -> RunInputs | None:
    """The policy's checks, by name and numbers alone (a path never reaches the filesystem, a prompt is counted in
    characters before any tokenizer runs); the inputs with the model to load."""
    inputs = ask.inputs
    if inputs is not None:
        inputs = replace(inputs, model=policy.check_model(inputs.model))
    if ask.request is not None:
        request = ask.request
        policy.check_request(request.prompt, request.max_new_tokens, request.repeats)
        validate(request)  # its numbers, before anything loads
    if ask.what == "lab":
        policy.check_lab(ask.lab)
    return inputs


def load(session: ServerSession, inputs: RunInputs) -> LoadedModel:
    with progress_bar(f"Loading {inputs.model} …") as report:
        return session.models.get(inputs.model.strip() or EMBEDDED, inputs.device, inputs.dtype, report)


def on_device(
    ask: DeviceAsk, work: Callable[[Admitted], T], after_turn: Callable[[Admitted, T], T] | None = None
) -> T | None:
    """`work`'s result, run in a turn on the device after every check in order (the module's docstring); None when
    it was refused or failed (one line on screen says why). `after_turn` gets the admission and that result once the
    turn has ended: untimed work on the model that takes no turn (the attention replay runs on the model's eager
    twin, kept apart from the next session's timed passes by the server's gate), and its result is returned instead."""
    try:
        session, policy = server_session(), hosting_policy()
        inputs = check_ask(ask, policy)
        if ask.counts:
            count_run(policy)
        wait_for_warming(session.warmer)
        with device_turn(ask.what, ask.passes, ask.steps_aside) as turn:
            lm = load(session, inputs) if inputs is not None else None
            checked = None
            if ask.request is not None and lm is not None:
                checked = check_request(lm, ask.request)  # once: the work takes it as checked
                if policy.max_prompt_tokens is not None:  # a few thousand characters at most, after the check above
                    policy.check_prompt_tokens(len(checked.prompt_ids))
            admitted = Admitted(session, policy, turn, lm, checked)
            done = work(admitted)
        return after_turn(admitted, done) if after_turn is not None else done
    except ExplorerError as exc:
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app must keep running; the message says what failed
        show_error(failure_line(ask.failure, exc))
    return None


def ask_owner(
    ask: DeviceAsk,
    kind: str,
    body: dict[str, Any],
    on: dict[str, OnEvent] | None = None,
    *,
    keep_after: str | None = None,
    on_kept: Callable[[Event], None] | None = None,
) -> dict[str, Any] | None:
    """The same checks as `on_device`, in the same order, then job `kind` on the device owner (`device_link.on_owner`):
    its "done" data, or None when it was refused or failed (one line on screen). The body carries the ask's model and
    request, as the owner checks them again: it may serve other web tiers."""
    try:
        policy = hosting_policy()
        inputs = check_ask(ask, policy)
        if ask.counts:
            count_run(policy)
    except ExplorerError as exc:
        show_error(str(exc))
        return None
    if inputs is not None:
        body = {"model": inputs.model, "device": inputs.device, "dtype": inputs.dtype, **body}
    if ask.request is not None:
        body = {"request": asdict(ask.request), **body}
    one_pass = ask.passes == 1
    return on_owner(
        kind,
        body,
        ask.failure,
        on,
        one_pass=one_pass,
        max_wait_s=policy.max_wait_s,
        keep_after=keep_after,
        on_kept=on_kept,
    )


def ask_lab(what: str, kind: str, body: dict[str, Any], size: LabSize | None) -> dict[str, Any] | None:
    """A lab's job on the device owner (`explorer.jobs.labs`), on the sidebar's last model, its `size` checked against
    this server's caps before it is sent (the owner checks its body again): the lab's result as its `to_dict()`, or
    None when it was refused or failed (one line on screen)."""
    return ask_owner(DeviceAsk("lab", what, last_inputs(), lab=size), kind, body)
