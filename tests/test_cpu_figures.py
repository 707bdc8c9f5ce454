"""CPU figures: fixed benchmark sizes chosen from the CPU's flags (never from a timed trial), and a set that looks taken
under load taken once more after a pause, the better set kept and the result saying which happened."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from explorer.core import device
from explorer.core.trace import DeviceProfile
from tests.conftest import MEASURE_CPU  # the real cpu_profile: the session's tests see one fixed set instead

SOUND = DeviceProfile(
    "cpu",
    "cpu",
    "float32",
    1e11,
    "measured",
    2e10,
    "measured",
    flops_samples=(1e11, 0.95e11),
    benchmark_core_share=0.96,
)
BUSY = replace(SOUND, peak_flops=2e10, flops_samples=(2e10, 1.9e10), benchmark_core_share=0.14)


@pytest.mark.parametrize(
    ("dtype", "flags", "n"),
    [
        ("float32", frozenset(), 2048),
        ("bfloat16", frozenset({"avx2", "fma"}), 512),  # no bf16 path: ~1 GFLOP/s, 17 s to 2 min a 2048 matmul
        ("bfloat16", frozenset({"avx2", "avx512_bf16"}), 2048),
        ("bfloat16", frozenset({"amx_bf16"}), 2048),
        ("float16", frozenset({"avx512_bf16"}), 512),
        ("float16", frozenset({"avx512_fp16"}), 2048),
    ],
)
def test_the_matmul_size_is_fixed_per_dtype_by_the_cpus_flags(dtype: str, flags: frozenset[str], n: int) -> None:
    assert device.cpu_matmul_n(dtype, flags) == n


def test_a_slow_busy_machine_never_shrinks_the_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old probe: one cold 256² trial at 1-2 GFLOP/s on a busy machine shrank the matmul, and the peak with it."""
    sizes: list[int] = []

    def slow_matmul(where: str, dtype: str, n: int, repeats: int = device.REPEATS) -> list[float]:
        sizes.append(n)
        return [1e9] * repeats  # 1 GFLOP/s: what the busy machine gave

    monkeypatch.setattr(device, "measure_matmul_flops", slow_matmul)
    monkeypatch.setattr(device, "measure_copy_bandwidth", lambda where, size: [1e9] * device.REPEATS)
    monkeypatch.setattr(device, "measure_read_bandwidth", lambda where, size: [1e9] * device.REPEATS)
    monkeypatch.setattr(device, "core_share", lambda cpu_s, wall_s: 0.2)
    monkeypatch.setattr(device.time, "sleep", lambda seconds: None)
    profile = MEASURE_CPU("float32")
    assert sizes == [device.CPU_MATMUL_N, device.CPU_MATMUL_N]  # no probe: the same fixed size, taken twice
    assert profile.matmul_n == device.CPU_MATMUL_N and len(profile.flops_samples) == device.REPEATS


def sets(monkeypatch: pytest.MonkeyPatch, *profiles: DeviceProfile) -> list[float]:
    """cpu_profile's microbenchmark sets are `profiles`, in turn; returns the pauses it took between them."""
    taken = iter(profiles)
    pauses: list[float] = []
    monkeypatch.setattr(device, "take_cpu_figures", lambda dtype, progress=None: next(taken))
    monkeypatch.setattr(device.time, "sleep", pauses.append)
    return pauses


def test_sound_figures_are_taken_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses = sets(monkeypatch, SOUND)
    profile = MEASURE_CPU("float32")
    assert profile == SOUND and not profile.figures_retaken and not profile.figures_taken_under_load
    assert pauses == []


def test_figures_taken_under_load_are_taken_again_and_the_sound_set_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses = sets(monkeypatch, BUSY, SOUND)
    profile = MEASURE_CPU("float32")
    assert pauses == [device.RETAKE_PAUSE_S]
    assert profile.peak_flops == SOUND.peak_flops and profile.figures_retaken and not profile.figures_taken_under_load
    assert "taken twice" in profile.figures_note and "the better set looks sound" in profile.figures_note


def test_figures_under_load_twice_keep_the_less_busy_set_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    busier = replace(BUSY, peak_flops=3e10, benchmark_core_share=0.1)  # faster by chance, but with fewer cores
    sets(monkeypatch, busier, BUSY)
    profile = MEASURE_CPU("float32")
    assert profile.peak_flops == BUSY.peak_flops and profile.figures_retaken and profile.figures_taken_under_load
    assert "the better set still does: the benchmarks' threads had 14% of their cores" in profile.figures_note


def test_the_core_share_is_cpu_time_over_wall_time_and_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(device, "usable_cores", lambda: 2)  # torch has more threads than the process may use
    assert device.core_share(cpu_s=2.0, wall_s=1.0) == 1.0
    assert device.core_share(cpu_s=0.5, wall_s=1.0) == 0.25
    assert device.core_share(cpu_s=9.0, wall_s=1.0) == 1.0  # other threads of the process: never above 1
