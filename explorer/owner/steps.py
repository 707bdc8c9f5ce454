"""Step mode on the device owner: a stepped request (`SteppedRequest`, its KV cache) lives here, in `Owner.steps`,
by an opaque handle; each click is a job of one pass ("prefill", then "step"), which goes between two passes of a
long Run (`DeviceQueue.make_way`); "reset" frees it. Each pass's attention row is replayed untimed: on a device gone
cold, before the pass in its turn (the replay warms the device for it); on a warm one, after the turn in an untimed
turn of its own, which Next tokens arriving meanwhile go before. The job sends back what the page draws
(`explorer.labs.stepped_view`).

A request left idle past IDLE_TIMEOUT_S frees its caches (`sweep_idle`, as every job starts on this owner): its page
may never come back. A pass or a replay that fails frees the request too: no later pass may extend a cache left half
written."""

from __future__ import annotations

import secrets
import threading
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from explorer.core.attention_maps import maps_to_wire
from explorer.core.engine import check_request
from explorer.core.errors import BadInput
from explorer.core.request import request_from_dict
from explorer.labs.step_mode import SteppedRequest
from explorer.labs.stepped_view import GONE, newest_row_to_wire
from explorer.owner.run import model_of

if TYPE_CHECKING:
    from explorer.owner.job import Device, Job, Turn

IDLE_TIMEOUT_S = 600.0  # a stepped request untouched this long frees its cache
WARM_WITHIN_S = 1.0  # a pass this recent leaves the device warm for the next without a twin (`DeviceQueue.warm`)
_STEPS_LOCK = threading.Lock()  # jobs add, take and sweep `Owner.steps` from their own threads


def sweep_idle(owner: Device, idle_timeout_s: float = IDLE_TIMEOUT_S) -> int:
    """Free every stepped request idle past the timeout (one being stepped now is busy, hence not idle) and forget its
    handle; how many were freed."""
    with _STEPS_LOCK:
        live = list(owner.steps.items())
    freed = [handle for handle, stepped in live if stepped.free_if_idle(idle_timeout_s)]
    with _STEPS_LOCK:
        for handle in freed:
            owner.steps.pop(handle, None)
    return len(freed)


def forget(owner: Device, handle: str) -> SteppedRequest | None:
    with _STEPS_LOCK:
        return owner.steps.pop(handle, None)


def prefill_job(job: Job) -> dict[str, Any]:
    """Body: model, device, dtype, request (`Request` as a dict). A new stepped request and its prefill, in one turn of
    one pass. Events: "pass"; done: `pass_done`'s, with the handle to step it by."""
    request = request_from_dict(job.body.get("request"))
    policy = job.owner.policy
    policy.check_request(request.prompt, request.max_new_tokens, request.repeats)
    with job.turn("prefill", passes=1) as turn:
        lm = model_of(job)
        checked = check_request(lm, request)
        if policy.max_prompt_tokens is not None:
            policy.check_prompt_tokens(len(checked.prompt_ids))
        stepped = SteppedRequest.start(lm, checked, policy.attention_cap_bytes, job.progress, job.owner.figures)
        one_pass(stepped, turn)
    handle = secrets.token_urlsafe(16)
    with _STEPS_LOCK:
        job.owner.steps[handle] = stepped
    return pass_done(job, handle, stepped)


def step_job(job: Job) -> dict[str, Any]:
    """Body: handle. The stepped request's next pass, in a turn of one pass. Events: "pass"; done: `pass_done`'s."""
    handle = str(job.body.get("handle", ""))
    with job.turn("step", passes=1) as turn:
        with _STEPS_LOCK:
            stepped = job.owner.steps.get(handle)
        if stepped is None or stepped.done or not stepped.claim():  # swept while this click waited in line
            freed(job, handle)
            raise BadInput(GONE)
        one_pass(stepped, turn, job, handle)
    return pass_done(job, handle, stepped)


def reset_job(job: Job) -> dict[str, Any]:
    """Body: handle. Frees the stepped request's caches now (after a pass that is running ends); done: {}."""
    stepped = forget(job.owner, str(job.body.get("handle", "")))
    if stepped is not None:
        stepped.free()
    return {}


def freed(job: Job, handle: str) -> None:
    """Forget the handle and tell the page ("freed", before the job's error): its session lets the request go."""
    stepped = forget(job.owner, handle)
    if stepped is not None:
        stepped.free()
    job.send("freed", {"handle": handle})


def one_pass(stepped: SteppedRequest, turn: Turn, job: Job | None = None, handle: str = "") -> None:
    """The request's next pass, in this turn, with its warm twin only where the device has gone cold (in a room the
    clicks follow each other, each pass warming the next, and everyone in line would wait for the twins); the turn is
    told what it ran. A pass that failed half-way frees it."""
    cold = not turn.job.owner.queue.warm(WARM_WITHIN_S)
    try:
        # A cold device is warmed by the pass's own attention replay where it can be (the row is then ready when the
        # pass ends: one forward before it, not a twin and a replay turn after it), else by a twin.
        warmed = cold and stepped.warm_by_replay()
        record = stepped.step(twin=cold and not warmed)
    except BaseException:
        stepped.free()
        if job is not None:
            freed(job, handle)
        raise
    turn.ran(1, record.wall_s)


def pass_done(job: Job, handle: str, stepped: SteppedRequest) -> dict[str, Any]:
    """After the turn: the new pass sent, its attention row replayed (untimed, in a turn of its own that one-pass jobs
    arriving meanwhile go before),
    and what the page draws. Done: handle, record (the new pass), finished, trace (so far; the finished run's
    once done), and the maps: whole after the prefill ("maps"), then the newest rows ("row")."""
    record = stepped.passes[-1]
    job.send("pass", asdict(record))
    try:
        if stepped.replay_pending:
            with job.turn("attention", passes=1, untimed=True) as turn:  # one replay pass, never beside a timed one
                maps = stepped.attention()  # replays the pass not replayed yet
                turn.ran(0, 0.0)  # its forward, untimed, in the turn log: a wait behind it waited for a forward
        else:
            maps = stepped.attention()  # replayed before its pass (`warm_by_replay`): no forward, so no turn
    except BaseException:
        stepped.free()
        freed(job, handle)
        raise
    if stepped.done:  # finished: its trace and maps go to the page, its caches are already freed
        forget(job.owner, handle)
    out: dict[str, Any] = {
        "handle": handle,
        "record": asdict(record),
        "finished": stepped.done,
        "trace": stepped.to_trace().to_dict(),
    }
    if record.is_prefill:
        out["maps"] = maps_to_wire(maps)
    else:
        out["row"] = newest_row_to_wire(maps)
    return out
