"""The batching lab's settings, the checks that need no model and the sweep's modelled cost, torch-free: `python -m
explorer batch` refuses a bad number before torch is imported, the web tier shows the estimate and the device owner
refuses past a cap before anything loads, and the lab (`explorer.labs.batch.run_batch_sweep`) runs the same checks
first."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import BadInput
from explorer.core.limits import check_budget, check_range
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, check_fits_context
from explorer.core.roofline import kv_cache_bytes, pass_cost
from explorer.core.trace import DeviceProfile, ModelInfo
from explorer.core.units import human_bytes

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
MAX_BATCH = 256
MAX_SWEEP_SIZES = 16  # batch sizes in one sweep: each is a whole batched run
MAX_PROMPT_TOKENS = 2048
DEFAULT_KV_CAP_BYTES = 2 * 10**9  # the batch's KV cache may not grow past this
DEFAULT_BUDGET_S = 600.0
ESTIMATE_SLACK = 3.0  # measured passes on a CPU run ~1.5-3x the roofline floor: the estimate errs long


@dataclass(frozen=True)
class BatchConfig:
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    prompt_tokens: int = 32
    new_tokens: int = 16
    distinct_prompts: bool = True  # different prompts of equal length, else one prompt repeated
    kv_cap_bytes: int = DEFAULT_KV_CAP_BYTES
    budget_s: float = DEFAULT_BUDGET_S


def check_settings(config: BatchConfig, max_context: int | None) -> None:
    """Every number finite and bounded, before the sweep's cost is even modelled (its estimate walks every token);
    `max_context` from the model's config.json before it loads (None: unknown yet), else from the loaded model."""
    sizes = config.batch_sizes
    if not 1 <= len(sizes) <= MAX_SWEEP_SIZES:
        raise BadInput(f"Give between 1 and {MAX_SWEEP_SIZES} batch sizes, not {len(sizes)}.")
    bad = next((b for b in sizes if not 1 <= b <= MAX_BATCH), None)
    if bad is not None:
        raise BadInput(f"Batch sizes must be between 1 and {MAX_BATCH}, not {bad}.")
    if config.prompt_tokens < 1 or config.new_tokens < 2:
        raise BadInput("The batching lab needs at least 1 prompt token and 2 new tokens (for a decode step).")
    check_range("The batching lab's prompt tokens", config.prompt_tokens, 1, MAX_PROMPT_TOKENS)
    check_range("The batching lab's new tokens", config.new_tokens, 2, MAX_NEW_TOKENS_LIMIT)
    check_fits_context(config.new_tokens, max_context, prompt_tokens=config.prompt_tokens)
    check_budget(config.budget_s)


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise BadInput(f"--batch-sizes takes comma-separated integers, not '{text}'.") from exc


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep will cost, known before it runs (modelled), to show before starting and to refuse past a cap."""

    solo_runs: int  # one solo reference per distinct prompt
    largest_kv_cache_bytes: int  # the KV cache of the largest batch at its longest
    estimate_s: float  # the whole sweep, solo references included


def one_run_s(info: ModelInfo, device: DeviceProfile, config: BatchConfig, batch: int) -> float:
    """The roofline floor of one batched run: its prefill and its decode steps."""
    total = pass_cost(info, device, config.prompt_tokens, 0, batch=batch).roofline_time_s
    for k in range(config.new_tokens - 1):
        total += pass_cost(info, device, 1, config.prompt_tokens + k, batch=batch).roofline_time_s
    return total


def plan_sweep(info: ModelInfo, device: DeviceProfile, config: BatchConfig) -> SweepPlan:
    solo_runs = max(config.batch_sizes) if config.distinct_prompts else 1
    floor_s = solo_runs * one_run_s(info, device, config, 1)
    floor_s += sum(one_run_s(info, device, config, batch) for batch in config.batch_sizes)
    longest = config.prompt_tokens + config.new_tokens
    return SweepPlan(solo_runs, kv_cache_bytes(info, longest, max(config.batch_sizes)), ESTIMATE_SLACK * floor_s)


def validate(info: ModelInfo, device: DeviceProfile, config: BatchConfig) -> SweepPlan:
    """Refuse what cannot or should not run, before anything runs; returns the plan with its estimate."""
    check_settings(config, info.max_context)  # what `python -m explorer batch` checked before loading, and the context
    plan = plan_sweep(info, device, config)
    if plan.largest_kv_cache_bytes > config.kv_cap_bytes:
        raise BadInput(
            f"Batch {max(config.batch_sizes)} needs {human_bytes(plan.largest_kv_cache_bytes)} of KV cache, over the "
            f"{human_bytes(config.kv_cap_bytes)} cap: choose smaller batches or fewer tokens."
        )
    if plan.estimate_s > config.budget_s:
        raise BadInput(
            f"This sweep would take about {plan.estimate_s:.0f} s (modelled), over the {config.budget_s:.0f} s "
            "budget: choose fewer or smaller batches, or fewer tokens."
        )
    return plan
