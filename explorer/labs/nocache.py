"""Serving lab: why a KV cache. The same greedy request twice: the engine's cached loop, and a naive loop that re-runs
the whole sequence so far at every step with no cache, so the cost of recomputing every earlier token's K and V is
measured beside the memory the cache spends to avoid it.

What holds the device: one pass at a time. Both loops' figures are sums of individually timed passes, so between any
two passes the lab lets anyone waiting go first (`make_way`), the cached loop's request clock paused meanwhile.
"""

from __future__ import annotations

import torch

from explorer.core.engine import (
    OnPass,
    Request,
    check_request,
    forward_without_cache,
    generate,
)
from explorer.core.errors import out_of_memory_as_run_failed
from explorer.core.lab_progress import QUIET, LabProgress, MakeWay, Report, nobody_waits
from explorer.core.loaded_model import LoadedModel
from explorer.core.timing import timed
from explorer.core.trace import DeviceProfile

# The result and the model-free arithmetic live in the torch-free nocache_result (a bundled result is read back with
# no torch); re-exported here, where the pages, the CLI and the tests have always imported them.
from explorer.labs.nocache_result import CLEARLY_MORE_FACTOR as CLEARLY_MORE_FACTOR
from explorer.labs.nocache_result import CLEARLY_MORE_MIN_S as CLEARLY_MORE_MIN_S
from explorer.labs.nocache_result import DEFAULT_BUDGET_S as DEFAULT_BUDGET_S
from explorer.labs.nocache_result import DEFAULT_NEW_TOKENS as DEFAULT_NEW_TOKENS
from explorer.labs.nocache_result import EDGE_STEPS as EDGE_STEPS
from explorer.labs.nocache_result import MIN_NEW_TOKENS as MIN_NEW_TOKENS
from explorer.labs.nocache_result import PROJECTED_TOKENS as PROJECTED_TOKENS
from explorer.labs.nocache_result import NoCacheResult as NoCacheResult
from explorer.labs.nocache_result import Projection as Projection
from explorer.labs.nocache_result import Step as Step
from explorer.labs.nocache_result import check_settings as check_settings
from explorer.labs.nocache_result import estimate_s as estimate_s
from explorer.labs.nocache_result import growth_verdict as growth_verdict
from explorer.labs.nocache_result import loop_floors_s as loop_floors_s
from explorer.labs.nocache_result import naive_step_cost
from explorer.labs.nocache_result import validate as validate

PROGRESS_REPORTS = 10  # the naive loop reports about this many times, however long it is


def uncached_loop(
    lm: LoadedModel,
    prompt_ids: list[int],
    new_tokens: int,
    make_way: MakeWay = nobody_waits,
    on_step: Report | None = None,
) -> tuple[Step, ...]:
    """Greedy, no cache: every step runs the model over the whole sequence so far and keeps nothing. Each step is
    timed on its own, so the device may pass to another session between steps."""
    sequence = list(prompt_ids)
    steps = []
    for k in range(new_tokens):
        ids = torch.tensor([sequence], device=lm.torch_device)  # (1, L): the whole sequence, every time
        with out_of_memory_as_run_failed(f"the naive loop at {len(sequence)} tokens"):
            logits, wall_s = timed(lm.torch_device, forward_without_cache, lm.model, ids)
        token_id = int(logits.argmax(-1).item())
        length = len(sequence)
        flops, bytes_moved = naive_step_cost(lm.info, length)
        steps.append(Step(length, length, wall_s, flops, bytes_moved, token_id))
        sequence.append(token_id)
        if on_step and (k + 1) % max(1, new_tokens // PROGRESS_REPORTS) == 0:
            on_step((k + 1) / new_tokens, f"naive loop: step {k + 1} of {new_tokens}")
        make_way()
    return tuple(steps)


def run_nocache(
    lm: LoadedModel,
    device: DeviceProfile,
    request: Request,
    budget_s: float = DEFAULT_BUDGET_S,
    progress: LabProgress = QUIET,
) -> NoCacheResult:
    """The cached loop (the engine, EOS ignored so both make the same number of tokens), then the naive loop. The
    request is checked here, once; the caller has warmed up (`core.measure.prepare_device`)."""
    request = Request(
        request.prompt, request.max_new_tokens, request.use_chat_template, request.sampling, stop_at_eos=False
    )
    checked = check_request(lm, request)
    estimate = validate(lm.info, device, len(checked.prompt_ids), request.max_new_tokens, budget_s)
    about = f"the naive loop is modelled at ~{estimate:.1f} s at this device's figures, of the {budget_s:.0f} s budget"
    progress(0.05, f"cached loop: one prefill, then one-token decodes; {about}")
    # The engine's own loop; the device passes on between passes, the request's clock paused.
    trace = generate(lm, checked, device, OnPass(make_way=progress.make_way), warmed_up=True)
    cached = tuple(
        Step(
            position=p.cache_len_after,
            tokens_processed=p.tokens_in,
            wall_s=p.wall_s,
            flops=p.cost.flops,
            bytes_moved=p.cost.bytes_moved,
            token_id=p.token_id,
        )
        for p in trace.passes
    )
    progress(0.3, f"naive loop: the whole sequence at every step, no cache; {about}")
    naive_part = progress.span(0.3, 1.0)
    uncached = uncached_loop(
        lm,
        list(checked.prompt_ids),
        request.max_new_tokens,
        progress.make_way,
        lambda f, text: naive_part(f, f"{text}; {about}"),
    )
    return NoCacheResult(trace.prompt_len, cached, uncached, trace, estimate)
