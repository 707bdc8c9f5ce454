"""The one way onto the device for everything that runs the model: this server's policy, the rate limit, then a job on
the device owner (`explorer.ui.device_link.on_owner`), each refusal one line.

The sidebar's Run, every lab's Run or Measure, step mode's prefill and each step, a Room round and "Re-measure device
figures" all ask here, in one order: this server's policy (the model by name, the request's characters and numbers, a
lab's size) → the session's rate limit → the job, sent to the owner with the model and the request, where the owner
checks them again (it may serve other web tiers), waits its turn, loads, tokenizes (the prompt-token cap) and works.
Any refusal or failure is one line on screen and the ask returns None.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.request import Request, validate
from explorer.hosting.settings import HostedPolicy, LabSize
from explorer.ui.device_link import JobView, Keep, OnEvent, on_owner
from explorer.ui.shared import hosting_policy
from explorer.ui.state import RUN_STARTS, RunInputs, last_inputs
from explorer.ui.widgets import show_error


@dataclass(frozen=True)
class DeviceAsk:
    """What a piece of work asks of the device, for the checks before it is sent."""

    what: str  # "run", "lab", "step", "device figures": for the one-line refusals
    failure: str  # names the work in a one-line failure: "The run", "Step mode's start"
    inputs: RunInputs | None = None  # the model to load (the sidebar's); None: the work needs no model
    request: Request | None = None  # checked against the caps here, tokenized by the owner
    lab: LabSize | None = None  # a lab's size (what == "lab"): a hosted server refuses a lab without one
    counts: bool = True  # against the session's rate limit: new work does, a step of an admitted request does not
    passes: int | None = None  # the passes it will run, at most; 1: a one-pass job, whose place in line is one line


def count_run(policy: HostedPolicy | None = None) -> None:
    """Count one job against this session's rate limit; raises the limit's ExplorerError when over."""
    policy = hosting_policy() if policy is None else policy
    RUN_STARTS.set(policy.check_rate(RUN_STARTS.get() or (), time.monotonic()))


def check_ask(ask: DeviceAsk, policy: HostedPolicy) -> RunInputs | None:
    """The policy's checks, by name and numbers alone (a path never reaches the filesystem, a prompt is counted in
    characters before any tokenizer runs); the inputs with the model to load."""
    inputs = ask.inputs
    if inputs is not None:
        inputs = replace(inputs, model=policy.check_model(inputs.model))
    if ask.request is not None:
        request = ask.request
        policy.check_request(request.prompt, request.max_new_tokens, request.repeats)
        validate(request)  # its numbers, before anything is sent
    if ask.what == "lab":
        policy.check_lab(ask.lab)
    return inputs


def ask_owner(
    ask: DeviceAsk,
    kind: str,
    body: dict[str, Any],
    on: dict[str, OnEvent] | None = None,
    *,
    keep: Keep | None = None,
) -> dict[str, Any] | None:
    """The checks above, then job `kind` on the device owner: its "done" data, or None when it was refused or failed
    (one line on screen). The body carries the ask's model and request."""
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
    view = JobView(one_pass=ask.passes == 1, max_wait_s=policy.max_wait_s)
    return on_owner(kind, body, ask.failure, on, view=view, keep=keep)


def ask_lab(what: str, kind: str, body: dict[str, Any], size: LabSize | None) -> dict[str, Any] | None:
    """A lab's job on the device owner (`explorer.owner.labs`), on the sidebar's last model, its `size` checked against
    this server's caps before it is sent (the owner checks its body again): the lab's result as its `to_dict()`, or
    None when it was refused or failed (one line on screen)."""
    return ask_owner(DeviceAsk("lab", what, last_inputs(), lab=size), kind, body)
