"""The batching lab's settings and the checks that need no model, torch-free: `python -m explorer batch` refuses a
bad number before torch is imported, and the lab (`explorer.labs.batch.validate`) runs the same checks first."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import BadInput
from explorer.core.limits import check_budget, check_range
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, check_fits_context

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
MAX_BATCH = 256
MAX_SWEEP_SIZES = 16  # batch sizes in one sweep: each is a whole batched run
MAX_PROMPT_TOKENS = 2048
DEFAULT_KV_CAP_BYTES = 2 * 10**9  # the batch's KV cache may not grow past this
DEFAULT_BUDGET_S = 600.0


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
