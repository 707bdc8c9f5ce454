"""The what-if roofline of a model on N GPUs: the prefill's and a decode step's floors, the tokens/s ceilings, the
batch where decode turns compute-bound, the largest batch that fits, and the tensor-parallel split. All modelled from
config.json and the spec tables; `explain.formula_lines` prints every formula with its numbers.

The decode step follows the usual roofline rule: every weight is read once per step whatever the batch, each
request's KV cache is read once (and its new position written), and the matmuls cost 2 FLOPs per weight per token. A
serving engine pre-allocates its cache (vLLM's paged blocks), so a step writes only the new position; the explorer's
own engine grows a DynamicCache by copying, which `explorer.core.roofline` models for the local runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from explorer.core.errors import BadInput
from explorer.core.gpu_specs import GPU_SPECS, MEMORY_UNIT, GpuSpec, match_gpu_spec, normalise_gpu_name
from explorer.scale.config import Architecture
from explorer.scale.interconnect import INTERCONNECTS, Link
from explorer.scale.params import ParamCounts, bytes_per_element, count_params, kv_bytes_per_token

SCHEMA = "explorer.whatif/1"
MAX_GPUS = 64
MAX_BATCH = 1_000_000
ALL_REDUCES_PER_LAYER = 2  # Megatron-style tensor parallelism: after attention's o_proj and after the MLP's down


def find_gpu(name: str) -> GpuSpec:
    """A row of the spec table by its name ("H100 SXM", "h100-sxm") or as a device reports itself ("NVIDIA
    A100-SXM4-80GB"); one line listing the names when none or several fit."""
    wanted = normalise_gpu_name(name)
    exact = [spec for spec in GPU_SPECS if normalise_gpu_name(spec.name) == wanted]
    found = exact[0] if exact else match_gpu_spec(name, None)
    if found is None:
        raise BadInput(f"Unknown or ambiguous GPU '{name}': use one of {', '.join(spec.name for spec in GPU_SPECS)}.")
    return found


@dataclass(frozen=True)
class Scenario:
    """What the user asks about: a model on `gpus` GPUs of one kind, a dtype, a batch, a context and a prompt."""

    arch: Architecture
    gpu: GpuSpec
    dtype: str = "bfloat16"
    gpus: int = 1  # tensor-parallel group size
    batch: int = 1  # requests decoded together in one step
    context: int = 1  # tokens each request holds in its KV cache at the decode step
    prompt_tokens: int = 1  # one prompt's length, for the prefill floor

    @property
    def bytes_per_element(self) -> int:
        return bytes_per_element(self.dtype)

    @property
    def peak_flops(self) -> float:
        """One GPU's dense peak in this dtype (spec)."""
        peak = self.gpu.peak_flops(self.dtype)
        assert peak is not None, "check_scenario refuses a dtype the spec table has no figure for"
        return peak

    @property
    def memory_bytes(self) -> int:
        """One GPU's memory (spec): the datasheet's GB read as 10^9 bytes (`gpu_specs.MEMORY_UNIT`)."""
        return self.gpu.memory_bytes

    @property
    def link(self) -> Link | None:
        """The link the group's all-reduces run over; None on one GPU."""
        return INTERCONNECTS[self.gpu.name].link_for(self.gpus) if self.gpus > 1 else None


def check_scenario(s: Scenario) -> None:
    """Refuse, in one line each, what the model cannot answer."""
    bytes_per_element(s.dtype)
    if s.gpu.peak_flops(s.dtype) is None:
        raise BadInput(f"The spec table has no {s.dtype} figure for the {s.gpu.name}: pick float16 or float32.")
    if not 1 <= s.gpus <= MAX_GPUS:
        raise BadInput(f"--gpus must be 1 to {MAX_GPUS}, not {s.gpus}.")
    if s.arch.heads % s.gpus:
        good = ", ".join(str(n) for n in range(1, min(s.arch.heads, MAX_GPUS) + 1) if s.arch.heads % n == 0)
        raise BadInput(
            f"{s.arch.display_name} has {s.arch.heads} query heads: tensor parallelism splits them evenly, so use "
            f"--gpus {good}."
        )
    if s.gpus > 1 and s.gpu.name not in INTERCONNECTS:
        raise BadInput(f"No interconnect figure for the {s.gpu.name}: tensor parallelism cannot be modelled on it.")
    if not 1 <= s.batch <= MAX_BATCH:
        raise BadInput(f"--batch must be 1 to {MAX_BATCH:,}, not {s.batch}.")
    for label, tokens in (("--context", s.context), ("--prompt-tokens", s.prompt_tokens)):
        if not 1 <= tokens <= s.arch.max_context:
            raise BadInput(
                f"{label} must be 1 to {s.arch.max_context:,} (the model's max_position_embeddings), not {tokens}."
            )


@dataclass(frozen=True)
class Shard:
    """What one GPU of a tensor-parallel group holds (the whole model on one GPU)."""

    gpus: int
    weight_bytes: int  # the split parameters' 1/N (rounded up) plus the norms, which every GPU keeps whole
    kv_heads: int  # KV heads per GPU: kv_heads / N, at least 1 (replicated when N > kv_heads)
    kv_bytes_per_token: int  # this GPU's share of one request's KV per token


def shard(s: Scenario, counts: ParamCounts | None = None) -> Shard:
    counts = counts or count_params(s.arch)
    split = counts.total - counts.norms
    kv_heads = max(1, math.ceil(s.arch.kv_heads / s.gpus))
    return Shard(
        gpus=s.gpus,
        weight_bytes=(math.ceil(split / s.gpus) + counts.norms) * s.bytes_per_element,
        kv_heads=kv_heads,
        kv_bytes_per_token=kv_bytes_per_token(s.arch, s.dtype, kv_heads),
    )


@dataclass(frozen=True)
class PassFloor:
    """The roofline's lower bound on one pass, on each GPU of the group (all modelled)."""

    tokens: int  # positions computed: B for a decode step, P for a prefill
    flops: float  # one GPU's share
    weight_bytes: int  # read once per pass
    kv_bytes: int  # KV read + written
    link_bytes: float  # sent by each GPU for the pass's all-reduces (0 on one GPU)
    t_compute_s: float  # flops / peak
    t_weight_s: float  # weight_bytes / bandwidth
    t_kv_s: float  # kv_bytes / bandwidth
    t_link_s: float  # link_bytes / the link's one-way bandwidth

    @property
    def t_memory_s(self) -> float:
        return self.t_weight_s + self.t_kv_s

    @property
    def floor_s(self) -> float:
        """Maths and memory overlap, so the slower of them; the all-reduces wait on both, so they add."""
        return max(self.t_compute_s, self.t_memory_s) + self.t_link_s

    @property
    def bound(self) -> str:
        return "compute" if self.t_compute_s >= self.t_memory_s else "memory"


def allreduce_bytes(s: Scenario, tokens: int) -> float:
    """What each GPU sends for a pass's all-reduces: 2 per layer of tokens x hidden activations, each a ring
    all-reduce that sends 2 (N - 1) / N of the message."""
    message = tokens * s.arch.hidden_size * s.bytes_per_element
    return ALL_REDUCES_PER_LAYER * s.arch.layers * message * 2 * (s.gpus - 1) / s.gpus


def _floor(s: Scenario, tokens: int, flops: float, weight_bytes: int, kv_bytes: int) -> PassFloor:
    link_bytes = allreduce_bytes(s, tokens)
    link = s.link
    return PassFloor(
        tokens=tokens,
        flops=flops,
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        link_bytes=link_bytes,
        t_compute_s=flops / s.peak_flops,
        t_weight_s=weight_bytes / s.gpu.bandwidth_bytes_per_s,
        t_kv_s=kv_bytes / s.gpu.bandwidth_bytes_per_s,
        t_link_s=link_bytes / link.one_way_bytes_per_s if link else 0.0,
    )


def attention_flops(arch: Architecture, queries_times_keys: int) -> int:
    """Q @ K^T and P @ V: 2 x head_dim each per query head and (query, key) pair, every layer."""
    return 2 * 2 * arch.layers * arch.heads * arch.head_dim * queries_times_keys


def decode_step(s: Scenario, batch: int | None = None, context: int | None = None) -> PassFloor:
    """One decode step of `batch` requests, each holding `context` positions: weights once, each request's KV read
    once and its new position written, 2 FLOPs per weight per request plus attention over the context."""
    batch = s.batch if batch is None else batch
    context = s.context if context is None else context
    counts = count_params(s.arch)
    part = shard(s, counts)
    flops = batch * (2 * counts.linear + attention_flops(s.arch, context)) / s.gpus
    kv_bytes = batch * (context + 1) * part.kv_bytes_per_token
    return _floor(s, batch, flops, part.weight_bytes, kv_bytes)


def prefill(s: Scenario) -> PassFloor:
    """One prompt of P tokens: every projection on P positions, the LM head on the last one only (inference needs only
    the next token), causal attention over P (P + 1) / 2 pairs (a fused kernel skips the masked half), weights read
    once and the prompt's KV written."""
    counts = count_params(s.arch)
    part = shard(s, counts)
    p = s.prompt_tokens
    lm_head = s.arch.vocab_size * s.arch.hidden_size
    flops = (2 * (counts.linear - lm_head) * p + 2 * lm_head + attention_flops(s.arch, p * (p + 1) // 2)) / s.gpus
    return _floor(s, p, flops, part.weight_bytes, p * part.kv_bytes_per_token)


def ridge_batch(s: Scenario, context: int | None = None) -> int | None:
    """The smallest batch whose decode step is compute-bound at this context, None if none is: each request adds
    compute c and KV traffic m to a step whose weight read w is fixed, so B c >= w + B m from B = w / (c - m) on."""
    one, two = decode_step(s, 1, context), decode_step(s, 2, context)
    c = two.t_compute_s - one.t_compute_s
    m = two.t_kv_s - one.t_kv_s
    if c <= m:
        return None  # long contexts: every request brings as many bytes as FLOPs can hide
    batch = max(1, math.ceil(one.t_weight_s / (c - m)))
    while batch > 1 and decode_step(s, batch - 1, context).bound == "compute":  # float rounding, either way
        batch -= 1
    while decode_step(s, batch, context).bound != "compute":
        batch += 1
    return batch


def max_batch(s: Scenario, context: int | None = None) -> int:
    """The largest batch whose weights and KV at this context fit one GPU's memory (0: the weights alone do not)."""
    context = s.context if context is None else context
    part = shard(s)
    free = s.memory_bytes - part.weight_bytes
    return max(0, free // (context * part.kv_bytes_per_token))


def kv_crossover_context(s: Scenario, batch: int | None = None) -> int:
    """The shortest context at which a decode step's KV traffic, B (T + 1) kv, reaches its weight read W."""
    batch = s.batch if batch is None else batch
    part = shard(s)
    return max(1, -(-part.weight_bytes // (batch * part.kv_bytes_per_token)) - 1)


@dataclass(frozen=True)
class WhatIf:
    """Every figure the what-if gives for one scenario (modelled, from config.json and spec figures)."""

    scenario: Scenario
    counts: ParamCounts
    shard: Shard
    prefill: PassFloor
    decode: PassFloor
    ridge_batch: int | None  # None: the step stays memory-bound at any batch
    max_batch: int  # 0: the weights alone do not fit
    kv_crossover_context: int
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def params(self) -> int:
        return self.counts.total

    @property
    def weight_bytes(self) -> int:
        return self.params * self.scenario.bytes_per_element

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.scenario.arch, self.scenario.dtype)

    @property
    def decode_tokens_per_s_ceiling(self) -> float:
        """Aggregate: B tokens per step."""
        return self.scenario.batch / self.decode.floor_s

    @property
    def decode_tokens_per_s_ceiling_per_stream(self) -> float:
        return 1 / self.decode.floor_s

    @property
    def fits(self) -> bool:
        """The weights and the asked batch's KV at the asked context fit one GPU's memory."""
        return self.max_batch >= self.scenario.batch

    def to_dict(self) -> dict[str, Any]:
        """Flat headline figures first (what `--json` readers look up), then what they were computed from."""
        s = self.scenario
        return {
            "schema": SCHEMA,
            "params": self.params,
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "prefill_s_floor": self.prefill.floor_s,
            "decode_step_s_floor": self.decode.floor_s,
            "decode_tokens_per_s_ceiling": self.decode_tokens_per_s_ceiling,
            "decode_tokens_per_s_ceiling_per_stream": self.decode_tokens_per_s_ceiling_per_stream,
            "ridge_batch": self.ridge_batch,
            "max_batch": self.max_batch,
            "kv_crossover_context": self.kv_crossover_context,
            "fits": self.fits,
            "inputs": {
                "dtype": s.dtype,
                "gpus": s.gpus,
                "batch": s.batch,
                "context": s.context,
                "prompt_tokens": s.prompt_tokens,
            },
            "params_by_part": self.counts.by_part,
            "prefill": asdict(self.prefill) | {"floor_s": self.prefill.floor_s, "bound": self.prefill.bound},
            "decode_step": asdict(self.decode) | {"floor_s": self.decode.floor_s, "bound": self.decode.bound},
            "tensor_parallel": asdict(self.shard) | {"link": asdict(s.link) if s.link else None},
            "model": asdict(s.arch),
            "gpu": {
                "name": s.gpu.name,
                "peak_flops": s.peak_flops,
                "bandwidth_bytes_per_s": s.gpu.bandwidth_bytes_per_s,
                "memory_bytes": s.memory_bytes,
                "memory_gb": s.gpu.memory_gb,
                "memory_unit": MEMORY_UNIT,
                "source": s.gpu.source,
            },
            "units": dict(UNITS),
            "sources": self.sources,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


UNITS = {  # the unit of every memory figure in the JSON (all bytes are counted exactly, none is a GiB)
    "weight_bytes": "bytes",
    "kv_bytes_per_token": "bytes",
    "prefill.weight_bytes": "bytes",
    "prefill.kv_bytes": "bytes",
    "prefill.link_bytes": "bytes",
    "decode_step.weight_bytes": "bytes",
    "decode_step.kv_bytes": "bytes",
    "decode_step.link_bytes": "bytes",
    "tensor_parallel.weight_bytes": "bytes, per GPU",
    "tensor_parallel.kv_bytes_per_token": "bytes, per GPU",
    "gpu.memory_bytes": f"bytes: the {MEMORY_UNIT}",
    "gpu.memory_gb": "GB (10^9 bytes), as the datasheet prints it",
    "gpu.bandwidth_bytes_per_s": "bytes per second (datasheet GB/s x 10^9)",
}

SOURCES = {
    "params": "modelled: counted exactly from config.json",
    "weight_bytes": "modelled: params x bytes per element",
    "kv_bytes_per_token": "modelled: 2 x layers x kv_heads x head_dim x bytes per element",
    "prefill_s_floor": "modelled: max(FLOPs / peak, bytes / bandwidth) + all-reduces, spec figures",
    "decode_step_s_floor": "modelled: max(FLOPs / peak, bytes / bandwidth) + all-reduces, spec figures",
    "decode_tokens_per_s_ceiling": "modelled: batch / decode_step_s_floor",
    "ridge_batch": "modelled: the smallest batch whose decode step is compute-bound",
    "max_batch": f"modelled: (GPU memory - weights) / (context x KV bytes per token), per GPU; memory: {MEMORY_UNIT}",
    "gpu": "spec: explorer.core.gpu_specs and explorer.scale.interconnect (each row cites its datasheet)",
}


def what_if(s: Scenario) -> WhatIf:
    check_scenario(s)
    counts = count_params(s.arch)
    return WhatIf(
        scenario=s,
        counts=counts,
        shard=shard(s, counts),
        prefill=prefill(s),
        decode=decode_step(s),
        ridge_batch=ridge_batch(s),
        max_batch=max_batch(s),
        kv_crossover_context=kv_crossover_context(s),
        sources=dict(SOURCES),
    )
