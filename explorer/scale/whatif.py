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
from explorer.scale.attention import attention_flops, attention_pairs
from explorer.scale.config import Architecture, ShippedConfig, shipped, shipped_key
from explorer.scale.figure_sources import SOURCES, UNITS
from explorer.scale.interconnect import INTERCONNECTS, Link
from explorer.scale.params import (
    ParamCounts,
    bytes_per_element,
    count_params,
    expected_experts_read,
    kv_bytes_at,
    kv_bytes_per_token,
    storage_bits,
    stored_bytes,
)

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
    weights_dtype: str | None = None  # how the weights are stored (the quantization what-if); None: `dtype`
    kv_dtype: str | None = None  # how the KV cache is stored; None: `dtype`

    @property
    def bytes_per_element(self) -> int:
        """The compute dtype's: activations, and what the all-reduces move."""
        return bytes_per_element(self.dtype)

    @property
    def weights_storage(self) -> str:
        return self.weights_dtype or self.dtype

    @property
    def kv_storage(self) -> str:
        return self.kv_dtype or self.dtype

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
    storage_bits(s.weights_storage)
    storage_bits(s.kv_storage)
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
    kv_bytes_per_token: int  # this GPU's share of what one more position adds while every layer grows
    expert_bytes: int = 0  # this GPU's share of one expert of one layer (0: dense)

    def weights_read_bytes(self, s: Scenario, counts: ParamCounts, tokens: int) -> int:
        """What a pass over `tokens` tokens reads of this GPU's weights: all of a dense model's; of a mixture of
        experts, the dense part and the experts its tokens are expected to pick (uniform routing, an assumption)."""
        if not counts.experts:
            return self.weight_bytes
        unread = counts.moe_layers * (s.arch.n_experts - expected_experts_read(s.arch, tokens))
        return round(self.weight_bytes - unread * self.expert_bytes)

    def kv_bytes_at(self, s: Scenario, context: int) -> int:
        """This GPU's share of one request's KV cache at `context` (each sliding layer keeps at most its window)."""
        return kv_bytes_at(s.arch, context, s.kv_storage, self.kv_heads)


def shard(s: Scenario, counts: ParamCounts | None = None) -> Shard:
    counts = counts or count_params(s.arch)
    split = counts.total - counts.norms
    kv_heads = max(1, math.ceil(s.arch.kv_heads / s.gpus))
    return Shard(
        gpus=s.gpus,
        weight_bytes=stored_bytes(math.ceil(split / s.gpus) + counts.norms, s.weights_storage),
        kv_heads=kv_heads,
        kv_bytes_per_token=kv_bytes_per_token(s.arch, s.kv_storage, kv_heads),
        expert_bytes=stored_bytes(counts.expert_each / s.gpus, s.weights_storage),
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


def decode_step(
    s: Scenario, batch: int | None = None, context: int | None = None, every_expert: bool = False
) -> PassFloor:
    """One decode step of `batch` requests, each holding `context` positions: weights once (of a mixture of experts,
    those its B tokens' routers are expected to pick), each request's KV read once (a sliding layer's window of it)
    and its new position written, 2 FLOPs per weight a token multiplies by plus attention over what it reads.
    `every_expert`: as if every expert were read whatever the batch (a dense model of the same size), to compare."""
    batch = s.batch if batch is None else batch
    context = s.context if context is None else context
    counts = count_params(s.arch)
    part = shard(s, counts)
    pairs = attention_pairs(s.arch, 1, context + 1)  # the new token attends to the cache and to itself
    flops = batch * (2 * counts.linear + attention_flops(s.arch, pairs)) / s.gpus
    kv_bytes = batch * (part.kv_bytes_at(s, context) + part.kv_bytes_per_token)
    weights = part.weight_bytes if every_expert else part.weights_read_bytes(s, counts, batch)
    return _floor(s, batch, flops, weights, kv_bytes)


def prefill(s: Scenario) -> PassFloor:
    """One prompt of P tokens: every projection on P positions, the LM head on the last one only (inference needs only
    the next token), causal attention over P (P + 1) / 2 pairs (fewer on sliding layers; a fused kernel skips the
    masked half), weights read once (the experts P tokens are expected to pick) and the prompt's KV written."""
    counts = count_params(s.arch)
    part = shard(s, counts)
    p = s.prompt_tokens
    lm_head = s.arch.vocab_size * s.arch.hidden_size
    attention = attention_flops(s.arch, attention_pairs(s.arch, p, p))
    flops = (2 * (counts.linear - lm_head) * p + 2 * lm_head + attention) / s.gpus
    return _floor(s, p, flops, part.weights_read_bytes(s, counts, p), part.kv_bytes_at(s, p))


def ridge_batch(s: Scenario, context: int | None = None) -> int | None:
    """The smallest batch whose decode step is compute-bound at this context, None if none is up to MAX_BATCH. Compute
    grows as B; memory as the KV, B x per request, plus the weights, fixed for a dense model and growing towards all
    experts for a mixture of experts: so once a step is compute-bound, every larger batch is too (a search suffices)."""
    if decode_step(s, 1, context).bound == "compute":
        return 1
    high = 2
    while decode_step(s, high, context).bound != "compute":
        if high >= MAX_BATCH:
            return None  # long contexts: each request adds more bytes than its FLOPs can hide
        high = min(2 * high, MAX_BATCH)
    low = high // 2  # memory-bound
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if decode_step(s, middle, context).bound == "compute" else (middle, high)
    return high


def max_batch(s: Scenario, context: int | None = None) -> int:
    """The largest batch whose weights and KV at this context fit one GPU's memory (0: the weights alone do not)."""
    context = s.context if context is None else context
    part = shard(s)
    free = s.memory_bytes - part.weight_bytes
    return max(0, free // part.kv_bytes_at(s, context))


def kv_crossover_context(s: Scenario, batch: int | None = None) -> int | None:
    """The shortest context at which a decode step's KV traffic, B x (the cache + one position), reaches its weight
    read W; None where it never does (every layer sliding: the cache stops growing at the window)."""
    batch = s.batch if batch is None else batch
    counts = count_params(s.arch)
    part = shard(s, counts)
    weights = part.weights_read_bytes(s, counts, batch)
    if not s.arch.sliding_layers:  # every layer grows: B (T + 1) kv >= W, solved for T
        return max(1, -(-weights // (batch * part.kv_bytes_per_token)) - 1)

    def reached(context: int) -> bool:
        return batch * (part.kv_bytes_at(s, context) + part.kv_bytes_per_token) >= weights

    high = 1
    while not reached(high):
        if high > 2**40:
            return None
        high *= 2
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reached(middle) else (middle, high)
    return max(1, high)


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
    kv_crossover_context: int | None  # None: KV reads never overtake the weights (every layer sliding)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def params(self) -> int:
        return self.counts.total

    @property
    def active_params(self) -> int:
        """Parameters one token uses: all of a dense model's; of a mixture of experts, all but the experts not
        picked."""
        return self.counts.active

    @property
    def weight_bytes(self) -> int:
        return stored_bytes(self.params, self.scenario.weights_storage)

    @property
    def kv_bytes_per_token(self) -> int:
        """One request's KV cache at the scenario's context, per token of it: with sliding layers, less than what one
        more position adds early on (`kv_bytes_per_new_token`), as a sliding layer keeps only its window."""
        s = self.scenario
        return kv_bytes_at(s.arch, s.context, s.kv_storage) // s.context

    @property
    def kv_bytes_per_new_token(self) -> int:
        return kv_bytes_per_token(self.scenario.arch, self.scenario.kv_storage)

    @property
    def experts_read_per_layer(self) -> float:
        """Distinct experts a sparse layer is expected to read in the decode step (uniform routing, an assumption)."""
        return expected_experts_read(self.scenario.arch, self.scenario.batch)

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
            "active_params": self.active_params,
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_new_token": self.kv_bytes_per_new_token,
            "prefill_s_floor": self.prefill.floor_s,
            "decode_step_s_floor": self.decode.floor_s,
            "decode_tokens_per_s_ceiling": self.decode_tokens_per_s_ceiling,
            "decode_tokens_per_s_ceiling_per_stream": self.decode_tokens_per_s_ceiling_per_stream,
            "ridge_batch": self.ridge_batch,
            "max_batch": self.max_batch,
            "kv_crossover_context": self.kv_crossover_context,
            "fits": self.fits,
            "experts": self.experts_dict(),
            "published": self.published.published_dict() if self.published else None,
            "attention": {
                "layers": s.arch.layers,
                "sliding_layers": s.arch.sliding_layers,
                "windows": sorted({w for w in s.arch.windows if w}),
            },
            "inputs": {
                "dtype": s.dtype,
                "weights_dtype": s.weights_storage,
                "kv_dtype": s.kv_storage,
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

    @property
    def published(self) -> ShippedConfig | None:
        """The shipped config's row, with the publisher's own (maybe rounded) figures; None for any other config."""
        key = shipped_key(self.scenario.arch.name)
        return shipped()[key] if key else None

    def published_active_note(self) -> str:
        """The publisher's active figure beside the exact count (`ShippedConfig.active_note`); "" for other configs."""
        row = self.published
        return row.active_note(self.active_params, self.counts.embeddings) if row else ""

    def experts_dict(self) -> dict[str, Any] | None:
        """A mixture of experts' routing figures (None for a dense model)."""
        a = self.scenario.arch
        if not a.is_moe:
            return None
        return {
            "n_experts": a.n_experts,
            "experts_per_token": a.experts_per_token,
            "moe_layers": a.moe_layers,
            "params_per_expert": self.counts.expert_each,
            "expected_experts_read_per_layer": self.experts_read_per_layer,
            "routing": "ASSUMED uniform and independent per token: n (1 - (1 - k/n)^B) distinct experts per layer",
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


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
