"""The what-if roofline of a model on N GPUs: the prefill's and a decode step's floors, the tokens/s ceilings, the
batch where decode turns compute-bound, the largest batch that fits, and the tensor-parallel split. All modelled from
config.json and the spec tables; `explain.formula_lines` prints every formula with its numbers.

Each step is costed as the live run's passes are (`explorer.core.roofline`: one `Cost` record, one convention per
quantity): every weight is read once per step whatever the batch (an untied input table only gathered row by row;
of a mixture of experts, the experts its tokens are expected to pick), a sliding layer holds window - 1 positions,
attention costs its useful (causal) pairs, and the matmuls 2 FLOPs per weight per token. The KV cache is a serving
engine's read-once cache (vLLM's paged blocks: each step reads every request's cache once and writes its new
position); the explorer's own engine grows a DynamicCache by copying, which the live pages model as such.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from explorer.core.gpu_specs import MEMORY_UNIT
from explorer.core.roofline import kv_reaches_weights_context, ridge_batch
from explorer.scale.config import ShippedConfig, shipped, shipped_key
from explorer.scale.figure_sources import SOURCES, UNITS

# The scenario and its floors live in `explorer.scale.floors`; re-exported here, where the pages, the CLI and the
# tests have always imported them.
from explorer.scale.floors import ALL_REDUCES_PER_LAYER as ALL_REDUCES_PER_LAYER
from explorer.scale.floors import MAX_BATCH as MAX_BATCH
from explorer.scale.floors import MAX_GPUS as MAX_GPUS
from explorer.scale.floors import PassFloor as PassFloor
from explorer.scale.floors import Scenario as Scenario
from explorer.scale.floors import Shard as Shard
from explorer.scale.floors import check_scenario as check_scenario
from explorer.scale.floors import decode_step as decode_step
from explorer.scale.floors import find_gpu as find_gpu
from explorer.scale.floors import max_batch as max_batch
from explorer.scale.floors import prefill_floor as prefill_floor
from explorer.scale.floors import shard as shard
from explorer.scale.params import (
    ParamCounts,
    count_params,
    expected_experts_read,
    kv_bytes_at,
    kv_bytes_per_token,
    weight_bytes,
)

SCHEMA = "explorer.whatif/2"  # 2: each floor's modelled cost as the live run's `Cost` record


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
    kv_crossover_context: int | None  # where a step's KV traffic reaches its weight read; None: never (every layer
    # sliding)
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
        """Every parameter once, as stored: the experts in their format (as shipped or asked), the rest as the
        weights."""
        s = self.scenario
        experts = s.experts_storage if s.arch.is_moe and s.experts_storage != s.weights_storage else None
        return weight_bytes(s.arch, s.weights_storage, experts)

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
    def input_table_bytes(self) -> int:
        """One GPU's share of an untied input embedding table (0 when tied: the LM head reads it whole anyway)."""
        return self.shard.table_bytes

    @property
    def decode_tokens_per_s_ceiling_table_whole(self) -> float | None:
        """The same ceiling if the untied input table were read whole each step, as the rule of thumb 'weights /
        bandwidth' reads it (a lookup reads only the tokens' rows); None when the table is tied."""
        if not self.input_table_bytes:
            return None
        return self.scenario.batch / decode_step(self.scenario, table_whole=True).floor_s

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
                "experts_dtype": s.experts_storage if s.arch.is_moe else None,
                "kv_dtype": s.kv_storage,
                "gpus": s.gpus,
                "batch": s.batch,
                "context": s.context,
                "prompt_tokens": s.prompt_tokens,
            },
            "params_by_part": self.counts.by_part,
            "prefill": self.prefill.to_dict(),
            "decode_step": self.decode.to_dict(),
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
    """Every figure for one scenario; the questions asked of its steps are `explorer.core.roofline`'s, answered on
    them: the ridge batch, and the context where a step's KV traffic (read and written) reaches its weight read."""
    check_scenario(s)
    counts = count_params(s.arch)
    decode = decode_step(s)
    return WhatIf(
        scenario=s,
        counts=counts,
        shard=shard(s, counts),
        prefill=prefill_floor(s),
        decode=decode,
        ridge_batch=ridge_batch(lambda batch: decode_step(s, batch).cost),
        max_batch=max_batch(s),
        kv_crossover_context=kv_reaches_weights_context(
            decode.cost.weight_bytes_read,  # the same at any context
            lambda context: decode_step(s, s.batch, context).cost.kv_bytes_moved,
        ),
        sources=dict(SOURCES),
    )
