"""Every lab and page measurement on the device owner: the no-cache and batching labs, the scheduling lab, the
decode-path comparison, "Profile this pass" and At scale's "Measure this here". Each job's body is the lab's settings
(with the model, device and dtype `ask_owner` adds); its "done" data is the lab's result as its own `to_dict()`, which
the page rebuilds with `from_dict` and keeps where it kept the result before.

The owner checks each lab's size itself, from the body as it arrived (`explorer.labs.sizes`, the same definition the
page checked), before its turn and before any model loads: it may serve web tiers it does not know. A lab then takes
the device figures and warms up once, and runs with `LabProgress(job.progress, make_way)`: the lab calls `make_way` only
where no measured figure spans it (`core.lab_progress`), and every job waiting then goes first
(`Turn.make_way(everyone=True)`), so another session waits for one unit of a long lab, never the whole of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from explorer.core.engine import OnPass, check_request
from explorer.core.errors import BadInput
from explorer.core.lab_progress import LabProgress
from explorer.core.measure import measure, prepare_device
from explorer.core.request import Request, request_from_dict
from explorer.core.trace import DeviceProfile, Trace
from explorer.labs import sizes
from explorer.labs.batch import run_batch_sweep
from explorer.labs.batch_settings import BatchConfig
from explorer.labs.decode_paths import compare_decode_paths
from explorer.labs.nocache import run_nocache
from explorer.labs.schedule import workload as schedule_workload
from explorer.labs.schedule.run import run_schedule
from explorer.labs.schedule.workload import EngineSettings, Workload
from explorer.owner.run import model_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from explorer.core.loaded_model import LoadedModel
    from explorer.owner.job import Job


def on_the_device(job: Job, work: Callable[[LoadedModel, DeviceProfile, LabProgress], Any]) -> Any:
    """A lab's turn: the model (the body's), the device figures and the warm-up once, then the lab itself."""
    with job.turn("lab", makes_way=True) as turn:
        lm = model_of(job)
        device = prepare_device(lm, job.owner.figures, progress=job.progress)
        return work(lm, device, LabProgress(job.progress, lambda: turn.make_way(everyone=True)))


def number(body: dict[str, Any], name: str, kind: type[int] | type[float]) -> Any:
    """A number of the body, or one line naming it: a body from any client is checked, never trusted."""
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(f"This lab job needs a number for {name!r}: nothing ran.")
    return kind(value)


def nocache_job(job: Job) -> dict[str, Any]:
    """Body: prompt, new_tokens, budget_s. Done: `NoCacheResult.to_dict()`."""
    prompt = str(job.body.get("prompt", ""))
    new_tokens, budget_s = number(job.body, "new_tokens", int), number(job.body, "budget_s", float)
    job.owner.policy.check_lab(sizes.nocache_size(prompt, new_tokens, budget_s))
    request = Request(prompt, max_new_tokens=new_tokens, use_chat_template=False)
    result = on_the_device(job, lambda lm, device, progress: run_nocache(lm, device, request, budget_s, progress))
    return result.to_dict()


def batch_job(job: Job) -> dict[str, Any]:
    """Body: batch_sizes, prompt_tokens, new_tokens, distinct_prompts, budget_s (the KV cap is the lab's own, never a
    client's). Done: `BatchResult.to_dict()`."""
    body = job.body
    sizes_asked = body.get("batch_sizes")
    if not isinstance(sizes_asked, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) for b in sizes_asked
    ):
        raise BadInput("This lab job needs its batch sizes as a list of whole numbers: nothing ran.")
    config = BatchConfig(
        tuple(sizes_asked),
        number(body, "prompt_tokens", int),
        number(body, "new_tokens", int),
        bool(body.get("distinct_prompts", True)),
        budget_s=number(body, "budget_s", float),
    )
    job.owner.policy.check_lab(sizes.batch_size(config))
    result = on_the_device(job, lambda lm, device, progress: run_batch_sweep(lm, device, config, progress))
    return result.to_dict()


def schedule_job(job: Job) -> dict[str, Any]:
    """Body: workload and settings (as `dataclasses.asdict` writes them), compare. Done: `ScheduleRun.to_dict()`."""
    body, policy = job.body, job.owner.policy
    try:
        workload = Workload.from_dict(dict(body["workload"]))
        settings = EngineSettings(**dict(body["settings"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput("This scheduling job's workload or settings could not be read: nothing ran.") from exc
    schedule_workload.validate(workload, settings)
    schedule_workload.check_prompt_chars(workload, policy.max_prompt_chars)
    policy.check_lab(sizes.schedule_size(workload, policy))
    compare = bool(body.get("compare", True))

    def work(lm: LoadedModel, device: DeviceProfile, progress: LabProgress) -> Any:
        return run_schedule(lm, device, workload, settings, compare=compare, progress=progress)

    return on_the_device(job, work).to_dict()


def decode_paths_job(job: Job) -> dict[str, Any]:
    """Body: trace (the run's, `Trace.to_dict()`). Done: {"traces": each path's trace}."""
    trace = Trace.from_dict(job.body["trace"])
    job.owner.policy.check_lab(sizes.decode_paths_size(trace, job.owner.policy))
    traces = on_the_device(job, lambda lm, device, progress: compare_decode_paths(lm, device, trace, progress))
    return {"traces": [t.to_dict() for t in traces]}


def profile_job(job: Job) -> dict[str, Any]:
    """Body: trace, pass_index. Done: `PassProfile.to_dict()`."""
    from explorer.core.profiler import profile_pass  # torch.profiler: only when a pass is profiled

    trace = Trace.from_dict(job.body["trace"])
    pass_index = number(job.body, "pass_index", int)
    job.owner.policy.check_lab(sizes.profile_size(trace, pass_index, job.owner.policy))

    def work(lm: LoadedModel, _device: DeviceProfile, progress: LabProgress) -> Any:
        progress(0.0, f"Profiling pass {pass_index}: the replay, then five runs of the pass…")
        return profile_pass(lm, trace, pass_index)

    profiled = on_the_device(job, work)
    return profiled.to_dict()


def measure_here_job(job: Job) -> dict[str, Any]:
    """Body: model (a shape), device, dtype, request. Done: the measured `Trace.to_dict()`."""
    request = request_from_dict(job.body.get("request"))
    policy = job.owner.policy
    policy.check_request(request.prompt, request.max_new_tokens, request.repeats)
    with job.turn("run", passes=request.max_new_tokens * request.repeats, makes_way=True) as turn:
        lm = model_of(job)  # a shape that cannot fit this device is refused here, in one line, before it is built
        checked = check_request(lm, request)
        if policy.max_prompt_tokens is not None:
            policy.check_prompt_tokens(len(checked.prompt_ids))
        on_pass = OnPass(make_way=turn.make_way, tally=lambda r: turn.ran(1, r.wall_s))
        trace = measure(lm, checked, job.owner.figures, on_pass=on_pass, progress=job.progress)
    return trace.to_dict()
