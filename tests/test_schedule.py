"""Serving lab 2: the engine hooks pinned, the workload's validation, a run's steps and tokens, the baselines, the CLI,
and the Scheduling page through AppTest."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest

from explorer.core.errors import BadInput
from explorer.core.lab_progress import LabProgress
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile
from explorer.labs.schedule import baselines
from explorer.labs.schedule.paging import paging_sentence
from explorer.labs.schedule.records import CONTINUOUS, SEQUENTIAL, STATIC, RequestRecord, ScheduleRun
from explorer.labs.schedule.run import run_schedule
from explorer.labs.schedule.sharing import REUSED, SAME_STEP, SHORTER_THAN_BLOCK, explain_sharing
from explorer.labs.schedule.workload import (
    EngineSettings,
    PlannedRequest,
    Workload,
    check_fits,
    check_prompt_chars,
    parse_int_list,
    plan_requests,
    validate,
)
from explorer.models.loading import load_model
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server  # noqa: F401 - an autouse fixture
from tests.cli_support import run_cli
from tests.owner_support import OwnersOfATest

ROOT = Path(__file__).resolve().parents[1]
RUN_KEY = "explorer_schedule_run"  # pages/scheduling.py keeps its run here


# --- what we rely on in transformers, pinned -------------------------------------------------------------------------
def test_the_engine_hooks_we_wrap_still_exist() -> None:
    """If an upgrade renames or reshapes any of these, the instrumentation would silently record nothing."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching import ContinuousBatchingManager, PagedAttentionCache
    from transformers.generation.continuous_batching.cache_allocators import CachePool
    from transformers.generation.continuous_batching.cache_allocators.cache_allocator import BlockLedger, CacheAllocator
    from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor
    from transformers.generation.continuous_batching.input_outputs import ContinuousBatchingIOs
    from transformers.generation.continuous_batching.requests import FutureRequestState, RequestState
    from transformers.generation.continuous_batching.scheduler import SCHEDULER_MAPPING, Scheduler

    def params(fn: object) -> list[str]:
        return list(inspect.signature(fn).parameters)

    assert params(ContinuousBatchingManager._create_batch_processor) == ["self"]
    assert params(ContinuousBatchingManager._generation_step) == ["self"]
    assert params(ContinuousBatchingManager.__init__)[:5] == [
        "self",
        "model",
        "generation_config",
        "continuous_batching_config",
        "workload_hints",
    ]
    for name in ("request_id", "max_new_tokens", "eos_token_id"):
        assert name in params(ContinuousBatchingManager.add_request)
    for name in ("warmup", "start", "stop", "destroy", "get_result", "is_running"):
        assert callable(getattr(ContinuousBatchingManager, name))
    assert params(ContinuousBatchProcessor.prepare_next_batch) == ["self"]
    assert params(ContinuousBatchProcessor.update_batch) == ["self"]
    assert "requests_in_batch" in inspect.getsource(ContinuousBatchingIOs.__init__)
    assert params(PagedAttentionCache.search_prefix_match) == ["self", "request_id", "prompt_ids"]
    assert "self.cache.search_prefix_match(" in inspect.getsource(Scheduler._infer_request_tokens)
    assert set(FutureRequestState.__slots__) >= {"state", "has_new_token", "query_length"}
    assert callable(RequestState.generated_len) and "position_offset" in RequestState.__dataclass_fields__
    assert {"fifo", "prefill_first"} <= set(SCHEDULER_MAPPING)
    assert "self.active_requests" in inspect.getsource(Scheduler.reset)
    for attr in ("num_free_sectors", "count_free_blocks", "num_reserved_sectors"):
        assert attr in inspect.getsource(CachePool)
    for attr in ("self.block_table", "self.blocks_per_sector", "self.tokens_per_page", "self.index", "self.ledger"):
        assert attr in inspect.getsource(CacheAllocator)
    assert "self.cached_blocks" in inspect.getsource(BlockLedger.__init__)
    import psutil  # noqa: F401 - on a CPU, transformers sizes the paged cache from psutil, else raises MemoryError

    config_fields = ContinuousBatchingConfig.__dataclass_fields__
    for name in ("scheduler_type", "max_batch_tokens", "page_size", "num_blocks", "allow_block_sharing"):
        assert name in config_fields
    for name in ("use_async_batching", "use_cuda_graph", "auto_switch_to_flash", "cpu_offload_space"):
        assert name in config_fields


# --- validation ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("workload", "settings", "message"),
    [
        (Workload(requests=0), EngineSettings(), "No requests"),
        (Workload(requests=99), EngineSettings(), "more than this lab serves"),
        (Workload(requests=3, arrivals_ms=(0, 200, 100)), EngineSettings(), "out of order"),
        (Workload(requests=2, arrivals_ms=(0,)), EngineSettings(), "one per request"),
        (Workload(), EngineSettings(token_budget=8, block_size=16), "below one KV block"),
        (Workload(), EngineSettings(block_size=2), "at least 4 tokens"),
        (Workload(), EngineSettings(scheduler="lifo"), "Unknown scheduler"),
        (Workload(new_tokens=(0,)), EngineSettings(), "New tokens"),
        (Workload(prompt_tokens=(0,)), EngineSettings(), "Prompt lengths"),
        (Workload(requests=2, prompts=("a",)), EngineSettings(), "one prompt per request"),
        (Workload(stagger_ms=-1), EngineSettings(), "0 ms or more"),
    ],
)
def test_bad_input_is_one_clear_line(workload: Workload, settings: EngineSettings, message: str) -> None:
    with pytest.raises(BadInput, match=message) as error:
        validate(workload, settings)
    assert "\n" not in str(error.value)


def test_typed_texts_are_checked_against_the_prompt_cap_not_cut() -> None:
    check_prompt_chars(Workload(requests=2, prompts=("a" * 10, "b" * 10), prefix="s" * 9), max_chars=20)
    with pytest.raises(BadInput, match="^The system prompt is 21 characters; .* at most 20 ") as error:
        check_prompt_chars(Workload(prefix="s" * 21), max_chars=20)
    assert "\n" not in str(error.value)
    with pytest.raises(BadInput, match="^Prompt 2 with the system prompt is 21 characters"):
        check_prompt_chars(Workload(requests=2, prompts=("a", "b" * 11), prefix="s" * 9), max_chars=20)


def test_a_record_copies_its_request_from_the_plan() -> None:
    planned = PlannedRequest("r3", "text", (5, 6, 7), 2, 4, 0.25)
    record = RequestRecord.of(planned, arrival_s=0.3, start_s=0.4, token_times_s=[0.5, 0.6], token_ids=[9, 8])
    assert record == RequestRecord("r3", "text", (5, 6, 7), 2, 4, 0.3, 0.4, (0.5, 0.6), (9, 8), 3)
    assert (record.prefill_tokens_computed, record.prefix_tokens_reused) == (3, 0)  # the whole prompt computed


def test_parse_int_list() -> None:
    assert parse_int_list("32, 32,128", "x") == (32, 32, 128)
    with pytest.raises(BadInput, match="comma-separated"):
        parse_int_list("32,a", "--prompt-tokens")


def test_too_many_tokens_for_the_blocks(tiny_lm: LoadedModel) -> None:
    planned = plan_requests(tiny_lm, Workload(requests=3, prompt_tokens=(30,), new_tokens=(10,)))
    need = sum(-(-(len(r.prompt_token_ids) + 10) // 4) for r in planned)  # every request at its longest
    check_fits(tiny_lm, planned, EngineSettings(block_size=4, num_blocks=need))
    with pytest.raises(BadInput, match="Too many tokens for the KV blocks") as error:
        check_fits(tiny_lm, planned, EngineSettings(block_size=4, num_blocks=need - 1))
    assert f"need up to {need} blocks" in str(error.value)


def test_prompts_are_reproducible_raw_text(tiny_lm: LoadedModel) -> None:
    from explorer.core.engine import tokenize

    workload = Workload(requests=3, prompt_tokens=(20, 50), prefix="SYSTEM: be brief.")
    planned = plan_requests(tiny_lm, workload)
    assert [r.id for r in planned] == ["r0", "r1", "r2"]
    assert [r.arrival_s for r in planned] == [0.0, 0.1, 0.2]
    for r, target in zip(planned, (20, 50, 20)):
        assert r.prompt_text.startswith("SYSTEM: be brief.\n")
        assert list(r.prompt_token_ids) == tokenize(tiny_lm, r.prompt_text, use_chat_template=False)
        assert r.prefix_tokens == len("SYSTEM: be brief.")  # one byte, one token
        assert target - 8 <= len(r.prompt_token_ids) - len("SYSTEM: be brief.\n") <= target  # whole words only
    assert len({r.prompt_text for r in planned}) == 3  # every request its own text


# --- runs on the tiny model ------------------------------------------------------------------------------------------
TINY_SETTINGS = EngineSettings(token_budget=16, block_size=4, num_blocks=64)


@pytest.fixture(scope="module")
def tiny_run(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> ScheduleRun:
    workload = Workload(requests=3, prompt_tokens=(12, 40, 12), new_tokens=(8,), stagger_ms=0)
    return run_schedule(tiny_lm, cpu_figures, workload, TINY_SETTINGS, compare=True)


def test_every_request_gets_its_solo_greedy_tokens(tiny_run: ScheduleRun) -> None:
    assert tiny_run.checks and all(c.matches for c in tiny_run.checks)
    assert [len(r.token_ids) for r in tiny_run.requests] == [8, 8, 8]
    assert [m.mode for m in tiny_run.modes] == [CONTINUOUS, STATIC, SEQUENTIAL]
    for mode in tiny_run.modes:
        assert mode.all_tokens_match, mode.checks


def test_steps_account_for_every_token_within_the_budget(tiny_run: ScheduleRun) -> None:
    for r in tiny_run.requests:
        prefill = sum(e.prefill_tokens for s in tiny_run.steps for e in s.entries if e.request == r.id)
        decodes = sum(e.decode_tokens for s in tiny_run.steps for e in s.entries if e.request == r.id)
        assert prefill == r.prompt_len == r.prefill_tokens_computed
        assert decodes == len(r.token_ids) - 1  # the first token comes from the prefill's last position
        assert len(r.token_times_s) == len(r.token_ids)
    assert all(0 < s.tokens <= TINY_SETTINGS.token_budget for s in tiny_run.steps)
    assert [s.index for s in tiny_run.steps] == list(range(len(tiny_run.steps)))
    assert all(s.wall_s > 0 and s.start_s >= 0 for s in tiny_run.steps)
    assert all(a.end_s <= b.start_s for a, b in zip(tiny_run.steps, tiny_run.steps[1:]))


def test_a_long_prompt_is_chunked_and_shares_steps_with_decodes(tiny_run: ScheduleRun) -> None:
    long_steps = [s for s in tiny_run.steps for e in s.entries if e.request == "r1" and e.prefill_tokens]
    assert len(long_steps) >= 3  # 40 prompt tokens through a 16-token budget
    assert [e.chunk for s in long_steps for e in s.entries if e.request == "r1"] == list(range(1, len(long_steps) + 1))
    assert any(s.is_mixed and s.has_partial_prefill for s in long_steps)
    assert any(s.kind == "mixed" for s in tiny_run.steps)


def test_request_timings_add_up(tiny_run: ScheduleRun) -> None:
    for r in tiny_run.requests:
        assert r.arrival_s <= r.start_s <= r.first_token_s <= r.finish_s
        assert r.ttft_s == pytest.approx(r.queue_s + r.prefill_s)
        assert len(r.itl_s) == len(r.token_ids) - 1 and all(g >= 0 for g in r.itl_s)
        assert r.e2e_s == pytest.approx(r.finish_s - r.arrival_s)


def test_block_tables_follow_the_tokens(tiny_run: ScheduleRun) -> None:
    for s in tiny_run.steps:
        held = {b for h in s.holdings for b in h.blocks}
        assert s.free_blocks + s.cached_blocks + len(held) == tiny_run.engine_num_blocks == 64
        assert all(0 <= b < 64 for b in held)
        for h in s.holdings:
            assert len(h.blocks) == -(-h.tokens // 4)  # exactly enough 4-token blocks for its positions


def test_json_has_the_documented_shape(tiny_run: ScheduleRun) -> None:
    data = json.loads(tiny_run.to_json())
    step = data["steps"][0]
    assert {"wall_s", "entries"} <= set(step)
    assert {"request", "prefill_tokens", "decode_tokens"} <= set(step["entries"][0])
    request = data["requests"][0]
    assert {"id", "arrival_s", "ttft_s", "itl_s", "token_ids", "prompt_text", "prompt_token_ids"} <= set(request)
    assert request["token_ids"] == list(tiny_run.requests[0].token_ids)
    assert request["ttft_s"] == tiny_run.requests[0].ttft_s
    assert [m["mode"] for m in data["comparison"]] == [CONTINUOUS, STATIC, SEQUENTIAL]


def test_prefix_sharing_skips_the_prefix_prefill_and_keeps_the_tokens(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    prefix = "SYSTEM: you answer in one short line only."  # 42 bytes = 42 tokens = 10 whole 4-token blocks
    workload = Workload(requests=3, prompt_tokens=(10,), new_tokens=(4,), arrivals_ms=(0, 300, 600), prefix=prefix)
    handovers = []
    progress = LabProgress(lambda _fraction, _text: None, lambda: handovers.append(1))
    run = run_schedule(tiny_lm, cpu_figures, workload, TINY_SETTINGS, progress=progress)
    assert len(handovers) == 1 + 1 + 3  # after the engine's run, after the prefix-off run, after each solo run
    off = run.prefix_off
    assert off is not None and not off.settings.prefix_sharing
    assert [r.prefix_tokens_reused for r in run.requests] == [0, 40, 40]
    assert run.prefill_tokens_computed == off.prefill_tokens_computed - 2 * 40
    assert [r.token_ids for r in run.requests] == [r.token_ids for r in off.requests]
    assert all(c.matches for c in run.checks) and all(c.matches for c in off.checks)
    hits = [h for s in run.steps for h in s.prefix_hits]
    assert [(h.request, h.tokens, h.blocks) for h in hits] == [("r1", 40, 10), ("r2", 40, 10)]
    explanation = explain_sharing(run)
    assert explanation.kind == REUSED and explanation.sentence.startswith("20 blocks = 80 tokens reused, in whole")
    assert json.loads(run.to_json())["max_context"] == tiny_lm.info.max_context  # what the max-length line reserves


def sharing_workload(prefix: str, stagger_ms: float) -> Workload:
    return Workload(requests=3, prompt_tokens=(20,), new_tokens=(2,), stagger_ms=stagger_ms, prefix=prefix)


@pytest.mark.parametrize(
    ("workload", "settings", "kind", "words"),
    [
        # "Hi." and its newline: 4 shared tokens, under one 8-token block, however far apart the arrivals
        (
            sharing_workload("Hi.", 300),
            replace(TINY_SETTINGS, block_size=8),
            SHORTER_THAN_BLOCK,
            "fewer than one 8-token block",
        ),
        # 18 shared tokens, but all three prompts fit one 256-token step: nothing was hashed before they were scheduled
        (
            sharing_workload("SYSTEM: be brief.", 0),
            replace(TINY_SETTINGS, token_budget=256),
            SAME_STEP,
            "hashes a block only after",
        ),
    ],
)
def test_the_engine_run_names_why_no_prefill_was_saved(
    tiny_lm: LoadedModel,
    cpu_figures: DeviceProfile,
    workload: Workload,
    settings: EngineSettings,
    kind: str,
    words: str,
) -> None:
    run = run_schedule(tiny_lm, cpu_figures, workload, settings)
    explanation = explain_sharing(run)
    assert run.prefix_tokens_reused == 0 and explanation.kind == kind and words in explanation.sentence


def test_the_device_is_passed_on_only_between_measured_spans(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    """The engine's run, static batching and one at a time are each one wall-clock span: progress reports inside
    them only move the bar; the device is handed over only between them."""
    events: list[str] = []
    progress = LabProgress(lambda _fraction, text: events.append(text), lambda: events.append("HAND OVER"))
    workload = Workload(requests=2, prompt_tokens=(8, 20), new_tokens=(6,), stagger_ms=50)
    run = run_schedule(tiny_lm, cpu_figures, workload, TINY_SETTINGS, compare=True, progress=progress)
    handovers = [k for k, e in enumerate(events) if e == "HAND OVER"]
    assert len(handovers) == 2  # after the engine's run, after static batching; none inside any of them
    assert "Continuous batching" in events[handovers[0] - 1] and "Static batching" in events[handovers[1] - 1]
    assert all(not e.startswith(("Continuous", "Static")) for e in events[handovers[1] :])
    assert [m.mode for m in run.modes] == [CONTINUOUS, STATIC, SEQUENTIAL]


def test_a_token_that_differs_is_named_with_its_reason(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    from explorer.core.engine import Request, check_request, generate

    request = Request("abcdef", max_new_tokens=4, use_chat_template=False, stop_at_eos=False)
    trace = generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)
    runner_up = trace.passes[2].top_tokens[1]
    tokens = list(trace.generated_token_ids)
    tokens[2] = runner_up.token_id
    record = RequestRecord("r0", "abcdef", trace.prompt_token_ids, 0, 4, 0.0, 0.0, (0.1,) * 4, tuple(tokens), 6)
    check = baselines.check_one(record, trace, tiny_lm.tokenizer)
    assert not check.matches and check.position == 2
    assert (check.served_token, check.solo_token) == (runner_up.token_id, trace.generated_token_ids[2])
    assert "r0 token 2" in check.explanation and "probabilities" in check.explanation
    same = baselines.check_one(replace(record, token_ids=trace.generated_token_ids), trace, tiny_lm.tokenizer)
    assert same.matches and same.explanation == ""


# --- the command line ------------------------------------------------------------------------------------------------
def test_cli_schedule_writes_json(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = run_cli(
        "schedule",
        "--model",
        str(tiny_llama_dir),
        "--requests",
        "2",
        "--prompt-tokens",
        "8,20",
        "--new-tokens",
        "4",
        "--token-budget",
        "8",
        "--block-size",
        "4",
        "--json",
        str(tmp_path / "s.json"),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "s.json").read_text())
    assert [r["id"] for r in data["requests"]] == ["r0", "r1"]
    assert all(len(r["token_ids"]) == 4 for r in data["requests"])
    for needle in ("steps (measured", "mixed", "chunked", "same as solo", "run --no-chat-template"):
        assert needle in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--requests", "0"), "No requests"),
        (("--token-budget", "8"), "below one KV block"),
        (("--requests", "3", "--arrivals-ms", "0,50,10"), "out of order"),
        (("--prompt-tokens", "12,x"), "comma-separated"),
    ],
)
def test_cli_bad_input_is_one_line(args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from explorer.cli.main import main

    assert main(["schedule", *args]) == 2  # refused before any model loads
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


# --- the embedded model ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_default_workload_on_the_embedded_model(real_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    """The issue's correctness claim: each request's greedy tokens equal the explorer's solo run (same dtype)."""
    run = run_schedule(real_lm, cpu_figures, Workload(), EngineSettings())
    assert [c.matches for c in run.checks] == [True] * 6, [c.explanation for c in run.checks]
    assert any(s.is_mixed for s in run.steps)
    assert any(s.has_partial_prefill for s in run.steps)  # the 128-token prompt through a 64-token budget
    assert run.prefill_tokens_computed == sum(r.prompt_len for r in run.requests)


# --- the page --------------------------------------------------------------------------------------------------------
PAGE = "pages/scheduling.py"
APP_TIMEOUT_S = 240  # a first run measures the device and warms the engine


def by_label(elements: object, label: str) -> object:
    return next(e for e in elements if e.label == label)


def test_the_scheduling_page_renders_after_a_small_run(tiny_llama_dir: Path, fresh_device_owner: OwnersOfATest) -> None:
    from streamlit.testing.v1 import AppTest

    from explorer.ui.state import ITL_SLO_MS

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=APP_TIMEOUT_S)
    at.run()
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(
        model=str(tiny_llama_dir), device="cpu"
    )  # labs use this model
    at.switch_page(PAGE).run()
    assert not at.exception
    assert any("No scheduling run yet" in i.value for i in at.info)
    by_label(at.main.number_input, "Requests").set_value(3)
    by_label(at.main.text_input, "Prompt tokens (cycled over the requests)").input("8,24")
    by_label(at.main.text_input, "New tokens (cycled)").input("4")
    by_label(at.main.number_input, "Arrivals every (ms)").set_value(150.0)
    by_label(at.main.number_input, "Token budget per step").set_value(8)
    by_label(at.main.number_input, "KV block size (tokens)").set_value(4)
    by_label(at.main.number_input, "KV blocks").set_value(64)
    by_label(at.main.toggle, "Shared system prompt").set_value(True)
    by_label(at.main.text_area, "System prompt").input("SYSTEM: be brief, <b>kind</b> **and** exact.")
    by_label(at.main.text_input, "Arrival times (ms, optional)").input("0, 0, 150")
    by_label(at.main.text_area, "Prompt texts (optional, one per line)").input("The sea.\n\nA long walk home.\nTea?")
    by_label(at.main.button, "Run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]

    run = at.session_state[RUN_KEY]
    assert len(run.requests) == 3 and all(c.matches for c in run.checks)
    assert [m.mode for m in run.modes] == [CONTINUOUS, STATIC, SEQUENTIAL] and run.prefix_off is not None
    assert run.workload.arrivals_ms == (0.0, 0.0, 150.0)
    assert [r.prompt_text.split("\n")[-1] for r in run.requests] == ["The sea.", "A long walk home.", "Tea?"]
    charts = len(at.get("vega_lite_chart"))
    assert charts == 9  # steps, timeline, blocks, memory, 3 comparisons (tokens/s, TTFT, ITL), 2 prefix
    downloads = [b.label for b in at.main.get("download_button")]
    assert downloads.count("PNG") == downloads.count("SVG") == charts  # beside each chart's CSV
    per_request = next(d.value for d in at.dataframe if {"request", "mode", "ITL p99 (ms)"} <= set(d.value.columns))
    assert len(per_request) == 9 and per_request["ITL p50 (ms)"].notna().all()  # human labels with units
    captions = " ".join(c.value for c in at.caption)
    assert "measured" in captions and "modelled" in captions
    assert paging_sentence(run) in captions and "Primary, what PagedAttention's saving is measured" in captions
    assert explain_sharing(run).sentence in captions  # the cause computed from this run, beside the prefix chart
    modes_table = next(d.value for d in at.dataframe if "tokens/s" in d.value.columns)
    assert list(modes_table["mode"]) == [CONTINUOUS, STATIC, SEQUENTIAL]
    for element in at.markdown:  # the prefix is shown only as data, never interpreted
        assert "<b>" not in element.value and "**and**" not in element.value

    owner = fresh_device_owner.owner()
    assert [turn.what for turn in owner.queue.turns] == ["lab"]  # served on the device owner, in one turn
    lm = owner.models[(str(tiny_llama_dir), "cpu", "float32")]
    calls = []
    handle = lm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        at.switch_page("pages/latency.py").run()
        at.session_state[ITL_SLO_MS] = 1e-3  # as if set on the Latency page: no ITL can pass now
        at.switch_page(PAGE).run()  # the SLO change only re-reads the stored run
    finally:
        handle.remove()
    assert not at.exception and calls == []
    assert at.session_state[RUN_KEY] is run
    latency = next(d.value for d in at.dataframe if "ITL p99 within SLO" in d.value.columns)
    assert set(latency["ITL p99 within SLO"]) == {"no"}  # shown as a person reads it: yes/no


@pytest.mark.parametrize(
    ("field", "kind", "value", "message"),
    [
        ("Token budget per step", "number_input", 8, "below one KV block"),  # below the 16-token block
        ("Arrival times (ms, optional)", "text_input", "0, 200, 100, 300, 400, 500", "out of order"),
        ("Arrival times (ms, optional)", "text_input", "0, 100", "2 arrival times for 6 requests"),
        ("Prompt texts (optional, one per line)", "text_area", "one\ntwo", "2 prompt texts for 6 requests"),
        ("System prompt", "text_area", "s" * 20_001, "The system prompt is 20,001 characters"),
    ],
)
def test_bad_workload_on_the_page_is_one_line(field: str, kind: str, value: object, message: str) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=APP_TIMEOUT_S)
    at.run()
    at.switch_page(PAGE).run()
    by_label(at.main.toggle, "Shared system prompt").set_value(True)
    widget = by_label(getattr(at.main, kind), field)
    widget.set_value(value) if kind == "number_input" else widget.input(value)
    by_label(at.main.button, "Run").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0], errors
    assert RUN_KEY not in at.session_state


# --- a model with sliding-window layers ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gemma3-text", "mistral-sliding"])
def test_paging_and_reservations_follow_each_layers_window(
    name: str, tmp_path: Path, cpu_figures: DeviceProfile
) -> None:
    """Gemma 3 (2 sliding layers, 1 full) pages its full layers' blocks apart from its sliding layers' pages; Mistral
    with a window pages only sliding layers. Every figure counts each layer's own positions: a sliding layer keeps at
    most window - 1, so a contiguous reservation of the maximum length holds that, not every layer at every position."""
    from explorer.labs.schedule.paging import memory_steps
    from tests.tiny_zoo import BY_NAME, WINDOW, save_tiny

    lm = load_model(str(save_tiny(BY_NAME[name], tmp_path / name)), device="cpu")
    m = lm.info
    workload = Workload(requests=3, prompt_tokens=(12, 40, 12), new_tokens=(8,), stagger_ms=0)
    run = run_schedule(lm, cpu_figures, workload, TINY_SETTINGS)
    assert run.layer_windows == m.windows and run.kv_bytes_per_token_per_layer == m.kv_bytes_per_token_per_layer
    assert run.block_bytes == 4 * m.kv_bytes_per_token_per_layer * (m.full_layers or m.layers)
    per_request = (m.full_layers * m.max_context + m.sliding_layers * (WINDOW - 1)) * m.kv_bytes_per_token_per_layer
    assert run.kv_bytes_for(m.max_context) == per_request < m.max_context * m.kv_bytes_per_token
    for s, memory in zip(run.steps, memory_steps(run)):
        assert memory.paged_bytes == s.blocks_held * run.block_bytes + s.other_groups_bytes
        assert memory.max_length_bytes == len(s.holdings) * per_request
        assert (s.other_groups_bytes > 0) == (m.full_layers > 0 and bool(s.holdings))  # a hybrid's sliding pages
    assert run.served.all_tokens_match
    assert f"the {m.sliding_layers} sliding-window layers (window {WINDOW})" in paging_sentence(run)
    assert ScheduleRun.from_json(run.to_json()) == run


def test_a_schedule_run_from_before_the_per_layer_fields_loads_as_every_layer_full(tiny_run: ScheduleRun) -> None:
    data = json.loads(tiny_run.to_json())
    for key in ("layer_windows", "kv_bytes_per_token_per_layer", "recorded_block_bytes"):
        data.pop(key)
    old = ScheduleRun.from_dict(data)
    assert old == tiny_run and old.block_bytes == 4 * tiny_run.kv_bytes_per_token
    assert old.kv_bytes_for(10) == 10 * tiny_run.kv_bytes_per_token
