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
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from explorer.core import operators
from explorer.core.engine import decode_one_token, new_cache, prefill
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.timing import synchronize, timed
from explorer.core.trace import JsonRecord, Phase, Trace

# The op groups, in the order they are stacked and listed.
LINEAR = "linear layers / matmuls"
ATTENTION = "attention (scores, softmax, values)"
KV_UPDATE = "KV-cache update"
NORMS_ACTIVATIONS = "norms and activations"
EMBEDDING_LM_HEAD = "embedding and LM head"
OTHER_OPS = "other ops"
OP_GROUPS = (LINEAR, ATTENTION, KV_UPDATE, NORMS_ACTIVATIONS, EMBEDDING_LM_HEAD, OTHER_OPS)
GROUP_CONTENTS = {
    LINEAR: "every nn.Linear / Conv1D projection except the LM head, and an MoE's routers and experts",
    ATTENTION: "what the attention modules run besides their projections and the cache: rotary, scores, softmax, "
    "values (or the fused SDPA kernel), plus the model's rotary-table module",
    KV_UPDATE: "the cache's own update: DynamicCache concatenates each layer's K and V onto the cached ones (a copy)",
    NORMS_ACTIVATIONS: "norm modules, activation modules, and the rest of the MLP (the gated product of SwiGLU)",
    EMBEDDING_LM_HEAD: "token (and position) embeddings and the LM head's projection onto the vocabulary",
    OTHER_OPS: "ops outside every module above: residual adds, the causal mask, position ids, slicing the logits",
}
# What the per-operator cost model (explorer.core.operators) puts in each group: its modelled floor stands beside the
# group's measured time. Other ops and the remainder have no modelled counterpart.
MODELLED_KINDS = {
    LINEAR: (operators.PROJECTIONS, operators.KV_EXPAND, operators.ROUTER, operators.MLP, operators.EXPERTS),
    ATTENTION: (operators.SCORES, operators.SOFTMAX, operators.VALUES),
    KV_UPDATE: (operators.KV_UPDATE,),
    NORMS_ACTIVATIONS: (operators.OTHER_WEIGHTS,),
    EMBEDDING_LM_HEAD: (operators.EMBEDDING, operators.LM_HEAD),
}
CPU_REMAINDER = "not in any op (dispatch, Python)"
CUDA_REMAINDER = "GPU idle between kernels (launch gaps)"

REGION_PREFIX = "explorer::"
PASS_REGION = REGION_PREFIX + "pass"
REGIONS = {REGION_PREFIX + name: name for name in OP_GROUPS}  # region name -> group
US_PER_S = 1e6  # the profiler reports microseconds
KINETO_LOG_LEVEL_ENV = "KINETO_LOG_LEVEL"
UNPROFILED_REPEATS = 3  # the reference the profiler's cost is read against: a median, so one noisy sample can't set it


@dataclass(frozen=True)
class OpTime:
    """One op name within a group, as the profiler reported it, summed over its calls in the pass."""

    name: str  # e.g. "aten::mm"
    count: int  # calls in the pass
    self_s: float  # self time: CPU time excluding child ops on a CPU, its own kernels' time on a GPU


@dataclass(frozen=True)
class ProfileGroup:
    name: str
    self_s: float  # the sum of its ops' self times
    ops: tuple[OpTime, ...]  # largest first


@dataclass(frozen=True)
class PassProfile(JsonRecord):
    """Pass K of a run, profiled: op self times by group plus the remainder no op explains, summing to the wall."""

    model_name: str  # the model's display name
    pass_index: int
    phase: Phase
    tokens_in: int
    cache_len_before: int
    device_kind: str  # "cpu" | "cuda"
    time_kind: str  # what `self_s` measures: "CPU self time" | "GPU kernel time"
    wall_s_profiled: float  # measured: the pass under the profiler (with its region markers)
    wall_s_unprofiled: float  # measured: the same pass in the same replay, no profiler, no markers (median)
    wall_s_unprofiled_samples: tuple[float, ...]  # measured: each of the UNPROFILED_REPEATS timings, in order
    wall_s_run: float  # measured: the pass in the run itself (the median over the run's repeats)
    groups: tuple[ProfileGroup, ...]  # OP_GROUPS, in order, zeros included
    remainder_name: str  # CPU_REMAINDER | CUDA_REMAINDER
    remainder_s: float  # wall_s_profiled - op_total_s; negative only if the profiler's clocks disagree
    replay_argmax_token_id: int  # the profiled pass's argmax: a greedy run's token when the cache was rebuilt right

    @property
    def op_total_s(self) -> float:
        return sum(g.self_s for g in self.groups)

    @property
    def parts_total_s(self) -> float:
        """Op groups plus the remainder: the profiled wall time, by construction."""
        return self.op_total_s + self.remainder_s

    @property
    def profiler_cost_s(self) -> float:
        """What profiling added to the pass (its events and our region markers): profiled - unprofiled wall."""
        return self.wall_s_profiled - self.wall_s_unprofiled

    def group(self, name: str) -> ProfileGroup:
        return next(g for g in self.groups if g.name == name)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["group_contents"] = {g.name: GROUP_CONTENTS[g.name] for g in self.groups}  # for readers of the file
        data["op_total_s"] = self.op_total_s
        data["profiler_cost_s"] = self.profiler_cost_s
        return data


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
