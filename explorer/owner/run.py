"""A Run on the device owner: the device figures and the warm-up, the timed passes (each sent as it ends, so the page
streams its token), then the untimed attention replay, after the turn; a capture again later; re-measuring the device
figures."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from explorer.core.attention import capture_attention
from explorer.core.attention_maps import maps_to_wire
from explorer.core.beside import BesideWatch
from explorer.core.engine import OnPass, check_request, generate
from explorer.core.errors import ExplorerError
from explorer.core.figure_correction import keep_figures_honest, recost
from explorer.core.measure import prepare_device
from explorer.core.request import request_from_dict
from explorer.core.trace import PassRecord, Trace
from explorer.models.loading import resolve_device

if TYPE_CHECKING:
    from explorer.core.loaded_model import LoadedModel
    from explorer.owner.job import Job


def model_of(job: Job) -> LoadedModel:
    body = job.body
    return job.load(str(body.get("model", "")), str(body.get("device", "auto")), str(body.get("dtype", "float32")))


def run_job(job: Job) -> dict[str, Any]:
    """Body: model, device, dtype, request (`Request` as a dict), capture (bool). Events: each "pass", then "trace";
    done: the attention maps (or why there are none)."""
    request = request_from_dict(job.body.get("request"))
    policy = job.owner.policy
    policy.check_request(request.prompt, request.max_new_tokens, request.repeats)
    with job.turn("run", passes=request.max_new_tokens * request.repeats, makes_way=True) as turn:
        lm = model_of(job)
        checked = check_request(lm, request)
        if policy.max_prompt_tokens is not None:
            policy.check_prompt_tokens(len(checked.prompt_ids))
        profile = prepare_device(lm, job.owner.figures, checked, progress=job.progress, between=turn.make_way)
        job.progress(1.0, "Running the request: the timed passes…")

        def see(record: PassRecord) -> None:
            job.send("pass", asdict(record))

        watch = BesideWatch()

        def tally(record: PassRecord) -> None:
            watch.lap()
            turn.ran(1, record.wall_s)

        def make_way() -> None:
            turn.make_way()
            watch.restart()  # the passes let through ran in their own turn, not beside this run's

        on_pass = OnPass(see=see, make_way=make_way, tally=tally)
        trace = generate(lm, checked, profile, on_pass, warmed_up=True, shapes_warmed=True)
        turn.ran(0, 0.0)
    trace = keep_figures_honest(trace, job.owner.figures).with_beside_cpu(watch.laps)
    job.send("trace", trace.to_dict())
    if not job.body.get("capture"):
        return {}
    return attention_of(job, lm, trace)


def attention_of(job: Job, lm: LoadedModel, trace: Trace) -> dict[str, Any]:
    """The untimed eager replay, in a turn of its own (never beside another job's timed pass), which one-pass jobs
    arriving meanwhile go before and which lets them through between its passes; a failure or the memory cap is said,
    and the timed run stands."""
    job.progress(0.0, "Replaying the same tokens with eager attention to capture the maps (untimed)…")
    try:
        with job.turn("attention", untimed=True, makes_way=True) as turn:

            @contextmanager
            def between_replay_passes() -> Iterator[None]:
                turn.make_way()
                yield

            maps = capture_attention(
                lm, trace, cap_bytes=job.owner.policy.attention_cap_bytes, section=between_replay_passes
            )
    except ExplorerError as exc:
        return {"attention_note": str(exc)}
    return {"maps": maps_to_wire(maps)}


def capture_job(job: Job) -> dict[str, Any]:
    """Body: model, device, dtype, trace: a run's maps again (a capture cut short), on its own tokens."""
    trace = Trace.from_dict(job.body["trace"])
    with job.turn("attention", untimed=True):
        lm = model_of(job)
    return attention_of(job, lm, trace)


def figures_job(job: Job) -> dict[str, Any]:
    """Body: device (a kind or "auto"), dtype, optionally a trace to re-cost. Done: the fresh figures, the re-costed
    trace."""
    body = job.body
    trace = Trace.from_dict(body["trace"]) if body.get("trace") else None
    kind = trace.device.kind if trace is not None else resolve_device(str(body.get("device", "auto"))).type
    dtype = trace.device.dtype if trace is not None else str(body.get("dtype", "float32"))
    with job.turn("device figures"):
        fresh = job.owner.figures.get(kind, dtype, fresh=True, progress=job.progress)
    out: dict[str, Any] = {"measured_at": fresh.measured_at}
    if trace is not None:
        out["trace"] = keep_figures_honest(recost(trace, fresh), job.owner.figures).to_dict()
    return out
