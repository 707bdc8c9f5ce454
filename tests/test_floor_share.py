"""Issue 46: each pass as a share of the device's measured figure (decode: bytes read over time against the measured
read bandwidth; prefill: FLOPs over time against the measured matmul peak), recomputed here from the pass's own bytes
and time and the device's figures; the published references with their sources; the run's share on the Latency page;
and, on a GPU with a datasheet row, both peaks named, every ratio against the measured one."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from explorer.charts import cost as cost_charts
from explorer.charts.device import device_frame
from explorer.charts.floor_share import references_frame, share_chart, share_frame
from explorer.charts.step_mode import newest_pass_line
from explorer.core.floor_share import PUBLISHED_SHARES, pass_share, peak_words, peaks_sentence, run_decode_share
from explorer.core.gpu_specs import GPU_SPECS
from explorer.core.loaded_model import LoadedModel
from explorer.core.report import format_device
from explorer.core.trace import DeviceProfile, Trace
from explorer.core.units import human_bandwidth, human_flops_per_s, percent
from tests.cost_support import tiny_run

# Figures the roofline divides by (as an older or hand-set profile might carry) kept apart from what the device
# measured, so a share taken against the wrong one cannot pass.
ROOFLINE_READ, MEASURED_READ = 40e9, 25e9
ROOFLINE_FLOPS, MEASURED_FLOPS = 400e9, 150e9
HAND = DeviceProfile(
    "hand CPU", "cpu", "float32", ROOFLINE_FLOPS, "spec", 30e9, "spec",
    measured_flops=MEASURED_FLOPS, measured_bandwidth_bytes_per_s=22e9,
    read_bandwidth_bytes_per_s=ROOFLINE_READ, read_bandwidth_source="spec",
    measured_read_bandwidth_bytes_per_s=MEASURED_READ,
)  # fmt: skip


@pytest.fixture(scope="module")
def run(tiny_lm: LoadedModel) -> Trace:
    return tiny_run(tiny_lm).recosted(HAND)


def test_every_pass_share_is_its_bytes_or_flops_over_its_time_against_the_measured_figure(run: Trace) -> None:
    frame = share_frame(run).set_index("pass")
    assert list(frame.index) == [p.index for p in run.passes]
    for p in run.passes:
        if p.is_prefill:  # FLOPs / time, of the measured matmul peak
            expected = p.cost.flops / p.wall_s / MEASURED_FLOPS
            peak = "this device's measured matmul peak"
        else:  # (weights + KV) bytes read / time, of the measured read-only bandwidth
            bytes_read = p.cost.weight_bytes_read + p.cost.kv_bytes_read
            expected = bytes_read / p.wall_s / MEASURED_READ
            peak = "this device's measured read bandwidth"
        assert frame.loc[p.index, "share"] == pytest.approx(expected, rel=1e-12)
        assert frame.loc[p.index, "peak"] == peak
        assert frame.loc[p.index, "datasheet_share"] is None  # a CPU has no datasheet
    decode = run.passes[3]
    said = pass_share(decode, run.device).sentence()
    achieved = (decode.cost.weight_bytes_read + decode.cost.kv_bytes_read) / decode.wall_s
    assert said.startswith("decode pass 3 read ") and "(modelled) in " in said and "(measured)" in said
    assert f"{human_bandwidth(achieved)}, {percent(achieved / MEASURED_READ)} of this device's measured read" in said
    assert f"({human_bandwidth(MEASURED_READ)})" in said


def test_the_run_share_is_every_decode_byte_over_every_decode_second(run: Trace) -> None:
    share = run_decode_share(run)
    assert share is not None
    decodes = [p for passes in run.repeats for p in passes[1:]]
    total_bytes = sum(p.cost.weight_bytes_read + p.cost.kv_bytes_read for p in decodes)
    assert share.share == pytest.approx(total_bytes / sum(p.wall_s for p in decodes) / MEASURED_READ, rel=1e-12)
    assert share.sentence().startswith(f"the run's {len(decodes)} decode passes read ")
    one_token = replace(run, repeats=tuple(passes[:1] for passes in run.repeats))
    assert run_decode_share(one_token) is None


def test_the_step_line_says_the_newest_pass_share(run: Trace) -> None:
    line = newest_pass_line(run, lambda text: text)
    newest = pass_share(run.passes[-1], run.device)
    assert line.startswith(f"**Pass {run.passes[-1].index}** · decode")
    achieved = newest.work / run.passes[-1].wall_s  # bytes read (modelled) / measured time
    assert line.endswith(f"· {human_bandwidth(achieved)} read, {percent(newest.share)} of the measured read bandwidth")


def test_the_references_are_cited_and_gpt_fasts_share_is_computed_from_its_figures() -> None:
    by_system = {r.system: r for r in PUBLISHED_SHARES}
    a100 = next(spec for spec in GPU_SPECS if spec.name == "A100 80GB SXM")
    gpt_fast = by_system["gpt-fast"]
    assert gpt_fast.share == pytest.approx(1410.76e9 / a100.bandwidth_bytes_per_s) and 0.68 < gpt_fast.share < 0.71
    assert gpt_fast.source.startswith("https://github.com/pytorch-labs/gpt-fast")
    hazy = by_system["Hazy Research megakernel"]
    assert hazy.share == 0.78 and hazy.source == "https://hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles"
    assert "batch 1" in hazy.setting and "H100" in hazy.setting and "Llama-3.2-1B" in hazy.setting


def test_the_chart_marks_each_reference_beside_the_passes(run: Trace) -> None:
    spec = share_chart(share_frame(run), references_frame()).to_dict()
    rules = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert len(rules) == 1
    datasets = spec["datasets"]
    marked = next(rows for rows in datasets.values() if rows and "system" in rows[0])
    assert {row["label"] for row in marked} == {"gpt-fast: 69.2 %", "Hazy Research megakernel: 78 %"}
    assert all(row["source"].startswith("https://") for row in marked)
    assert any(rows and "share" in rows[0] and "pass" in rows[0] for rows in datasets.values())
    assert "datasheet" in json.dumps(references_frame().to_dict())


# --- two peaks, named (a GPU with a spec row) ------------------------------------------------------------------------
H200 = next(spec for spec in GPU_SPECS if spec.name == "H200 SXM")
H200_MEASURED_FLOPS, H200_MEASURED_READ = 757e12, 4.05e12  # what the H200 of 2026-11-27 measured (752-786, 3.97-4.18)


def h200_profile() -> DeviceProfile:
    """An H200's profile as `cuda_profile` makes it: measured figures divided by, the spec row's beside them."""
    return DeviceProfile(
        "NVIDIA H200", "cuda", "bfloat16", H200_MEASURED_FLOPS, "measured", 4.2e12, "measured",
        measured_flops=H200_MEASURED_FLOPS, measured_bandwidth_bytes_per_s=4.2e12,
        read_bandwidth_bytes_per_s=H200_MEASURED_READ, read_bandwidth_source="measured",
        measured_read_bandwidth_bytes_per_s=H200_MEASURED_READ,
        datasheet_flops=H200.bf16_flops, datasheet_bandwidth_bytes_per_s=H200.bandwidth_bytes_per_s,
        datasheet_bandwidth_source="spec", datasheet_source=f"spec: {H200.name} ({H200.source})",
    )  # fmt: skip


def test_a_gpu_names_its_measured_and_datasheet_peaks_and_ratios_use_the_measured(run: Trace) -> None:
    gpu = h200_profile()
    said = peaks_sentence(gpu)
    assert f"divides by the measured matmul peak, {human_flops_per_s(H200_MEASURED_FLOPS)}" in said
    assert human_flops_per_s(H200.bf16_flops) in said and human_bandwidth(H200.bandwidth_bytes_per_s) in said
    assert f"{percent(1 - H200_MEASURED_FLOPS / H200.bf16_flops)} below the datasheet's" in said  # 23 % below 989
    rows = device_frame(gpu).set_index("figure")
    assert rows.loc["datasheet compute", "value"] == human_flops_per_s(H200.bf16_flops)
    assert rows.loc["peak compute", "source"] == "measured"
    printed = format_device(gpu)  # the CLI's device lines: measured first, the datasheet beside
    assert f"peak {human_flops_per_s(H200_MEASURED_FLOPS)} [measured]" in printed
    assert f"datasheet: {human_flops_per_s(H200.bf16_flops)}, {human_bandwidth(H200.bandwidth_bytes_per_s)}" in printed
    # The run's passes costed on the H200's figures: every ratio is against the measured peak, and says so.
    on_gpu = run.recosted(gpu)
    decode = on_gpu.passes[2]
    share = pass_share(decode, gpu)
    achieved = decode.cost.bytes_read / decode.wall_s
    assert share.share == pytest.approx(achieved / H200_MEASURED_READ)
    assert share.datasheet_share == pytest.approx(achieved / H200.bandwidth_bytes_per_s)
    assert "of this device's measured read bandwidth" in share.sentence() and "of the datasheet's" in share.sentence()
    assert decode.cost.t_weight_read_s == pytest.approx(decode.cost.weight_bytes_read / H200_MEASURED_READ)
    assert peak_words(gpu) == "at the measured peaks"
    floor = cost_charts.floor_sentence(on_gpu, 2)
    assert floor.endswith("(at the measured peaks).")
    assert peak_words(HAND) == "at the spec peaks"
