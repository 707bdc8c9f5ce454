"""One pass of a finished run replayed under `torch.profiler`, its time grouped by what ran (the overhead explained).

The profile is its own measurement, never the run's: the cache is rebuilt untimed to the state before pass K, pass K
runs once to warm up, once timed without the profiler, and once timed under it. Each op's self time (CPU self time on
a CPU, kernel time on a GPU) is attributed to a group by WHERE it ran: forward hooks and a wrapper around the cache's
`update` open a `record_function` region per module kind, and each op goes to its innermost region (so rotary's
`aten::cat` is attention, the cache's `aten::cat` is the KV-cache update). What no op accounts for is the remainder:
framework dispatch and Python on a CPU, the GPU idling between kernels on CUDA.
"""

from __future__ import annotations

import functools
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from explorer.core.engine import decode_one_token, new_cache, prefill
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.pass_profile import ATTENTION as ATTENTION
from explorer.core.pass_profile import CPU_REMAINDER as CPU_REMAINDER
from explorer.core.pass_profile import CUDA_REMAINDER as CUDA_REMAINDER
from explorer.core.pass_profile import EMBEDDING_LM_HEAD as EMBEDDING_LM_HEAD
from explorer.core.pass_profile import GROUP_CONTENTS as GROUP_CONTENTS
from explorer.core.pass_profile import KV_UPDATE as KV_UPDATE
from explorer.core.pass_profile import LINEAR as LINEAR
from explorer.core.pass_profile import MODELLED_KINDS as MODELLED_KINDS
from explorer.core.pass_profile import NORMS_ACTIVATIONS as NORMS_ACTIVATIONS
from explorer.core.pass_profile import OP_GROUPS as OP_GROUPS
from explorer.core.pass_profile import OTHER_OPS as OTHER_OPS
from explorer.core.pass_profile import OpTime as OpTime
from explorer.core.pass_profile import PassProfile as PassProfile
from explorer.core.pass_profile import ProfileGroup as ProfileGroup
from explorer.core.timing import synchronize, timed
from explorer.core.trace import Trace

REGION_PREFIX = "explorer::"
PASS_REGION = REGION_PREFIX + "pass"
REGIONS = {REGION_PREFIX + name: name for name in OP_GROUPS}  # region name -> group
US_PER_S = 1e6  # the profiler reports microseconds
KINETO_LOG_LEVEL_ENV = "KINETO_LOG_LEVEL"
UNPROFILED_REPEATS = 3  # the reference the profiler's cost is read against: a median, so one noisy sample can't set it


# --- where an op ran -------------------------------------------------------------------------------------------------
ACTIVATION_MODULES = ("torch.nn.modules.activation", "transformers.activations")


def module_group(module: nn.Module, lm_head: nn.Module | None) -> str | None:
    """The group of the ops a module runs itself (its children mark their own), None for a plain container."""
    kind = type(module).__name__
    if module is lm_head or isinstance(module, nn.Embedding):
        return EMBEDDING_LM_HEAD
    if isinstance(module, nn.Linear) or kind == "Conv1D":  # GPT-2's projections are transformers' Conv1D
        return LINEAR
    if kind.endswith(("Experts", "Router")):  # an MoE's fused experts and its router: matmuls on bare weights
        return LINEAR
    if "Norm" in kind:
        return NORMS_ACTIVATIONS
    if type(module).__module__ in ACTIVATION_MODULES and "Softmax" not in kind:
        return NORMS_ACTIVATIONS
    if kind.endswith("Attention") or "Rotary" in kind:
        return ATTENTION
    if kind.endswith("MLP"):  # what an MLP runs between its projections is the gate: act(gate) * up
        return NORMS_ACTIVATIONS
    return None


@contextmanager
def regions(model: nn.Module, cache: object) -> Iterator[None]:
    """Mark every module's forward and the cache's update as named profiler regions, for this block only.

    Hooks mutate the shared model: hold the device lock (the app) or own the process (the CLI) meanwhile.
    """
    lm_head = model.get_output_embeddings()
    open_regions: list[record_function] = []  # modules nest, so their regions close in reverse order

    def enter(name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: object) -> None:
            region = record_function(name)
            region.__enter__()
            open_regions.append(region)

        return hook

    def leave(_module: nn.Module, _args: object, _output: object) -> None:
        open_regions.pop().__exit__(None, None, None)

    handles = []
    for module in model.modules():
        group = module_group(module, lm_head)
        if group is not None:
            handles.append(module.register_forward_pre_hook(enter(REGION_PREFIX + group)))
            handles.append(module.register_forward_hook(leave, always_call=True))
    update = cache.update

    def marked_update(*args: object, **kwargs: object) -> object:
        with record_function(REGION_PREFIX + KV_UPDATE):
            return update(*args, **kwargs)

    cache.update = marked_update  # this cache only: an instance attribute shadows the class's method
    try:
        yield
    finally:
        del cache.update
        for handle in handles:
            handle.remove()
        while open_regions:  # a forward that raised leaves its regions open
            open_regions.pop().__exit__(None, None, None)


def _region_of(event: FunctionEvent) -> str | None:
    """The group of an op's innermost enclosing region, OTHER_OPS inside the pass only, None outside the pass."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in REGIONS:
            return REGIONS[parent.name]
        if parent.name == PASS_REGION:
            return OTHER_OPS
        parent = parent.cpu_parent
    return None


def _is_op(event: FunctionEvent) -> bool:
    # Region markers (ours or anyone's) are user annotations: their self time is Python and dispatch between ops,
    # so it stays in the remainder rather than counting as an op.
    return event.device_type == torch.autograd.DeviceType.CPU and not event.is_async and not event.is_user_annotation


def group_events(events: list[FunctionEvent], on_gpu: bool) -> tuple[ProfileGroup, ...]:
    """Sum each op's self time (CPU self time, or its kernels' time on a GPU) into the group of the region it ran in.

    Self times exclude child ops, so summing every op, nested or not, counts each microsecond once.
    """
    totals_us: dict[str, dict[str, list[float]]] = {g: defaultdict(lambda: [0, 0.0]) for g in OP_GROUPS}
    for event in events:
        if not _is_op(event):
            continue
        group = _region_of(event)
        if group is None:
            continue
        entry = totals_us[group][event.name]
        entry[0] += 1
        entry[1] += event.self_device_time_total if on_gpu else event.self_cpu_time_total
    groups = []
    for name in OP_GROUPS:
        ops = sorted(
            (OpTime(op, int(count), self_us / US_PER_S) for op, (count, self_us) in totals_us[name].items()),
            key=lambda o: (-o.self_s, o.name),
        )
        groups.append(ProfileGroup(name, sum(o.self_s for o in ops), tuple(ops)))
    return tuple(groups)


# --- once per process -----------------------------------------------------------------------------------------------
@functools.cache
def prime_profiler() -> None:
    """Start and stop torch's profiler once, in the calling thread. Kineto, its engine, sets up its client only in the
    thread that loaded torch, and prints "ERROR: External init callback must run in same thread as registerClient"
    when the first profile of a process starts in any other thread, as every Streamlit script thread is (the Cost
    page's Profile). The app's server calls this where it imported torch, at start: later profiles, in any thread,
    find Kineto set up."""
    with profile(activities=[ProfilerActivity.CPU]):
        pass


# --- the replay ------------------------------------------------------------------------------------------------------
def check_pass(trace: Trace, pass_index: int) -> None:
    if not 0 <= pass_index < trace.new_tokens:
        decodes = f", 1..{trace.new_tokens - 1} decode" if trace.new_tokens > 1 else ""
        raise BadInput(
            f"Pass {pass_index} is not in this run: it made {trace.new_tokens} passes (0 = prefill{decodes}) and "
            f"stopped by {trace.stop_reason}; pick one of those."
        )


def _state_before(lm: LoadedModel, trace: Trace, pass_index: int) -> object:
    """A cache holding exactly what the run's cache held before pass K: the prompt, then every fed token before K."""
    cache = new_cache(lm.model)
    if pass_index == 0:
        return cache
    prefill(lm.model, torch.tensor([list(trace.prompt_token_ids)], device=lm.torch_device), cache)
    for fed in trace.passes[1:pass_index]:
        decode_one_token(lm.model, torch.tensor([list(fed.input_token_ids)], device=lm.torch_device), cache)
    return cache


def profile_pass(lm: LoadedModel, trace: Trace, pass_index: int) -> PassProfile:
    """Replay pass K of `trace` on its model: warm up, time it without the profiler (median of a few), then time it
    once under the profiler."""
    check_pass(trace, pass_index)
    if trace.model != lm.info:  # replaying its tokens through another model would profile a different computation
        raise BadInput("This run came from another model, dtype or device: run it again on this one, then profile.")
    if trace.decode_path != "eager":  # a replay on a growing cache would profile other kernels than the run timed
        raise BadInput(
            f"This run decoded on the {trace.decode_path} path and the profiler replays the eager one: run it again "
            "with the eager decode path, then profile."
        )
    record = trace.passes[pass_index]
    device = lm.torch_device
    ids = torch.tensor([list(record.input_token_ids)], device=device)  # (1, T) prefill, (1, 1) decode
    forward = prefill if record.is_prefill else decode_one_token
    cache = _state_before(lm, trace, pass_index)

    def rewind() -> None:
        # Back to the state before pass K: the next run of the pass does the same work (the same concatenations).
        nonlocal cache
        if record.is_prefill:
            cache = new_cache(lm.model)
        elif lm.info.sliding_layers:  # a full sliding layer has dropped the positions crop would have to bring back
            cache = _state_before(lm, trace, pass_index)
        else:
            cache.crop(-record.tokens_in)

    forward(lm.model, ids, cache)  # warm-up: kernel choice, allocator, page faults
    rewind()
    unprofiled_s = []
    for _ in range(UNPROFILED_REPEATS):
        unprofiled_s.append(timed(device, forward, lm.model, ids, cache)[1])
        rewind()
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_gpu else [ProfilerActivity.CPU]
    # Kineto prints start/stop banners on stderr at its default level, which would break the CLI's one-line errors;
    # an explicit setting wins.
    os.environ.setdefault(KINETO_LOG_LEVEL_ENV, "6")
    synchronize(device)
    with regions(lm.model, cache), profile(activities=activities) as prof:
        with record_function(PASS_REGION):
            logits, wall_s_profiled = timed(device, forward, lm.model, ids, cache)
    groups = group_events(list(prof.events()), on_gpu)
    return PassProfile(
        model_name=lm.info.display_name,
        pass_index=pass_index,
        phase=record.phase,
        tokens_in=record.tokens_in,
        cache_len_before=record.cache_len_before,
        device_kind=device.type,
        time_kind="GPU kernel time" if on_gpu else "CPU self time",
        wall_s_profiled=wall_s_profiled,
        wall_s_unprofiled=statistics.median(unprofiled_s),
        wall_s_unprofiled_samples=tuple(unprofiled_s),
        wall_s_run=trace.pass_wall_spread(pass_index).median,
        groups=groups,
        remainder_name=CUDA_REMAINDER if on_gpu else CPU_REMAINDER,
        remainder_s=wall_s_profiled - sum(g.self_s for g in groups),
        replay_argmax_token_id=int(logits.argmax(-1).item()),
    )
