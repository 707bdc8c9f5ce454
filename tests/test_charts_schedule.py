"""The Scheduling page's frames checked exactly against a small hand-made run, and every chart built from them."""

from __future__ import annotations

from dataclasses import replace

import altair as alt
import pytest

from explorer.charts import schedule as charts
from explorer.core.units import MB
from explorer.labs.schedule.paging import PagingPeaks, paging_peaks, paging_sentence
from explorer.labs.schedule.records import (
    CONTINUOUS,
    SEQUENTIAL,
    BlockHolding,
    PrefixHit,
    RequestRecord,
    ScheduleRun,
    ServedMode,
    StepEntry,
    StepRecord,
    TokenCheck,
)
from explorer.labs.schedule.workload import EngineSettings, Workload


def step(index: int, start_s: float, entries: tuple[StepEntry, ...], holdings: tuple[BlockHolding, ...]) -> StepRecord:
    free_blocks = 8 - len({b for h in holdings for b in h.blocks})
    return StepRecord(index, start_s, 0.03, 0.001, 0.001, entries, holdings, free_blocks, 0)


@pytest.fixture
def run() -> ScheduleRun:
    """r0 (6-token prompt) prefills alone; r1 (10 tokens, a 4-token prefix shared with r0) is split in two chunks
    that share steps 1 and 2 with r0's decodes; each makes 3 tokens. Blocks of 4 tokens, 100 bytes per token."""
    r0 = RequestRecord("r0", "a", tuple(range(6)), 4, 3, 0.0, 0.01, (0.04, 0.07, 0.10), (1, 2, 3), 6)
    r1 = RequestRecord("r1", "b", tuple(range(10)), 4, 3, 0.02, 0.04, (0.10, 0.13, 0.16), (4, 5, 6), 6, 4)
    steps = (
        step(0, 0.01, (StepEntry("r0", 6, 0, 1, True),), (BlockHolding("r0", (0, 1), 6),)),
        step(
            1,
            0.04,
            (StepEntry("r0", 0, 1, 0, False), StepEntry("r1", 3, 0, 1, False)),
            (BlockHolding("r0", (0, 1), 7), BlockHolding("r1", (0, 2), 7)),
        ),
        step(
            2,
            0.07,
            (StepEntry("r0", 0, 1, 0, False), StepEntry("r1", 3, 0, 2, True)),
            (BlockHolding("r0", (0, 1, 3), 8), BlockHolding("r1", (0, 2, 4), 10)),
        ),
        step(3, 0.10, (StepEntry("r1", 0, 1, 0, False),), (BlockHolding("r1", (0, 2, 4), 11),)),
        step(4, 0.13, (StepEntry("r1", 0, 1, 0, False),), (BlockHolding("r1", (0, 2, 4), 12),)),
    )
    steps = (steps[0], replace(steps[1], prefix_hits=(PrefixHit("r1", 4, 1),)), *steps[2:])
    return ScheduleRun(
        workload=Workload(requests=2, prompt_tokens=(6, 6), new_tokens=(3,), prefix="sys"),
        settings=EngineSettings(block_size=4, num_blocks=8, token_budget=4),
        model="tiny",
        dtype="float32",
        device="cpu",
        kv_bytes_per_token=100,
        engine_num_blocks=8,
        steps=steps,
        requests=(r0, r1),
        checks=(TokenCheck("r0", True), TokenCheck("r1", True)),
    )


def test_step_and_request_facts(run: ScheduleRun) -> None:
    kinds = [s.kind for s in run.steps]
    assert kinds == ["prefill", "mixed", "mixed", "decode", "decode"]
    assert [s.has_partial_prefill for s in run.steps] == [False, True, True, False, False]
    assert [s.blocks_held for s in run.steps] == [2, 3, 5, 3, 3]
    assert [block for block, ids in run.steps[2].block_holders.items() if len(ids) > 1] == [0]
    assert run.prefill_tokens_computed == 12 and run.prefix_tokens_reused == 4
    r1 = run.request("r1")
    assert (r1.ttft_s, r1.queue_s, r1.prefill_s) == pytest.approx((0.08, 0.02, 0.06))
    assert r1.itl_s == pytest.approx((0.03, 0.03)) and r1.e2e_s == pytest.approx(0.14)
    assert run.served.total_tokens == 6 and run.served.span_s == pytest.approx(0.16)
    assert run.served.tokens_per_s == pytest.approx(6 / 0.16) and run.served.all_tokens_match


def test_step_labels() -> None:
    assert charts.step_label("mixed", True) == "mixed + chunk"
    assert charts.step_label("mixed", False) == "mixed"
    assert charts.step_label("prefill", True) == "chunk"
    assert charts.step_label("decode", False) == ""


def test_steps_frame(run: ScheduleRun) -> None:
    frame = charts.steps_frame(run)
    assert len(frame) == 7  # one row per request per step
    assert frame.groupby("step")["tokens"].sum().tolist() == [6, 4, 4, 1, 1]
    step1 = frame[frame["step"] == 1].set_index("request")
    assert step1.loc["r0", "phase"] == "decode" and step1.loc["r1", "phase"] == "prefill"
    assert step1.loc["r1", "chunk"] == 1 and step1.loc["r1", "label"] == "mixed + chunk"
    assert list(frame["request_order"]) == [0, 0, 1, 0, 1, 1, 1]
    assert frame["wall_ms"].tolist() == pytest.approx([30.0] * 7)
    table = charts.step_table_frame(run)
    assert table["requests"].tolist()[:2] == ["r0:6p", "r0:d r1:3p"]
    assert table["kind"].tolist() == ["prefill", "mixed + chunk", "mixed + chunk", "decode", "decode"]
    assert table["prefix_hits"].tolist()[1] == "r1:4"


def test_timeline_frame(run: ScheduleRun) -> None:
    frame = charts.timeline_frame(run)
    r1 = frame[(frame["request"] == "r1") & (frame["state"] != "token")]
    assert r1["state"].tolist() == ["queued", "prefilling", "decoding", "done"]
    assert r1["start_ms"].tolist() == pytest.approx([20.0, 40.0, 100.0, 160.0])
    assert r1["end_ms"].tolist() == pytest.approx([40.0, 100.0, 160.0, 160.0])
    r0_done = frame[(frame["request"] == "r0") & (frame["state"] == "done")]
    assert (r0_done["start_ms"].item(), r0_done["end_ms"].item()) == pytest.approx((100.0, 160.0))
    tokens = frame[frame["state"] == "token"]
    assert tokens.groupby("request").size().tolist() == [3, 3]


def test_latency_frame_flags(run: ScheduleRun) -> None:
    frame = charts.latency_frame(run, ttft_slo_s=0.05, itl_slo_s=0.031).set_index("request")
    assert frame.loc["r0", "ttft_ms"] == pytest.approx(40.0) and frame.loc["r1", "ttft_ms"] == pytest.approx(80.0)
    assert frame["ttft_within_slo"].tolist() == [True, False]
    assert frame["itl_p99_within_slo"].tolist() == [True, True]
    assert frame.loc["r1", "queue_ms"] == pytest.approx(20.0) and frame.loc["r1", "prefill_ms"] == pytest.approx(60.0)


def test_blocks_frame_marks_shared_blocks(run: ScheduleRun) -> None:
    frame = charts.blocks_frame(run)
    step2 = frame[frame["step"] == 2].set_index("block")
    assert step2.index.tolist() == [0, 1, 2, 3, 4]
    assert step2.loc[0, "holder"] == charts.SHARED and step2.loc[0, "holders"] == "r0, r1"
    assert step2.loc[3, "holder"] == "r0" and step2.loc[4, "holder"] == "r1"
    assert frame["shared"].sum() == 2  # block 0 in steps 1 and 2


def test_memory_frame_paged_against_both_contiguous_reservations(run: ScheduleRun) -> None:
    frame = charts.memory_frame(replace(run, max_context=64))
    paged, max_length, exact = (frame[frame["layout"] == layout]["mb"].tolist() for layout in charts.LAYOUT_DOMAIN)
    assert paged == pytest.approx([n * 4 * 100 / MB for n in (2, 3, 5, 3, 3)])  # blocks x 4 tokens x 100 B (SI MB)
    assert max_length == pytest.approx([n * 64 * 100 / MB for n in (1, 2, 2, 1, 1)])  # 64 tokens per admitted request
    assert exact == pytest.approx([n * 100 / MB for n in (9, 22, 22, 13, 13)])  # (6 + 3) and (10 + 3) tokens
    assert len(charts.memory_frame(run)) == 10  # no context recorded: no max-length line, never a made-up one


def test_paging_is_compared_with_the_max_length_first_and_exact_lengths_second(run: ScheduleRun) -> None:
    """Peaks by hand: paged 5 blocks x 400 B = 2,000 B; max length 2 x 64 x 100 = 12,800 B; exact 22 x 100 = 2,200 B."""
    sentence = paging_sentence(replace(run, max_context=64))
    assert sentence.startswith("Peak KV memory, paged: 2.00 kB. Primary, what PagedAttention's saving is measured")
    assert "paging saves 10.80 kB (84%) against a contiguous reservation of the model's maximum length (64" in sentence
    assert "Second: paging saves 200 B (9%) against reserving exactly each request's prompt + max new" in sentence
    assert "Primary" not in paging_sentence(run)  # no context recorded: only the line it can compute
    # the prompt and the max new tokens are known at admission: only the real output length is not
    assert "known in advance" not in sentence and "both are known when a request is admitted" in sentence


def test_a_paging_loss_is_called_a_cost(run: ScheduleRun) -> None:
    """r0 alone with 1 new token: 7 tokens reserved exactly (700 B) against 2 whole 4-token blocks (800 B)."""
    short = replace(run.requests[0], max_new_tokens=1)
    one_step = replace(run, steps=run.steps[:1], requests=(short,), max_context=64)
    sentence = paging_sentence(one_step)
    assert "Second: paging costs 100 B more than reserving exactly" in sentence and "saves 100 B" not in sentence
    assert "paging holds whole 4-token blocks, each request's last one partly filled" in sentence
    assert paging_peaks(one_step) == PagingPeaks(800, 6400, 700, 64)


def test_modes_frames(run: ScheduleRun) -> None:
    slow = tuple(
        RequestRecord(r.id, r.prompt_text, r.prompt_token_ids, 0, 3, r.arrival_s, 0.3, (0.4, 0.5, 0.6), r.token_ids, 6)
        for r in run.requests
    )
    modes = (run.served, ServedMode(SEQUENTIAL, slow, (TokenCheck("r0", True), TokenCheck("r1", False))))
    frame = charts.modes_frame(modes).set_index("mode")
    assert frame.loc[CONTINUOUS, "tokens_per_s"] == pytest.approx(6 / 0.16)
    assert frame.loc[SEQUENTIAL, "tokens_per_s"] == pytest.approx(6 / 0.6)
    assert not frame.loc[SEQUENTIAL, "same_tokens_as_solo"]
    assert frame.loc[SEQUENTIAL, "itl_p50_ms"] == frame.loc[SEQUENTIAL, "itl_p99_ms"] == pytest.approx(100.0)
    per_request = charts.mode_requests_frame(modes)
    assert len(per_request) == 4 and per_request["ttft_ms"].tolist() == pytest.approx([40.0, 80.0, 400.0, 380.0])
    # Per request ITL under each mode, beside TTFT: r0's gaps are 30 ms under continuous batching, 100 ms alone.
    assert per_request["itl_p50_ms"].tolist() == pytest.approx([30.0, 30.0, 100.0, 100.0])
    assert per_request["itl_p99_ms"].tolist() == pytest.approx([30.0, 30.0, 100.0, 100.0])


def test_prefix_frame(run: ScheduleRun) -> None:
    assert charts.prefix_frame(run).empty
    off_requests = tuple(replace(r, prefill_tokens_computed=r.prompt_len, prefix_tokens_reused=0) for r in run.requests)
    with_off = replace(run, prefix_off=replace(run, requests=off_requests))
    frame = charts.prefix_frame(with_off)
    assert frame[frame["sharing"] == "on"]["prefill_tokens"].tolist() == [6, 6]
    assert frame[frame["sharing"] == "off"]["prefill_tokens"].tolist() == [6, 10]
    assert frame[frame["sharing"] == "on"]["reused_tokens"].tolist() == [0, 4]
    assert frame["same_tokens"].all()


def test_every_chart_builds_a_valid_spec(run: ScheduleRun) -> None:
    ids = [r.id for r in run.requests]
    modes = (run.served,)
    built = [
        charts.steps_chart(charts.steps_frame(run)),
        charts.timeline_chart(charts.timeline_frame(run), ids),
        charts.blocks_chart(charts.blocks_frame(run), ids, run.engine_num_blocks),
        charts.memory_chart(charts.memory_frame(run)),
        charts.throughput_chart(charts.modes_frame(modes)),
        charts.mode_requests_chart(charts.mode_requests_frame(modes), "ttft_ms", "TTFT"),
        charts.mode_requests_chart(charts.mode_requests_frame(modes), "itl_p50_ms", "ITL p50"),
        charts.prefix_chart(charts.prefix_frame(run), "ttft_ms", "TTFT"),
    ]
    for chart in built:
        assert isinstance(chart, alt.TopLevelMixin)
        assert chart.to_dict()["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


def test_request_colours_avoid_the_phase_colours() -> None:
    from explorer.charts.common import PHASE_RANGE

    colours = charts.request_colors([f"r{i}" for i in range(12)])
    assert len(colours) == 12 and not set(colours) & set(PHASE_RANGE)


def test_prompts_frame_says_what_was_sent(run: ScheduleRun) -> None:
    frame = charts.prompts_frame(run)
    assert frame.to_dict("records")[1] == {"request": "r1", "prompt_tokens": 10, "new_tokens": 3, "prompt_text": "b"}
