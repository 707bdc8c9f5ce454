"""The split-phases what-if (issue 45): every formula recomputed independently of the code that computes it, the
simulator checked against hand-worked timelines and the M/D/1 queue's closed form, the four published shapes on
shipped configs (each with its source), and `whatif --split --json` against the record itself."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import pytest

from explorer.charts import split as split_charts
from explorer.core.errors import BadInput
from explorer.scale.config import load_architecture
from explorer.scale.floors import Scenario, decode_step, find_gpu, max_batch, prefill_floor
from explorer.scale.split import (
    ATTAINMENT_TARGET,
    Layout,
    Parts,
    Workload,
    batch_under_tpot,
    exposed_streamed_s,
    iteration_s,
)
from explorer.scale.split_curves import capacity_per_s, goodput
from explorer.scale.split_explain import split_formula_lines
from explorer.scale.split_links import LINK_NAMES, split_link
from explorer.scale.split_sim import arrivals, simulate, simulate_colocated
from explorer.scale.split_whatif import RooflineSteps, SplitInputs, split_what_if
from tests.test_scale import whatif_main

GB = 1e9
H100 = find_gpu("H100 SXM")


def scenario(model: str, gpus: int, prompt: int, output: int = 256) -> Scenario:
    return Scenario(load_architecture(model), H100, "bfloat16", gpus, 1, prompt + output, prompt)


# --- the KV cache and its transfer ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "layers", "kv_heads", "head_dim"), [("llama-3.1-8b", 32, 8, 128), ("llama-3.1-70b", 80, 8, 128)]
)
def test_kv_bytes_per_request_is_2_x_layers_x_kv_heads_x_head_dim_x_bytes_x_tokens(
    model: str, layers: int, kv_heads: int, head_dim: int
) -> None:
    result = split_what_if(SplitInputs(scenario(model, 8 if "70b" in model else 1, 4096), 256, 1.0, 0.05, requests=40))
    assert result.kv_bytes_per_request == 2 * layers * kv_heads * head_dim * 2 * 4096


def test_the_issues_figures_llama_8b_4k_prompt_over_each_link() -> None:
    """Issue 45: 128 KiB a token in bf16, 512 MiB for 4k tokens; ~1 ms over NVLink, ~11 ms over 400 Gb/s RDMA,
    ~170 ms over 25 GbE (line rates one way: 450 GB/s = half of the H100's 900 GB/s, 50 GB/s, 3.125 GB/s)."""
    kv = 2 * 32 * 8 * 128 * 2 * 4096
    assert kv == 512 * 2**20
    one_way = {"NVLink": 450 * GB, "400G RDMA": 50 * GB, "25 GbE": 3.125 * GB, "100 GbE": 12.5 * GB}
    one_way |= {"PCIe Gen5": 64 * GB, "200G RDMA": 25 * GB}
    assert set(one_way) == set(LINK_NAMES)
    for name, rate in one_way.items():
        link = split_link(name, H100)
        assert link.one_way_bytes_per_s == pytest.approx(rate)
        assert link.source and "http" in link.source
    assert kv / one_way["NVLink"] == pytest.approx(1.19e-3, rel=0.01)
    assert kv / one_way["400G RDMA"] == pytest.approx(10.7e-3, rel=0.01)
    assert kv / one_way["25 GbE"] == pytest.approx(0.172, rel=0.01)
    result = split_what_if(SplitInputs(scenario("llama-3.1-8b", 1, 4096), 256, 1.0, 0.05, link="25 GbE", requests=40))
    assert result.transfer_whole_s == pytest.approx(kv / one_way["25 GbE"])


@pytest.mark.parametrize(("gpus", "heads_per_rank"), [(2, 4), (4, 2), (8, 1), (16, 1)])
def test_tensor_parallel_ranks_send_their_own_kv_heads_over_their_own_links(gpus: int, heads_per_rank: int) -> None:
    """With N GPUs an instance each rank holds ceil(kv_heads / N) KV heads (one, replicated, past N = kv_heads = 8).
    Over a link a GPU (NVLink, RDMA rails) every rank sends its share at once: t_x = one share / the link; over a
    link the instance's GPUs share (a server's Ethernet), the whole KV goes through it: t_x = KV bytes / the link."""
    layers, head_bytes = 80, 2 * 128 * 2 * 4096  # Llama-3.1-70B: K and V, head_dim 128, bf16, 4k prompt
    for link, one_way in (("400G RDMA", 50 * GB), ("25 GbE", 3.125 * GB)):
        result = split_what_if(
            SplitInputs(scenario("llama-3.1-70b", gpus, 4096), 256, 1.0, 0.05, link=link, requests=40)
        )
        assert result.kv_bytes_per_request == layers * 8 * head_bytes
        assert result.kv_bytes_per_rank == layers * heads_per_rank * head_bytes
        sent = result.kv_bytes_per_rank if link == "400G RDMA" else result.kv_bytes_per_request
        assert result.transfer_whole_s == pytest.approx(sent / one_way)
        said = "\n".join(split_formula_lines(result))
        assert ("one a GPU" if link == "400G RDMA" else "one an instance, shared") in said


def test_a_gpu_without_nvlink_is_refused_in_one_line() -> None:
    with pytest.raises(BadInput, match="has no NVLink"):
        split_link("NVLink", find_gpu("L4"))


def pipelined_exposed_s(transfer_s: float, prefill_s: float, layers: int) -> float:
    """Layer by layer, step by step: layer i is computed at (i + 1) t_p / L and sent after the previous send ends."""
    sent = 0.0
    for layer in range(layers):
        sent = max(sent, (layer + 1) * prefill_s / layers) + transfer_s / layers
    return sent - prefill_s


@pytest.mark.parametrize(
    ("transfer_s", "prefill_s", "layers"),
    [(0.003, 0.183, 80), (0.43, 0.183, 80), (0.172, 0.06, 32), (0.06, 0.06, 32), (1.0, 0.0, 4)],
)
def test_the_streamed_exposed_transfer_equals_a_layer_by_layer_pipeline(
    transfer_s: float, prefill_s: float, layers: int
) -> None:
    assert exposed_streamed_s(transfer_s, prefill_s, layers) == pytest.approx(
        pipelined_exposed_s(transfer_s, prefill_s, layers)
    )


# --- a toy step model, for timelines worked by hand -------------------------------------------------------------------
@dataclass
class ToySteps:
    """Constant times: a prompt's prefill is all compute; a decode step is the weight read, whatever the batch."""

    prompt_tokens: int = 100
    layers: int = 10
    prefill_s: float = 0.1
    step_s: float = 0.01
    source: str = "modelled"

    def prefill(self) -> Parts:
        return Parts(self.prefill_s, 0.0, 0.0)

    def decode(self, batch: int) -> Parts:
        return Parts(0.0, self.step_s, 0.0)

    def taken(self) -> dict[str, float]:
        return {}


def test_the_disaggregated_ttft_is_prefill_plus_the_exposed_transfer_whole_and_streamed() -> None:
    toy, rate = ToySteps(), 0.01  # one request every ~100 s: no queue
    for streamed, exposed in ((False, 0.2), (True, exposed_streamed_s(0.2, 0.1, 10))):
        work = Workload(11, 10.0, 10.0, 100, transfer_s=0.2, streamed=streamed, requests=5)
        for o in simulate(toy, work, Layout("disaggregated", 2, 1, 1), rate):
            assert o.queue_s == 0 and o.ttft_s == pytest.approx(0.1 + exposed) and o.exposed_s == pytest.approx(exposed)
            assert o.tpot_s == pytest.approx(0.01)  # alone on its decode instance: one step a token


def test_a_colocated_prefill_stalls_every_running_decode_and_chunking_spreads_it() -> None:
    """Request A arrives at 0, B at 0.155 (mid-way through A's 6th decode step): prefill-first, A's 10 decode steps
    take 10 x 10 ms plus B's 100 ms prefill, which starts when that step ends (0.16); chunked (chunks of 50 tokens =
    half a prompt), each of B's two chunks rides on one of A's steps, which then takes max(10 ms, 50 ms) = 50 ms."""
    toy = ToySteps()
    work = Workload(11, 10.0, 10.0, 100)
    stalled = simulate_colocated(toy, work, [0.0, 0.155], Layout("colocated", 1))
    assert stalled[0].ttft_s == pytest.approx(0.1)
    assert stalled[0].tpot_s == pytest.approx((10 * 0.01 + 0.1) / 10)  # one stall of a whole prefill
    assert stalled[1].ttft_s == pytest.approx(0.16 + 0.1 - 0.155)  # waits for A's step to end, then its prefill
    chunked = simulate_colocated(toy, work, [0.0, 0.155], Layout("colocated", 1, chunk_tokens=50))
    assert chunked[0].ttft_s == pytest.approx(0.1)  # its own two chunks, 50 ms each
    assert chunked[0].tpot_s == pytest.approx((8 * 0.01 + 2 * 0.05) / 10)
    assert chunked[1].ttft_s == pytest.approx(0.16 + 2 * 0.05 - 0.155)
    assert iteration_s(toy, 1, 50) == pytest.approx(max(0.05, 0.01))


def test_the_prefill_queue_matches_the_m_d_1_mean_wait() -> None:
    """One prefill server, deterministic service D, Poisson arrivals at load rho: Pollaczek-Khinchine's mean wait
    rho D / (2 (1 - rho)) (Kleinrock, Queueing Systems vol. 1, M/G/1 with zero service variance)."""
    toy = ToySteps(prompt_tokens=10_000)  # one prompt per iteration (the token budget holds none more)
    work = Workload(2, 10.0, 10.0, 10_000, requests=20_000)
    rho = 0.5
    outcomes = simulate(toy, work, Layout("disaggregated", 2, 1, 1), rho / toy.prefill_s)
    mean_wait = sum(o.queue_s for o in outcomes) / len(outcomes)
    assert mean_wait == pytest.approx(rho * toy.prefill_s / (2 * (1 - rho)), rel=0.08)


def test_arrivals_are_poisson_with_a_fixed_seed() -> None:
    times = arrivals(4.0, 20_000, 0)
    assert times == arrivals(4.0, 20_000, 0) and all(b > a for a, b in zip(times, times[1:], strict=False))
    assert len(times) / times[-1] == pytest.approx(4.0, rel=0.03)


# --- the roofline's step times ----------------------------------------------------------------------------------------
def test_an_iteration_without_a_chunk_or_a_batch_is_the_rooflines_own_floor() -> None:
    s = scenario("llama-3.1-70b", 4, 4096)
    steps = RooflineSteps(s, 256)
    assert iteration_s(steps, 0, 4096) == pytest.approx(prefill_floor(s).floor_s)
    for batch in (1, 7, 64):
        assert iteration_s(steps, batch, 0) == pytest.approx(decode_step(s, batch, 4096 + 128).floor_s)


def test_the_decode_batch_under_a_tpot_slo_is_the_largest_whose_step_meets_it() -> None:
    s = scenario("llama-3.1-70b", 4, 4096)
    memory = max_batch(s)
    steps = RooflineSteps(s, 256)
    for slo_s in (0.011, 0.015, 0.03, 1.0):
        scanned = max((b for b in range(1, memory + 1) if decode_step(s, b, 4096 + 128).floor_s < slo_s), default=0)
        assert batch_under_tpot(steps, slo_s, memory) == scanned
    assert batch_under_tpot(steps, 0.001, memory) == 0  # not even one request meets it


# --- goodput ----------------------------------------------------------------------------------------------------------
def test_goodput_is_the_highest_rate_meeting_the_90_percent_target() -> None:
    rates = [1.0, 2.0, 3.0, 4.0]
    assert goodput(rates, [1.0, 0.95, 0.85, 0.2]) == pytest.approx(2.0 + (0.95 - 0.9) / (0.95 - 0.85))
    assert goodput(rates, [0.8, 0.7, 0.1, 0.0]) == 0.0
    assert goodput(rates, [1.0, 1.0, 0.99, 0.91]) == 4.0
    assert ATTAINMENT_TARGET == 0.9  # DistServe, arXiv 2401.09670, section 2.3 and its evaluation


def test_each_curves_attainment_recounts_from_the_simulated_requests() -> None:
    inputs = SplitInputs(scenario("llama-3.1-8b", 1, 2048), 128, 0.5, 0.03, requests=60)
    result = split_what_if(inputs)
    work = Workload(128, 0.5, 0.03, result.memory_batch, result.transfer_whole_s, True, 60)
    for c in result.curves:
        assert c.gpus == c.layout.instances * 1
        for rate, share in zip(c.rates_per_s[:6], c.attainment[:6], strict=True):
            outcomes = simulate(result.steps, work, c.layout, rate)
            assert share == sum(o.ttft_s < 0.5 and o.tpot_s < 0.03 for o in outcomes) / len(outcomes)
        assert c.goodput_per_s == min(goodput(c.rates_per_s, c.attainment), c.capacity_per_s)
        assert c.goodput_per_gpu == c.goodput_per_s / c.gpus


# --- published shapes -------------------------------------------------------------------------------------------------
SHIPPED = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-70b"]


@pytest.mark.parametrize("model", SHIPPED)
@pytest.mark.parametrize("prompt", [128, 4096])
def test_shape_a_no_slo_throughput_is_not_higher_disaggregated(model: str, prompt: int) -> None:
    """(a) vLLM's docs: "Disaggregated prefill DOES NOT improve throughput"
    (https://docs.vllm.ai/en/latest/features/disagg_prefill/). With no SLO, the same GPUs colocated serve at least as
    many requests/s as any x:y split: 1 / (t_p + t_d) >= min(x / t_p, y / t_d) / (x + y) for every x, y."""
    gpus = 4 if "70b" in model else 1
    s = scenario(model, gpus, prompt)
    steps = RooflineSteps(s, 256)
    work = Workload(256, math.inf, math.inf, max_batch(s), 0.0)
    for x in (1, 2, 3):
        for y in (1, 2, 3):
            colocated = capacity_per_s(steps, work, Layout("colocated", x + y)) / (x + y)
            split = capacity_per_s(steps, work, Layout("disaggregated", x + y, x, y)) / (x + y)
            assert split <= colocated * (1 + 1e-9), (x, y)
    relaxed = split_what_if(SplitInputs(s, 256, 1e4, 1e4, chunk_tokens=0, requests=40))  # SLOs nobody misses
    colocated_curve, split_curve = relaxed.curves
    assert split_curve.goodput_per_gpu <= colocated_curve.goodput_per_gpu * (1 + 1e-9)


def test_shape_b_llama_8b_short_prompts_colocated_wins_or_ties() -> None:
    """(b) Dynamo's AIConfigurator finds aggregated serving better for small models; DistServe (arXiv 2401.09670)
    and vLLM's docs place disaggregation's gain in long prompts. Llama-3.1-8B on H100, 128-token prompts, 256 out,
    TTFT 200 ms, TPOT 50 ms: 2 GPUs colocated against 1P1D."""
    result = split_what_if(SplitInputs(scenario("llama-3.1-8b", 1, 128), 256, 0.2, 0.05))
    colocated = max(result.curves[:-1], key=lambda c: c.goodput_per_gpu)
    assert colocated.goodput_per_gpu >= 0.95 * result.curves[-1].goodput_per_gpu
    assert result.sentence.startswith("colocated")


def seventy_b(link: str) -> SplitInputs:
    """Llama-3.1-70B, 4 x H100 an instance (tensor parallel), 4k prompts, 256 out, TTFT 1 s, tight TPOT 15 ms."""
    return SplitInputs(scenario("llama-3.1-70b", 4, 4096), 256, 1.0, 0.015, link=link)  # 300 requests a rate


def test_shape_c_llama_70b_long_prompts_tight_tpot_disaggregated_ahead() -> None:
    """(c) DistServe (OSDI '24, arXiv 2401.09670): up to 7.4x more requests within both SLOs; NVIDIA Dynamo's
    AIConfigurator: disaggregation ahead for 32B+ models with long inputs. Here 1P1D against the same 8 GPUs colocated,
    with or without chunked prefill."""
    result = split_what_if(seventy_b("NVLink"))
    split, colocated = result.curves[-1], max(result.curves[:-1], key=lambda c: c.goodput_per_gpu)
    assert split.goodput_per_gpu > 1.05 * colocated.goodput_per_gpu
    assert result.sentence.startswith("1P1D wins by")
    stalled = result.curves[0]
    assert stalled.limit_kind == "tpot"  # prefill-first: the stalls miss TPOT, as DistServe's Figure 2


def test_shape_d_over_25_gbe_the_exposed_transfer_removes_the_gain() -> None:
    """(d) Issue 45 and Mooncake/DistServe's placement: a 70B 4k prompt's 1.34 GB of KV is 0.43 s over 25 GbE (one
    Ethernet link an instance, its 4 GPUs sharing it; over NVLink each GPU sends its quarter over its own: 0.75 ms);
    the exposed part lands in TTFT and the link queues, so (c)'s gain is gone."""
    fast, slow = split_what_if(seventy_b("NVLink")), split_what_if(seventy_b("25 GbE"))
    colocated = max(slow.curves[:-1], key=lambda c: c.goodput_per_gpu)
    assert slow.curves[-1].goodput_per_gpu < colocated.goodput_per_gpu < fast.curves[-1].goodput_per_gpu
    assert slow.curves[-1].limit_kind in ("link", "capacity") and "link" in slow.curves[-1].limit
    assert slow.sentence.startswith("colocated")


# --- the command and the record --------------------------------------------------------------------------------------
def test_whatif_split_json_is_the_record_and_explains_every_formula(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "split.json"
    argv = ["whatif", "--split", "--model", "llama-3.1-8b", "--prompt-tokens", "1024", "--output-tokens", "64"]
    assert whatif_main([*argv, "--layout", "1P2D", "--link", "100 GbE", "--explain", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    direct = split_what_if(
        SplitInputs(scenario("llama-3.1-8b", 1, 1024, 64), 64, 1.0, 0.05, 1, 2, link="100 GbE")
    ).to_dict()
    assert written == json.loads(json.dumps(direct))
    assert written["sentence"] in printed and "KV bytes per request = 2 (K and V)" in printed
    assert [row["label"] for row in written["layouts"]] == ["colocated x3", "colocated x3, chunks of 512", "1P2D"]
    assert written["sources"]["link"].startswith("IEEE 802.3ba")


@pytest.mark.parametrize(
    ("extra", "said"),
    [(["--layout", "P1D"], "--layout must read xPyD"), (["--output-tokens", "1"], "at least 2")],
)
def test_bad_split_input_is_one_line(extra: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert whatif_main(["whatif", "--split", *extra]) != 0
    assert said in capsys.readouterr().out


def test_the_chart_builders_take_the_records_frames() -> None:
    result = split_what_if(SplitInputs(scenario("llama-3.1-8b", 1, 512, 64), 64, 1.0, 0.05, requests=40))
    goodput_frame = split_charts.goodput_frame(result)
    assert set(goodput_frame["layout"]) == {c.layout.label for c in result.curves}
    assert len(goodput_frame) == sum(len(c.rates_per_s) for c in result.curves)
    assert isinstance(split_charts.goodput_chart(goodput_frame).to_dict(), dict)
    frame = split_charts.distribution_frame(result)
    assert len(frame) == 40 * len(result.curves) and set(frame["source"]) == {"modelled"}
    built = split_charts.distribution_chart(frame, 1000.0, 50.0)
    assert isinstance(built, alt.HConcatChart) and "TPOT (ms, modelled)" in json.dumps(built.to_dict())
    assert any("goodput (DistServe)" in line for line in split_formula_lines(result))
