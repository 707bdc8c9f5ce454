"""A what-if scenario (a model on N GPUs of one kind, its dtypes, batch, context and prompt) and its floors: what one
GPU of the group holds, and the `Cost` of a prefill and of a decode step at the GPU's spec figures, counted as the live
run's passes are. The conventions (`explorer.core.roofline`) are listed in `explorer.scale.whatif`'s opening lines."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from explorer.core.device_profile import DeviceProfile
from explorer.core.errors import BadInput
from explorer.core.gpu_specs import GPU_SPECS, GpuSpec, match_gpu_spec, normalise_gpu_name
from explorer.core.roofline import CacheLayout, Cost, attention_flops, kv_traffic_positions
from explorer.scale.config import Architecture
from explorer.scale.interconnect import INTERCONNECTS, Link
from explorer.scale.params import (
    ParamCounts,
    bytes_per_element,
    count_params,
    expected_experts_read,
    expert_weight_params,
    expert_weights,
    kv_bytes_at,
    kv_bytes_per_token,
    kv_position_bytes,
    storage_bits,
    stored_bytes,
)

MAX_GPUS = 64
MAX_BATCH = 1_000_000
ALL_REDUCES_PER_LAYER = 2  # Megatron-style tensor parallelism: after attention's o_proj and after the MLP's down
CACHE_LAYOUT: CacheLayout = "read_once"  # a serving engine's paged cache (`explorer.core.roofline.CacheLayout`)


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
    experts_dtype: str | None = None  # how the experts' weights are stored; None: as shipped (gpt-oss: MXFP4), else
    # as the other weights

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
    def experts_storage(self) -> str:
        """How the experts' weights are stored: as asked, else as the model ships them, else as the other weights."""
        return self.experts_dtype or self.arch.experts_shipped_as or self.weights_storage

    @property
    def device(self) -> DeviceProfile:
        """One GPU's spec figures as the roofline divides by them: the datasheet's peak for the dtype, and its memory
        bandwidth for reads and writes alike."""
        return DeviceProfile(
            self.gpu.name, "cuda", self.dtype, self.peak_flops, "spec", self.gpu.bandwidth_bytes_per_s, "spec"
        )

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
    for stored in (s.weights_storage, s.kv_storage, s.experts_storage):
        storage_bits(stored)
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
    table_bytes: int = 0  # this GPU's share of an untied input embedding table (0: tied, read whole as the LM head)

    def weights_read_bytes(
        self, s: Scenario, counts: ParamCounts, tokens: int, every_expert: bool = False, table_whole: bool = False
    ) -> int:
        """What a pass over `tokens` tokens reads of this GPU's weights: every weight but an untied input table,
        of which it gathers the tokens' rows (`table_whole`: all of it, as the rule of thumb 'weights / bandwidth'
        counts it); of a mixture of experts, the dense part and the experts its tokens are expected to pick (uniform
        routing, an assumption), or `every_expert`."""
        read = float(self.weight_bytes)
        if counts.experts and not every_expert:
            read -= counts.moe_layers * (s.arch.n_experts - expected_experts_read(s.arch, tokens)) * self.expert_bytes
        if self.table_bytes and not table_whole:
            rows = min(tokens, s.arch.vocab_size)
            read -= self.table_bytes - stored_bytes(rows * s.arch.hidden_size / s.gpus, s.weights_storage)
        return round(read)

    def kv_bytes_at(self, s: Scenario, context: int) -> int:
        """This GPU's share of one request's KV cache at `context` (a sliding layer holds at most window - 1)."""
        return kv_bytes_at(s.arch, context, s.kv_storage, self.kv_heads)


def shard(s: Scenario, counts: ParamCounts | None = None) -> Shard:
    counts = counts or count_params(s.arch)
    experts = expert_weight_params(s.arch)  # stored as the experts are; their biases as the other weights
    split = counts.total - counts.norms - experts
    kv_heads = max(1, math.ceil(s.arch.kv_heads / s.gpus))
    expert_biases = counts.expert_each - expert_weights(s.arch)
    return Shard(
        gpus=s.gpus,
        weight_bytes=stored_bytes(math.ceil(split / s.gpus) + counts.norms, s.weights_storage)
        + stored_bytes(experts / s.gpus, s.experts_storage),
        kv_heads=kv_heads,
        kv_bytes_per_token=kv_bytes_per_token(s.arch, s.kv_storage, kv_heads),
        expert_bytes=stored_bytes(expert_weights(s.arch) / s.gpus, s.experts_storage)
        + stored_bytes(expert_biases / s.gpus, s.weights_storage)
        if counts.experts
        else 0,
        table_bytes=0 if s.arch.tied_embeddings else stored_bytes(counts.embeddings / s.gpus, s.weights_storage),
    )


@dataclass(frozen=True)
class PassFloor:
    """The roofline's lower bound on one pass, on each GPU of the group (all modelled): its `Cost` at the GPU's spec
    figures, as a live pass's, plus what tensor parallelism adds."""

    tokens: int  # positions computed: B for a decode step, P for a prefill
    cost: Cost  # one GPU's share: FLOPs, weights read, KV read and written (a read-once cache), and their times
    link_bytes: float  # sent by each GPU for the pass's all-reduces (0 on one GPU)
    t_link_s: float  # link_bytes / the link's one-way bandwidth

    @property
    def floor_s(self) -> float:
        """Maths and memory overlap, so the slower of them; the all-reduces wait on both, so they add."""
        return self.cost.roofline_time_s + self.t_link_s

    @property
    def bound(self) -> str:
        return self.cost.bound

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, **asdict(self.cost)} | {
            "link_bytes": self.link_bytes,
            "t_link_s": self.t_link_s,
            "floor_s": self.floor_s,
            "bound": self.bound,
        }


def allreduce_bytes(s: Scenario, tokens: int) -> float:
    """What each GPU sends for a pass's all-reduces: 2 per layer of tokens x hidden activations, each a ring
    all-reduce that sends 2 (N - 1) / N of the message."""
    message = tokens * s.arch.hidden_size * s.bytes_per_element
    return ALL_REDUCES_PER_LAYER * s.arch.layers * message * 2 * (s.gpus - 1) / s.gpus


def _floor(s: Scenario, tokens: int, cost: Cost) -> PassFloor:
    link_bytes = allreduce_bytes(s, tokens)
    link = s.link
    return PassFloor(tokens, cost, link_bytes, link_bytes / link.one_way_bytes_per_s if link else 0.0)


def kv_traffic(s: Scenario, part: Shard, tokens_in: int, context: int) -> tuple[int, int]:
    """(bytes read, bytes written) of one request's KV cache on one GPU by a pass of `tokens_in` positions onto
    `context` held ones, by the live run's rule for a read-once cache (`explorer.core.roofline.layer_kv_positions`)."""
    read, written = kv_traffic_positions(s.arch, tokens_in, context, cache_layout=CACHE_LAYOUT)
    return (
        kv_position_bytes(s.arch, read, s.kv_storage, part.kv_heads),
        kv_position_bytes(s.arch, written, s.kv_storage, part.kv_heads),
    )


def decode_step(
    s: Scenario,
    batch: int | None = None,
    context: int | None = None,
    every_expert: bool = False,
    table_whole: bool = False,
) -> PassFloor:
    """One decode step of `batch` requests, each holding `context` positions: weights once (of a mixture of experts,
    those its B tokens' routers are expected to pick), each request's cache read once (a sliding layer's window - 1 of
    it) and its new position written and read, 2 FLOPs per weight a token multiplies by plus attention over its
    useful pairs. `every_expert`: as if every expert were read whatever the batch (a dense model of that size).
    `table_whole`: as if an untied input table were read whole, not gathered row by row (the rule of thumb's step)."""
    batch = s.batch if batch is None else batch
    context = s.context if context is None else context
    counts = count_params(s.arch)
    part = shard(s, counts)
    attention = attention_flops(s.arch, 1, context)  # the new token attends to what is held and to itself
    read, written = kv_traffic(s, part, 1, context)
    cost = Cost.priced(
        s.device,
        round(batch * (2 * counts.linear + attention) / s.gpus),
        part.weights_read_bytes(s, counts, batch, every_expert, table_whole),
        (batch * read, batch * written),
        attention_flops=round(batch * attention / s.gpus),
        cache_layout=CACHE_LAYOUT,
    )
    return _floor(s, batch, cost)


def prefill_floor(s: Scenario) -> PassFloor:
    """One prompt of P tokens: every projection on P positions, the LM head on the last one only (inference needs only
    the next token), causal attention over its useful pairs, P (P + 1) / 2 per head and layer (fewer on sliding
    layers), weights read once (the experts P tokens are expected to pick) and the prompt's KV written and read."""
    counts = count_params(s.arch)
    part = shard(s, counts)
    p = s.prompt_tokens
    lm_head = s.arch.vocab_size * s.arch.hidden_size
    attention = attention_flops(s.arch, p, 0)
    cost = Cost.priced(
        s.device,
        round((2 * (counts.linear - lm_head) * p + 2 * lm_head + attention) / s.gpus),
        part.weights_read_bytes(s, counts, p),
        kv_traffic(s, part, p, 0),
        attention_flops=round(attention / s.gpus),
        cache_layout=CACHE_LAYOUT,
    )
    return _floor(s, p, cost)


def max_batch(s: Scenario, context: int | None = None) -> int:
    """The largest batch whose weights and KV at this context fit one GPU's memory (0: the weights alone do not)."""
    context = s.context if context is None else context
    part = shard(s)
    free = s.memory_bytes - part.weight_bytes
    return max(0, free // part.kv_bytes_at(s, context))
