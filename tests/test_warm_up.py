"""The first run timed right: the warm-up runs the request's own shapes (its prompt length, its decodes) on its own
decode path unless the loaded model has run them, and a CPU's repeat 0 lies within the spread of the later repeats.

On this 2-core CPU, repeat 0 was not slow on the old warm-up either (8 prompt tokens and 2 decodes: decode medians of
repeat 0 within the later repeats' in every trial, under load); the GPU suite checks the 3x slow first repeat the old
warm-up left on CUDA (tests/gpu/test_gpu_graphs.py). Here the mechanism is asserted: which passes the warm-up ran."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from explorer.core import engine
from explorer.core.device import FiguresStore
from explorer.core.engine import Request, check_request, warm_up_shapes
from explorer.core.lab_progress import silent
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import DeviceProfile
from explorer.core.warm_shapes import RequestShape, WarmShapes, WarmUpPlan
from explorer.hosting.quiet import WARM_WITHIN_S, PassGate
from explorer.labs.step_mode import SteppedRequest
from explorer.models.loading import load_model
from explorer.ui.runner import prepare_for_run

PROMPT = "The history of the printing press in Europe"
REPEAT0_TOLERANCE = 1.5  # repeat 0's median decode pass at most this many times the slowest later repeat's median


@pytest.fixture
def fresh_lm(tiny_llama_dir: Path) -> LoadedModel:
    """The tiny model loaded afresh: a new record of the shapes it has run."""
    return load_model(str(tiny_llama_dir), device="cpu", dtype="float32")


def forwards_seen(lm: LoadedModel) -> list[int]:
    """The query length of every forward of `lm`'s model from now on (T for a prefill, 1 for a decode)."""
    seen: list[int] = []

    def note(_module: torch.nn.Module, _args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        seen.append(int(kwargs["input_ids"].shape[-1]))  # type: ignore[union-attr]

    lm.model.register_forward_pre_hook(note, with_kwargs=True)
    return seen


def test_the_warm_up_runs_the_requests_prompt_length_before_the_timed_passes(fresh_lm: LoadedModel) -> None:
    seen = forwards_seen(fresh_lm)
    request = Request(PROMPT, max_new_tokens=6, use_chat_template=False, stop_at_eos=False)
    trace = measure(fresh_lm, request)
    prompt = trace.prompt_len
    assert prompt != engine.WARMUP_PROMPT_TOKENS
    short = [engine.WARMUP_PROMPT_TOKENS, 1, 1]  # the first forwards of a process: kernel set-up
    shapes = [prompt, 1, 1]  # the request's own prefill, then its first decodes (a CPU's; every one on a GPU)
    assert seen == short + shapes + [prompt] + [1] * 5  # then the timed passes
    seen.clear()
    measure(fresh_lm, request)  # the same shapes again: only the short warm-up runs before the timed passes
    assert seen == short + [prompt] + [1] * 5


def test_on_a_gpu_the_warm_up_decodes_to_the_last_cache_length_and_stops_where_the_run_will(
    fresh_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(engine.SHAPE_DECODES_WARMED, "cpu", 4096)  # what the GPU's policy asks for, run here
    checked = check_request(fresh_lm, Request(PROMPT, max_new_tokens=6, use_chat_template=False, stop_at_eos=False))
    assert warm_up_shapes(fresh_lm, checked) == 5  # every decode: cache lengths prompt+1 .. prompt+5
    assert warm_up_shapes(fresh_lm, checked) == 0  # already run
    greedy = measure(fresh_lm, checked).generated_token_ids
    ends = replace(fresh_lm, eos_token_ids=frozenset({greedy[2]}), warmed=WarmShapes())
    stopping = check_request(ends, Request(PROMPT, max_new_tokens=6, use_chat_template=False))
    assert greedy[2] not in greedy[:2]
    assert warm_up_shapes(ends, stopping) == 2  # greedy: the run stops at its third token, and so does the warm-up


def test_step_mode_warms_each_timed_pass_with_a_twin_of_its_own_shape(fresh_lm: LoadedModel) -> None:
    """No generic warm-up at the start: the prefill click runs an untimed prefill of the prompt's length right before
    the timed one, and a decode click (the device may have been idle since the last click) an untimed decode first."""
    seen = forwards_seen(fresh_lm)
    checked = check_request(fresh_lm, Request(PROMPT, max_new_tokens=4, use_chat_template=False))
    stepped = SteppedRequest.start(fresh_lm, checked)
    try:
        assert seen == []
        stepped.step()
        T = len(checked.prompt_ids)
        assert seen[:2] == [T, T], seen
        before = len(seen)
        stepped.step()
        assert seen[before : before + 2] == [1, 1], seen
    finally:
        stepped.free()


def test_a_run_right_after_another_sessions_passes_goes_without_its_warm_up(
    fresh_lm: LoadedModel, figures: FiguresStore
) -> None:
    """A Run's turn (ui.runner.prepare_for_run): with the device at work a moment ago, only its figures; once the
    device has been idle past WARM_WITHIN_S, or with no server's gate (one person's app), its warm-up passes too."""
    now = [100.0]
    gate = PassGate(clock=lambda: now[0])
    seen = forwards_seen(fresh_lm)
    gate.worked()  # another session's pass just ended
    warm = prepare_for_run(fresh_lm, figures, gate, silent)
    assert seen == [] and warm == figures.get("cpu", "float32")
    # Its own prompt length, never run in this process, needs no warm-up either on a CPU left warm: there a new
    # length's first prefill took what its second did (engine.warm_up_shapes).
    checked = check_request(fresh_lm, Request(PROMPT + " at a length of its own", max_new_tokens=3))
    prepare_for_run(fresh_lm, figures, gate, silent, checked)
    assert seen == []
    assert warm_up_shapes(fresh_lm, checked) == engine.WARMUP_DECODES  # the same shapes, the device not known warm
    now[0] += WARM_WITHIN_S + 1
    for idle_or_alone in (gate, None):
        before = len(seen)
        assert prepare_for_run(fresh_lm, figures, idle_or_alone, silent) == warm
        assert seen[before:] == [engine.WARMUP_PROMPT_TOKENS] + [1] * engine.WARMUP_DECODES  # the generic warm-up


def test_repeat_0_is_within_the_spread_of_the_later_repeats(tiny_llama_dir: Path) -> None:
    """Medians of the decode passes, repeat by repeat, on a model no run has warmed before: robust to a few slow
    passes on a loaded 2-core machine, where single passes jump by several times. A burst of other work can still
    land on one repeat of ~40 ms, so a second fresh model gets one more trial: a cold first repeat (what the warm-up
    exists to prevent) is slow in every trial, a burst in one."""
    request = Request(PROMPT, max_new_tokens=24, use_chat_template=False, stop_at_eos=False, repeats=5)
    trials = []
    for _ in range(2):
        trace = measure(load_model(str(tiny_llama_dir), device="cpu", dtype="float32"), request)
        medians = [statistics.median(p.wall_s for p in passes[1:]) for passes in trace.repeats]
        trials.append([f"{m * 1e3:.2f} ms" for m in medians])
        if medians[0] <= REPEAT0_TOLERANCE * max(medians[1:]):
            return
    pytest.fail(f"repeat 0 slower than {REPEAT0_TOLERANCE}x the later repeats in every trial: {trials}")


def test_what_ran_is_remembered_per_path_and_forgotten_when_the_allocator_gives_memory_back() -> None:
    warmed = WarmShapes()
    shape = RequestShape("graph", 1, 256, prompt_tokens=40, new_tokens=10)
    assert warmed.plan(shape, 4096) == WarmUpPlan(prefill=True, decodes=9)
    warmed.ran(shape, 9, reserved_bytes=1000)
    assert warmed.plan(shape, 4096, reserved_bytes=1000).nothing
    assert warmed.plan(replace(shape, new_tokens=5), 4096, 1000).nothing  # shorter: every length already decoded
    assert warmed.plan(replace(shape, prompt_tokens=30), 4096, 1000) == WarmUpPlan(prefill=True, decodes=0)
    assert warmed.plan(replace(shape, new_tokens=20), 4096, 1000) == WarmUpPlan(prefill=True, decodes=19)
    assert warmed.plan(replace(shape, decode_path="eager", capacity=None), 4096, 1000).decodes == 9  # its own path
    assert warmed.plan(shape, 4096, reserved_bytes=999) == WarmUpPlan(prefill=True, decodes=9)  # blocks given back


def test_the_benchmark_and_the_labs_warm_up_before_their_timed_passes(
    fresh_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    """`generate()` (the benchmark's and the no-cache lab's loop) and the batching lab's `run_batched` run the
    request's shapes first when no entry point did."""
    from explorer.core.batched import run_batched
    from explorer.core.engine import generate

    seen = forwards_seen(fresh_lm)
    checked = check_request(fresh_lm, Request(PROMPT, max_new_tokens=3, use_chat_template=False))
    generate(fresh_lm, checked, cpu_figures)
    prompt = len(checked.prompt_ids)
    assert seen == [prompt, 1, 1] + [prompt, 1, 1]
    seen.clear()
    rows = [list(checked.prompt_ids)] * 2
    run_batched(fresh_lm, cpu_figures, rows, 3)
    assert seen == [prompt, 1, 1] + [prompt, 1, 1]  # batch 2: a shape of its own
