"""The batching lab's result, torch-free: each batch size's passes and token check (`BatchRun`) and the sweep
(`BatchResult`), with its JSON both ways, so a bundled result is read back with no model and no torch; the sweep itself
runs in `explorer.labs.batch`.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from explorer.core.roofline import Cost
from explorer.core.trace import DEVICE_SAMPLES, DeviceProfile, JsonRecord, PassRecord, pass_from_dict
from explorer.labs.batch_settings import BatchConfig


@dataclass(frozen=True)
class BatchRun:
    """One batch size: its passes (prefill then decode steps, each a PassRecord of batch B) and the check."""

    batch_size: int
    passes: tuple[PassRecord, ...]
    token_ids: tuple[tuple[int, ...], ...]  # per sequence, the generated tokens
    matches_solo: tuple[bool, ...]  # per sequence: the same tokens as that prompt run alone
    first_mismatch: tuple[int | None, ...]  # per sequence: the first position where it differs from solo
    mismatch_notes: tuple[str, ...] = ()  # per sequence that differs: which token, and why

    @property
    def prefill_s(self) -> float:
        return self.passes[0].wall_s

    @property
    def decode_step_s(self) -> tuple[float, ...]:
        return tuple(p.wall_s for p in self.passes[1:])

    @property
    def median_step_s(self) -> float:
        return statistics.median(self.decode_step_s)

    @property
    def tokens_per_s(self) -> float:
        """Aggregate decode throughput: every step gives each of the B sequences one token."""
        return self.batch_size * len(self.decode_step_s) / sum(self.decode_step_s)

    @property
    def itl_s(self) -> tuple[float, ...]:
        """What each request sees between its tokens: the gaps between the batch's token times."""
        return tuple(b.token_s - a.token_s for a, b in zip(self.passes, self.passes[1:]))

    @property
    def itl_p50_s(self) -> float:
        return statistics.median(self.itl_s)

    @property
    def kv_cache_bytes(self) -> int:
        return self.passes[-1].kv_cache_bytes

    @property
    def median_step_cost(self) -> Cost:
        return self.passes[len(self.passes) // 2].cost

    def summary(self) -> dict[str, object]:
        """This batch size's row of the JSON results: the figures above, by name."""
        cost = self.median_step_cost
        return {
            "batch_size": self.batch_size,
            "prefill_s": self.prefill_s,
            "decode_step_s": list(self.decode_step_s),
            "median_step_s": self.median_step_s,
            "itl_p50_s": self.itl_p50_s,
            "tokens_per_s": self.tokens_per_s,
            "kv_cache_bytes": self.kv_cache_bytes,
            "modelled_step": {
                "t_weight_read_s": cost.t_weight_read_s,
                "t_kv_s": cost.t_kv_s,
                "t_compute_s": cost.t_compute_s,
                "arithmetic_intensity": cost.arithmetic_intensity,
                "bound": cost.bound,
            },
            "token_ids": [list(t) for t in self.token_ids],
            "matches_solo": list(self.matches_solo),
            "first_mismatch": list(self.first_mismatch),
            "mismatch_notes": list(self.mismatch_notes),
            "passes": [asdict(p) for p in self.passes],  # measured: what every figure above is computed from
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> BatchRun:
        """Back from `summary()`: the passes and the check; the figures are recomputed from the passes."""
        return cls(
            batch_size=int(row["batch_size"]),
            passes=tuple(pass_from_dict(p) for p in row["passes"]),
            token_ids=tuple(tuple(t) for t in row["token_ids"]),
            matches_solo=tuple(row["matches_solo"]),
            first_mismatch=tuple(row["first_mismatch"]),
            mismatch_notes=tuple(row["mismatch_notes"]),
        )


@dataclass(frozen=True)
class BatchResult(JsonRecord):
    config: BatchConfig
    device: DeviceProfile
    prompts: tuple[tuple[int, ...], ...]  # the distinct prompts (token ids)
    solo_token_ids: tuple[tuple[int, ...], ...]  # each distinct prompt's tokens run alone
    runs: tuple[BatchRun, ...]
    ridge_batch: int | None  # the smallest batch whose decode step is compute-bound here (modelled), None if none up to
    # the one search range (`explorer.core.roofline.RIDGE_BATCH_LIMIT`; results recorded before it searched to 256)

    @property
    def every_request_matches_solo(self) -> bool:
        return all(all(run.matches_solo) for run in self.runs)

    def step_sentence(self) -> str:
        """How much slower a decode step of the largest batch is than one of the smallest, modelled and measured,
        and the largest measured jump between two neighbouring batch sizes: the claim computed from the numbers."""
        runs = sorted(self.runs, key=lambda run: run.batch_size)
        small, large = runs[0], runs[-1]
        if small is large:
            return f"Only batch {small.batch_size} was run: nothing to compare its step with."
        modelled = large.median_step_cost.roofline_time_s / small.median_step_cost.roofline_time_s
        measured = large.median_step_s / small.median_step_s
        tokens = large.batch_size / small.batch_size
        sentence = (
            f"By the roofline model a step of B = {large.batch_size} takes {modelled:.1f}× a step of "
            f"B = {small.batch_size} (the weights are read once for all of them) and makes {tokens:g}× the tokens; "
            f"measured here it took {measured:.1f}× ({small.median_step_s * 1e3:,.0f} → "
            f"{large.median_step_s * 1e3:,.0f} ms)"
        )
        a, b = max(zip(runs, runs[1:]), key=lambda pair: pair[1].median_step_s - pair[0].median_step_s)
        if len(runs) > 2 and b.median_step_s > a.median_step_s:
            sentence += (
                f", the largest step up from B = {a.batch_size} to {b.batch_size} ({a.median_step_s * 1e3:,.0f} → "
                f"{b.median_step_s * 1e3:,.0f} ms)"
            )
        return sentence + "."

    def to_dict(self) -> dict[str, Any]:
        return {  # the settings, the two answers, then what they rest on
            "config": asdict(self.config),
            "ridge_batch": self.ridge_batch,
            "every_request_matches_solo": self.every_request_matches_solo,
            "device": asdict(self.device),
            "prompts": [list(p) for p in self.prompts],
            "solo_token_ids": [list(t) for t in self.solo_token_ids],
            "results": [run.summary() for run in self.runs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchResult:
        config = dict(data["config"])
        device = {k: tuple(v) if k in DEVICE_SAMPLES and v is not None else v for k, v in data["device"].items()}
        return cls(
            config=BatchConfig(**{**config, "batch_sizes": tuple(config["batch_sizes"])}),
            device=DeviceProfile(**device),
            prompts=tuple(tuple(p) for p in data["prompts"]),
            solo_token_ids=tuple(tuple(t) for t in data["solo_token_ids"]),
            runs=tuple(BatchRun.from_dict(row) for row in data["results"]),
            ridge_batch=data["ridge_batch"],
        )

    @classmethod
    def from_json(cls, text: str) -> BatchResult:
        return cls.from_dict(json.loads(text))
