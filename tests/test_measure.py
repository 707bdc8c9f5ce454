"""Device figures that hold: a run that beats them re-measures or raises them; KV terms follow real cache traffic."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from explorer.core import measure as measure_module
from explorer.core.engine import Request, decode_one_token, new_cache, prefill
from explorer.core.loading import LoadedModel
from explorer.core.measure import keep_figures_honest, measure, recost
from explorer.core.roofline import kv_traffic_bytes
from explorer.core.trace import PLAUSIBLE_SLACK, DeviceProfile


def cache_tensor_bytes(cache: object) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def test_kv_traffic_counts_what_the_cache_tensors_hold_before_and_after_a_step(tiny_lm: LoadedModel) -> None:
    model, info = tiny_lm.model, tiny_lm.info
    cache = new_cache(model)
    prefill(model, torch.tensor([[1, 2, 3, 4, 5]]), cache)
    before_bytes = cache_tensor_bytes(cache)
    before_ptrs = [layer.keys.data_ptr() for layer in cache.layers]
    decode_one_token(model, torch.tensor([[6]]), cache)
    after_bytes = cache_tensor_bytes(cache)
    # DynamicCache grows by concatenation: every layer's K and V are new tensors, the whole cache written again.
    assert all(layer.keys.data_ptr() != ptr for layer, ptr in zip(cache.layers, before_ptrs, strict=True))
    new_bytes = info.kv_bytes_per_token  # the K and V of the one new position
    read, written = kv_traffic_bytes(info, tokens_in=1, cache_len_before=5)
    assert written == after_bytes  # the concatenation writes the grown cache
    assert read == (before_bytes + new_bytes) + after_bytes  # it reads old + new; attention reads the grown cache


def slow_device(device: DeviceProfile) -> DeviceProfile:
    """Figures as a busy moment would leave them: far below what the device can do."""
    return replace(device, peak_flops=device.peak_flops / 1e4, bandwidth_bytes_per_s=device.bandwidth_bytes_per_s / 1e4)


def test_a_run_that_beats_the_figures_remeasures_and_never_exceeds_the_device(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = recost(measure(tiny_lm, Request("abc", max_new_tokens=6)), slow_device(cpu_figures))
    assert any(p.beats_model for p in trace.passes)  # the busy figures predict more time than the passes took
    calls: list[bool] = []

    def still_busy(kind: str, dtype: str, fresh: bool = False) -> DeviceProfile:
        calls.append(fresh)
        return slow_device(cpu_figures)  # the re-measurement is no better: the figures must be raised to the run

    monkeypatch.setattr(measure_module, "device_profile", still_busy)
    honest = keep_figures_honest(trace)
    assert calls == [True]
    for passes in honest.repeats:
        for p in passes:
            assert p.cost.roofline_time_s <= PLAUSIBLE_SLACK * p.wall_s * (1 + 1e-9)
    assert "device was busy" in honest.device.busy_note and "raised" in honest.device.busy_note
    assert "achieved" in (honest.device.peak_flops_source, honest.device.bandwidth_source)


def test_a_better_remeasurement_is_used_and_figures_that_held_are_left_alone(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = measure(tiny_lm, Request("abc", max_new_tokens=4))
    assert keep_figures_honest(trace) is trace  # nothing beat the model: nothing re-measured
    busy = recost(trace, slow_device(cpu_figures))
    monkeypatch.setattr(measure_module, "device_profile", lambda kind, dtype, fresh=False: cpu_figures)
    honest = keep_figures_honest(busy)
    assert honest.device.peak_flops == cpu_figures.peak_flops and honest.device.peak_flops_source == "measured"
    assert "measured again" in honest.device.busy_note and "raised" not in honest.device.busy_note
