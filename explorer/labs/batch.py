"""Serving lab: why batching. B prompts of equal token length are prefilled as one batch and decoded together in one
KV cache of batch B (`explorer.core.batched.run_batched`, the engine's own timed step); each batch size is checked
against the same prompts run alone, up to float rounding of the batched matmuls (checked, not assumed: a token that
differs is named with the reason).

What holds the device: one pass at a time. The sweep's figures are sums and gaps of individually timed passes, so
between any two passes it lets anyone waiting go first (`make_way`), the batch's clock paused meanwhile.
"""

from __future__ import annotations

from typing import Protocol

from explorer.core.batched import run_batched
from explorer.core.engine import LiveRequest, OnPass
from explorer.core.lab_progress import QUIET, LabProgress
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import pass_cost, ridge_batch
from explorer.core.trace import DeviceProfile

# The result lives in the torch-free batch_result (a bundled result is read back with no torch), the settings, their
# checks and the sweep's modelled plan in the torch-free batch_settings (the CLI checks them before torch, the web
# tier models the sweep's cost without a model); both re-exported here, where the CLI and tests have always imported
# them.
from explorer.labs.batch_result import BatchResult as BatchResult
from explorer.labs.batch_result import BatchRun as BatchRun
from explorer.labs.batch_settings import DEFAULT_BATCH_SIZES as DEFAULT_BATCH_SIZES
from explorer.labs.batch_settings import DEFAULT_BUDGET_S as DEFAULT_BUDGET_S
from explorer.labs.batch_settings import ESTIMATE_SLACK as ESTIMATE_SLACK
from explorer.labs.batch_settings import BatchConfig as BatchConfig
from explorer.labs.batch_settings import SweepPlan as SweepPlan
from explorer.labs.batch_settings import check_settings as check_settings
from explorer.labs.batch_settings import one_run_s as one_run_s
from explorer.labs.batch_settings import parse_batch_sizes as parse_batch_sizes
from explorer.labs.batch_settings import plan_sweep as plan_sweep
from explorer.labs.batch_settings import validate as validate

# Public-domain text (the opening of "A Tale of Two Cities"): different windows of it make different prompts of the
# same token length.
PROMPT_SOURCE = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, "
    "it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of "
    "Darkness, it was the spring of hope, it was the winter of despair, we had everything before us, we had nothing "
    "before us, we were all going direct to Heaven, we were all going direct the other way. There were a king with "
    "a large jaw and a queen with a plain face, on the throne of England; there were a king with a large jaw and a "
    "queen with a fair face, on the throne of France. In both countries it was clearer than crystal to the lords of "
    "the State preserves of loaves and fishes, that things in general were settled for ever."
)


def prompt_set(lm: LoadedModel, prompt_tokens: int, count: int, distinct: bool) -> list[list[int]]:
    """`count` prompts of exactly `prompt_tokens` tokens: windows of a public-domain passage, or one repeated."""
    ids = lm.tokenizer(PROMPT_SOURCE, add_special_tokens=False)["input_ids"]
    while len(ids) < prompt_tokens + count:
        ids = ids + ids
    starts = range(count) if distinct else [0] * count
    return [ids[s : s + prompt_tokens] for s in starts]


# --- the sweep -------------------------------------------------------------------------------------------------------
def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


class Decoder(Protocol):
    """All a mismatch note needs of a tokenizer."""

    def decode(self, token_ids: list[int]) -> str: ...


def mismatch_note(batch: int, row: int, got: tuple[int, ...], want: tuple[int, ...], tokenizer: Decoder) -> str:
    """Which token of a batched request differs from its solo run, and the honest reason."""
    at = first_difference(got, want)
    if at is None or at >= min(len(got), len(want)):
        return f"batch {batch}, request {row}: the same tokens, but {min(len(got), len(want))} of them on one side."
    return (
        f"batch {batch}, request {row}: token {at} is {got[at]} {tokenizer.decode([got[at]])!r} in the batch but "
        f"{want[at]} {tokenizer.decode([want[at]])!r} alone. Same dtype, other kernel shapes: the batched matmuls sum "
        "in another order and round differently, which can flip a near tie; the tokens after it continue from "
        "different text."
    )


def batch_run(lm: LoadedModel, live: LiveRequest, expected: list[tuple[int, ...]], batch: int) -> BatchRun:
    """One batch size's passes, each row's tokens checked against its solo tokens."""
    per_row = tuple(tuple(p.batch_token_ids[r] for p in live.passes) for r in range(batch))
    return BatchRun(
        batch_size=batch,
        passes=tuple(live.passes),
        token_ids=per_row,
        matches_solo=tuple(got == want for got, want in zip(per_row, expected)),
        first_mismatch=tuple(first_difference(got, want) for got, want in zip(per_row, expected)),
        mismatch_notes=tuple(
            mismatch_note(batch, r, got, want, lm.tokenizer)
            for r, (got, want) in enumerate(zip(per_row, expected))
            if got != want
        ),
    )


def run_batch_sweep(
    lm: LoadedModel,
    device: DeviceProfile,
    config: BatchConfig,
    progress: LabProgress = QUIET,
) -> BatchResult:
    """Every batch size, after each distinct prompt alone; the caller has warmed up (`core.measure.prepare_device`)."""
    plan = validate(lm.info, device, config)
    about = f"the sweep is estimated at ~{plan.estimate_s:.1f} s (modelled)"
    largest = max(config.batch_sizes)
    count = largest if config.distinct_prompts else 1
    prompts = prompt_set(lm, config.prompt_tokens, count, config.distinct_prompts)
    make_way = OnPass(make_way=progress.make_way)
    solo = []
    for i, prompt in enumerate(prompts):
        progress(0.3 * i / len(prompts), f"solo reference {i + 1}/{len(prompts)}; {about}")
        live = run_batched(lm, device, [prompt], config.new_tokens, make_way)
        solo.append(tuple(p.token_id for p in live.passes))
    runs = []
    for n, batch in enumerate(config.batch_sizes):
        progress(0.3 + 0.7 * n / len(config.batch_sizes), f"batch {batch}; {about}")
        rows = [prompts[i % count] for i in range(batch)]
        live = run_batched(lm, device, rows, config.new_tokens, make_way)
        runs.append(batch_run(lm, live, [solo[r % count] for r in range(batch)], batch))
    progress(1.0, "Done.")
    decode_context = config.prompt_tokens + config.new_tokens // 2  # the middle decode step's cache
    return BatchResult(
        config=config,
        device=device,
        prompts=tuple(tuple(p) for p in prompts),
        solo_token_ids=tuple(solo),
        runs=tuple(runs),
        ridge_batch=ridge_batch(lambda b: pass_cost(lm.info, device, 1, decode_context, batch=b)),
    )
