"""Device figures that hold: a run that beats them re-measures or raises them; KV terms follow real cache traffic."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from explorer.core.device import FiguresStore
from explorer.core.engine import Request, decode_one_token, new_cache, prefill
from explorer.core.figure_correction import higher_figures, keep_figures_honest, raised_to_achieved, recost
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
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
    return replace(
        device,
        peak_flops=device.peak_flops / 1e4,
        bandwidth_bytes_per_s=device.bandwidth_bytes_per_s / 1e4,
        read_bandwidth_bytes_per_s=device.effective_read_bandwidth_bytes_per_s / 1e4,
    )


def test_a_run_that_beats_the_figures_remeasures_and_never_exceeds_the_device(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = recost(measure(tiny_lm, Request("abc", max_new_tokens=6)), slow_device(cpu_figures))
    assert any(p.beats_model for p in trace.passes)  # the busy figures predict more time than the passes took
    calls: list[bool] = []

    def still_busy(kind: str, dtype: str, _progress: object) -> DeviceProfile:
        calls.append(True)
        return slow_device(cpu_figures)  # the re-measurement is no better: the figures must be raised to the run

    figures = FiguresStore(still_busy)
    honest = keep_figures_honest(trace, figures)
    assert calls == [True]
    assert figures.kept("cpu", "float32").profile == replace(honest.device, busy_note="")  # kept for later runs
    for passes in honest.repeats:
        for p in passes:
            assert p.cost.roofline_time_s <= PLAUSIBLE_SLACK * p.wall_s * (1 + 1e-9)
    assert (
        "may have been taken while the device was busy" in honest.device.busy_note
        and "raised" in honest.device.busy_note
    )
    assert "achieved" in (honest.device.peak_flops_source, honest.device.bandwidth_source)


def test_a_better_remeasurement_is_used_and_figures_that_held_are_left_alone(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = measure(tiny_lm, Request("abc", max_new_tokens=4))
    assert keep_figures_honest(trace) is trace  # nothing beat the model: nothing re-measured
    busy = recost(trace, slow_device(cpu_figures))
    honest = keep_figures_honest(busy, FiguresStore(lambda kind, dtype, _progress: cpu_figures))
    assert honest.device.peak_flops == cpu_figures.peak_flops and honest.device.peak_flops_source == "measured"
    assert "measured again" in honest.device.busy_note and "raised" not in honest.device.busy_note


HAND = DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured", read_bandwidth_bytes_per_s=1e11)


def test_a_pass_that_beats_the_memory_floor_raises_the_read_figure_not_the_copy(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("abc", max_new_tokens=2))
    decode = trace.decodes[0]
    # 0.9 GB read and 0.1 GB written: 10 ms at 100 GB/s read and copy; the pass took 5 ms.
    cost = replace(decode.cost, flops=1, weight_bytes_read=800_000_000, kv_bytes_read=100_000_000)
    cost = replace(cost, kv_bytes_written=100_000_000, t_weight_read_s=8e-3, t_kv_s=2e-3, t_compute_s=1e-12)
    beaten = replace(decode, cost=cost, wall_s=5e-3)
    raised = raised_to_achieved(HAND, [beaten])
    # The writes keep 1 ms at the copy figure; the 0.9 GB of reads get the other 4 ms: 225 GB/s.
    assert raised.read_bandwidth_bytes_per_s == pytest.approx(225e9) and raised.read_bandwidth_source == "achieved"
    assert (raised.bandwidth_bytes_per_s, raised.bandwidth_source) == (1e11, "measured")
    assert raised.peak_flops == 1e12
    # The writes alone (1 ms) outlasting a 0.5 ms pass: the copy figure was too low too; both rise by 10 / 0.5.
    writes = replace(beaten, wall_s=0.5e-3)
    both = raised_to_achieved(HAND, [writes])
    assert both.read_bandwidth_bytes_per_s == pytest.approx(2e12) and both.bandwidth_bytes_per_s == pytest.approx(2e12)


def test_remeasured_figures_keep_the_higher_read_and_copy_figures_apart() -> None:
    old = replace(HAND, bandwidth_bytes_per_s=9e10, read_bandwidth_bytes_per_s=1.2e11, read_bandwidth_samples=(1.2e11,))
    new = replace(HAND, bandwidth_bytes_per_s=1e11, read_bandwidth_bytes_per_s=1.1e11, read_bandwidth_samples=(1.1e11,))
    kept = higher_figures(old, new)
    assert kept.bandwidth_bytes_per_s == 1e11  # the new copy was better
    assert kept.read_bandwidth_bytes_per_s == 1.2e11 and kept.read_bandwidth_samples == (1.2e11,)  # the old read was
    from_before = replace(old, read_bandwidth_bytes_per_s=None, read_bandwidth_source=None)  # a trace from before
    assert higher_figures(from_before, new).read_bandwidth_bytes_per_s == 1.1e11


@pytest.mark.parametrize(
    ("old_flagged", "new_flagged", "kept_flagged"), [(True, False, False), (False, True, False), (True, True, True)]
)
def test_a_remeasure_keeps_the_figures_sound_if_either_set_was(
    tiny_lm: LoadedModel,
    cpu_figures: DeviceProfile,
    old_flagged: bool,
    new_flagged: bool,
    kept_flagged: bool,
) -> None:
    """Each figure kept is the higher of the two sets, so it is at least as good as the sound set's."""
    busy = replace(slow_device(cpu_figures), figures_taken_under_load=old_flagged, figures_note="old")
    trace = recost(measure(tiny_lm, Request("abc", max_new_tokens=3)), busy)
    remeasured = replace(cpu_figures, figures_taken_under_load=new_flagged, figures_note="new")
    honest = keep_figures_honest(trace, FiguresStore(lambda kind, dtype, _progress: remeasured))
    assert honest.device.figures_taken_under_load is kept_flagged
    assert honest.device.figures_note == ("new" if old_flagged and not new_flagged else "old")
