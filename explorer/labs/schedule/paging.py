"""Paging's KV memory against contiguous reservations, modelled from a run's measured block tables.

PagedAttention's saving (Kwon et al. 2023, https://arxiv.org/abs/2309.06180) is against a server that reserves each
request's maximum length contiguously, because it cannot know how long the output will be: that is the primary
comparison. A server that reserves each request's prompt + max new tokens at admission (both known then) could
reserve exactly that; against it, paging's whole blocks (each request's last one partly filled) can cost memory
rather than save it, and the sentence then says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.core.units import human_bytes

if TYPE_CHECKING:
    from explorer.labs.schedule.records import ScheduleRun


@dataclass(frozen=True)
class MemoryStep:
    """The KV bytes each layout holds once a step is scheduled, for the requests admitted then."""

    step: int
    paged_bytes: int  # the distinct blocks held (a shared prefix block counts once) x block bytes
    max_length_bytes: int | None  # each admitted request reserving the model's maximum length (None: unknown)
    exact_bytes: int  # each admitted request reserving exactly its prompt + max new tokens


def memory_steps(run: ScheduleRun) -> tuple[MemoryStep, ...]:
    """Per step: the paged blocks held, and what each contiguous reservation would hold for the same requests, each by
    the per-layer rule (a sliding layer reserves at most its window, as its cache keeps no more)."""
    lengths = {r.id: r.prompt_len + r.max_new_tokens for r in run.requests}
    return tuple(
        MemoryStep(
            s.index,
            s.blocks_held * run.block_bytes + s.other_groups_bytes,
            None if run.max_context is None else len(s.holdings) * run.kv_bytes_for(run.max_context),
            sum(run.kv_bytes_for(lengths.get(h.request, 0)) for h in s.holdings),
        )
        for s in run.steps
    )


@dataclass(frozen=True)
class PagingPeaks:
    """Each layout's peak over the run (each at its own step)."""

    paged_bytes: int
    max_length_bytes: int | None
    exact_bytes: int
    max_context: int | None  # tokens a max-length reservation holds per request


def paging_peaks(run: ScheduleRun) -> PagingPeaks:
    steps = memory_steps(run) or (MemoryStep(0, 0, 0, 0),)
    max_length = None if run.max_context is None else max(s.max_length_bytes or 0 for s in steps)
    return PagingPeaks(
        max(s.paged_bytes for s in steps), max_length, max(s.exact_bytes for s in steps), run.max_context
    )


def against(paged_bytes: int, baseline_bytes: int, baseline: str) -> str:
    """Paging against one baseline, in words that never call a loss a saving."""
    difference = baseline_bytes - paged_bytes
    if difference > 0:
        return f"paging saves {human_bytes(difference)} ({difference / baseline_bytes:.0%}) against {baseline}"
    if difference < 0:
        return f"paging costs {human_bytes(-difference)} more than {baseline}"
    return f"paging holds the same as {baseline}"


def paging_sentence(run: ScheduleRun) -> str:
    """Peak KV memory of paging against the max-length reservation (primary) and the exact one (second)."""
    peaks = paging_peaks(run)
    parts = [f"Peak KV memory, paged: {human_bytes(peaks.paged_bytes)}."]
    if peaks.max_length_bytes is not None:
        max_length = (
            f"a contiguous reservation of the model's maximum length ({peaks.max_context:,} tokens per admitted "
            f"request, {human_bytes(peaks.max_length_bytes)} at its peak), what a server that cannot know an output's "
            "length must reserve"
        )
        primary = against(peaks.paged_bytes, peaks.max_length_bytes, max_length)
        parts.append(f"Primary, what PagedAttention's saving is measured against: {primary}.")
    exact = (
        f"reserving exactly each request's prompt + max new tokens ({human_bytes(peaks.exact_bytes)} at its peak: "
        "both are known when a request is admitted; only how many tokens it will really write is not, so this "
        "reserves each request's cap)"
    )
    second = against(peaks.paged_bytes, peaks.exact_bytes, exact)
    if peaks.paged_bytes > peaks.exact_bytes:
        second += f": paging holds whole {run.settings.block_size}-token blocks, each request's last one partly filled"
    parts.append(f"Second: {second}.")
    windows = sorted({w for w in run.layer_windows if w})
    if windows:  # both reservations and the pages follow the per-layer rule: say so, it changes every figure
        sliding = sum(1 for w in run.layer_windows if w)
        parts.append(
            f"Per layer: the {sliding} sliding-window layers (window {', '.join(map(str, windows))}) keep at most "
            "window - 1 positions, so every figure here counts each layer's own positions, not every layer at every "
            "position."
        )
    return " ".join(parts)
