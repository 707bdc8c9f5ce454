"""Stepped passes timed as cleanly as a Run's: each timed stepped pass follows an untimed twin of its shape
(`SteppedRequest.warm_up`), which leaves the tokens and the cache exactly as they were; on the real model, 8 stepped
decode passes with pauses between them come out near a Run's decode on the same prompt (the figures are printed; the
assertion is loose, 2x, as the machine is shared: `benchmarks/stepped_timing.py` gives the clean comparison)."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from explorer.core.engine import Request, check_request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.labs.step_mode import SteppedRequest

PASSES = 8


def test_the_warm_up_twin_leaves_tokens_and_cache_as_they_were(tiny_lm: LoadedModel) -> None:
    request = Request("the same tokens", max_new_tokens=6, use_chat_template=False)
    stepped = SteppedRequest.start(tiny_lm, check_request(tiny_lm, request))
    stepped.step()
    keys_before = [layer.keys.clone() for layer in stepped.live.cache.layers]
    length = stepped.live.cache.get_seq_length()
    stepped.warm_up()  # a decode twin: one position appended, then cut back
    assert stepped.live.cache.get_seq_length() == length
    assert all(torch.equal(a, layer.keys) for a, layer in zip(keys_before, stepped.live.cache.layers))
    while not stepped.done:
        stepped.step()
    assert stepped.to_trace().generated_token_ids == measure(tiny_lm, request).generated_token_ids


@pytest.mark.slow
def test_stepped_decode_passes_are_timed_like_a_runs_on_the_real_model(real_lm: LoadedModel) -> None:
    request = Request("Explain in one sentence why the sky is blue.", max_new_tokens=PASSES + 1)
    run_ms = [p.wall_s * 1e3 for p in measure(real_lm, request).decodes]
    stepped = SteppedRequest.start(real_lm, check_request(real_lm, request))
    stepped.step()  # the prefill
    stepped_ms = []
    for _ in range(PASSES):
        time.sleep(0.5)  # a presenter's pause between clicks: threads go idle
        stepped_ms.append(stepped.step().wall_s * 1e3)
    run_median, step_median = statistics.median(run_ms), statistics.median(stepped_ms)
    print(
        f"\n[stepped timing] run decode median {run_median:.1f} ms, stepped {step_median:.1f} ms, "
        f"ratio {step_median / run_median:.2f}"
    )
    assert step_median <= 2 * run_median, (run_ms, stepped_ms)
