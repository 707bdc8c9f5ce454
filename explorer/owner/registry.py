"""What the device owner does for each kind of job: each is one function of the `Job` (`explorer.owner.job`), which
holds its body, its turn on the device and the events it sends back. The engine and the labs stay plain libraries;
these functions are where the owner calls them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from explorer.owner import labs, room, run, steps

if TYPE_CHECKING:
    from explorer.owner.job import Device, Job

JOBS: dict[str, Callable[[Job], dict[str, Any]]] = {
    "run": run.run_job,
    "capture": run.capture_job,
    "figures": run.figures_job,
    "room": room.room_job,
    "nocache": labs.nocache_job,
    "batch": labs.batch_job,
    "schedule": labs.schedule_job,
    "decode-paths": labs.decode_paths_job,
    "profile": labs.profile_job,
    "measure-here": labs.measure_here_job,
    "prefill": steps.prefill_job,
    "step": steps.step_job,
    "reset": steps.reset_job,
}


def before_each(owner: Device) -> None:
    """What the owner does as each job starts, on the job's thread: stepped requests left idle free their caches."""
    steps.sweep_idle(owner)
