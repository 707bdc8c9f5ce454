"""A profiled pass as a record, torch-free: the op groups it is split into and `PassProfile`, which the device owner
sends back as `to_dict()` and the web tier rebuilds with `from_dict` to draw (`explorer.core.profiler` takes it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from explorer.core import operators
from explorer.core.trace import JsonRecord, Phase

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PassProfile:
        """Back from `to_dict` (what it adds for readers is left out)."""
        known = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        groups = tuple(
            ProfileGroup(g["name"], g["self_s"], tuple(OpTime(**op) for op in g["ops"])) for g in data["groups"]
        )
        samples = tuple(data["wall_s_unprofiled_samples"])
        return cls(**{**known, "groups": groups, "wall_s_unprofiled_samples": samples})
