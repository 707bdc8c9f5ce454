"""What each lab is about to run, as a hosted server's caps see it (`HostedPolicy.check_lab`), torch-free: the page
checks it before it sends the job, and the device owner checks it again from the job's own body before anything loads
(the owner may serve web tiers it does not know, or a client that never ran a page). One definition for both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.hosting.settings import HostedPolicy, LabSize

if TYPE_CHECKING:
    from explorer.core.trace import Trace
    from explorer.labs.batch_settings import BatchConfig
    from explorer.labs.schedule.workload import Workload

SCHEDULE_BUDGET_S = 600.0  # the scheduling lab's own budget (a hosted server's cap, if lower)
DECODE_PATHS_BUDGET_S = 300.0  # three paths of the run's length, and on a GPU a graph capture: well under this
PROFILE_BUDGET_S = 120.0  # a replay up to the pass and five runs of it: seconds


def nocache_size(prompt: str, new_tokens: int, budget_s: float) -> LabSize:
    """Both loops over a typed prompt, within the visitor's time budget."""
    return LabSize(prompt_chars=len(prompt), new_tokens=new_tokens, budget_s=budget_s)


def batch_size(config: BatchConfig) -> LabSize:
    """Every batch size of the sweep, on prompts of the lab's own making."""
    return LabSize(config.prompt_tokens, None, config.new_tokens, config.batch_sizes, config.budget_s)


def schedule_size(workload: Workload, policy: HostedPolicy) -> LabSize:
    """The workload's longest request, its requests as one batch. Typed texts are left out: they are checked by name
    first (`workload.check_prompt_chars`), so a long text gets one check and one message."""
    return LabSize(
        prompt_tokens=None if workload.prompts else max(workload.prompt_tokens),
        new_tokens=max(workload.new_tokens),
        batch_sizes=(workload.requests,),
        budget_s=policy.lab_budget_s(SCHEDULE_BUDGET_S),
    )


def decode_paths_size(trace: Trace, policy: HostedPolicy) -> LabSize:
    """The run's request decoded on at most three paths."""
    return LabSize(trace.prompt_len, None, 3 * trace.new_tokens, (), policy.lab_budget_s(DECODE_PATHS_BUDGET_S))


def profile_size(trace: Trace, pass_index: int, policy: HostedPolicy) -> LabSize:
    """The run's tokens replayed up to the pass, and five runs of it."""
    return LabSize(trace.prompt_len, None, pass_index + 1, (), policy.lab_budget_s(PROFILE_BUDGET_S))
