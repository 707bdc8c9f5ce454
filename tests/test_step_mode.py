"""Step mode: one real pass per step gives a normal run's tokens, grows the cache one position at a time, frees it."""

from __future__ import annotations

import threading
from pathlib import Path
from unittest import mock

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.beside import Beside
from explorer.core.engine import Request, check_request
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Sampling
from explorer.hosting import server_session as hosting_session
from explorer.hosting.step_mode_requests import IDLE_TIMEOUT_S, LiveSteps
from explorer.hosting.warm import Warmer
from explorer.labs.step_mode import SteppedRequest
from explorer.ui import admission, step_mode
from explorer.ui import device_turn as ui_queue
from explorer.ui import state as ui_state
from explorer.ui.shared import server_session
from tests.apptest_support import (  # noqa: F401 - the fixture patches AppTest's pages
    HELD_AFTER_SOMEONE_WAITS_S,
    navigation_like_a_server,
    new_app,
    release_once_someone_waits,
)
from tests.test_hosted import device_held_elsewhere
from tests.test_warm import WAIT_S, tiny_target, warming_app  # noqa: F401 - fixtures: warming on, at the tiny model


def test_a_stepped_request_is_a_normal_run(tiny_lm: LoadedModel) -> None:
    request = Request("hello", max_new_tokens=5, use_chat_template=False)
    stepped = SteppedRequest.start(tiny_lm, check_request(tiny_lm, request))
    per_token = tiny_lm.info.kv_bytes_per_token
    first = stepped.step()
    assert first.is_prefill and first.kv_cache_bytes == first.tokens_in * per_token
    while not stepped.done:
        before = stepped.passes[-1].kv_cache_bytes
        assert stepped.step().kv_cache_bytes == before + per_token  # exactly one position per decode step
    trace = stepped.to_trace()
    assert trace.generated_token_ids == measure(tiny_lm, request).generated_token_ids
    maps = stepped.attention()
    assert maps.same_tokens_as(trace) and len(maps.decode[0]) == 4
    stepped.free()
    assert stepped.freed and stepped.replay.cache is None


def step_page_on(model_dir: Path, sampling: Sampling | None = None) -> AppTest:
    """The step page of a new visitor whose sidebar's last run was on `model_dir`."""
    at: AppTest = new_app()
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(
        model=str(model_dir), device="cpu", sampling=sampling or Sampling()
    )
    return at.switch_page("pages/step.py").run()


def prefill_on_the_step_page(
    model_dir: Path, prompt: str, sampling: Sampling | None = None, max_new_tokens: int = 16
) -> AppTest:
    """The step page after Prefill, on `model_dir` with the sidebar's `sampling`, no chat template (as the CLI's
    --no-chat-template)."""
    at = step_page_on(model_dir, sampling)
    at.text_input(key="step-prompt").input(prompt)
    at.number_input(key="step-new-tokens").set_value(max_new_tokens)
    at.toggle(key="step-template").set_value(False)
    at.button(key="step-prefill").click().run()
    assert not at.exception, at.exception
    return at


def test_the_step_page_steps_one_pass_per_click_and_resets(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there", max_new_tokens=6)
    assert not at.error, [e.value for e in at.error]
    sizes = [at.session_state[step_mode.STEPPED].passes[-1].kv_cache_bytes]
    for _ in range(3):
        at.button(key="step-next").click().run()
        assert not at.exception
        sizes.append(at.session_state[step_mode.STEPPED].passes[-1].kv_cache_bytes)
    stepped = at.session_state[step_mode.STEPPED]
    assert len(stepped.passes) == 4
    assert [b - a for a, b in zip(sizes, sizes[1:])] == [tiny_lm.info.kv_bytes_per_token] * 3
    expected = measure(tiny_lm, Request("hi there", max_new_tokens=6, use_chat_template=False)).generated_token_ids
    assert tuple(p.token_id for p in stepped.passes) == expected[:4]
    # attention rows, the newest enlarged, KV growth, KV per layer, ITL of the passes so far, pass times
    assert chart_names(at) == [
        "step-attention",
        "step-newest-rows",
        "step-kv",
        "step-kv-layers",
        "step-itl",
        "step-times",
    ]
    assert at.button(key="step-next").proto.shortcut == "right" and at.button(key="step-reset").proto.shortcut == "home"
    at.button(key="step-end").click().run()  # finishes: the stepped request becomes the current run
    assert at.session_state[ui_state.RUN].trace.generated_token_ids == expected
    assert at.session_state[ui_state.RUN].attention is not None
    assert stepped.freed and stepped.replay.cache is None  # done: both caches freed, the trace and maps kept
    at.button(key="step-reset").click().run()
    assert step_mode.STEPPED not in at.session_state  # the session holds no cache tensors any more
    assert stepped.freed


@pytest.mark.parametrize("prompt", [""])
def test_an_empty_prompt_is_one_line_and_nothing_steps(tiny_llama_dir: Path, prompt: str) -> None:
    at: AppTest = new_app()
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(model=str(tiny_llama_dir), device="cpu")
    at.switch_page("pages/step.py").run()
    at.text_input(key="step-prompt").input(prompt)
    at.button(key="step-prefill").click().run()
    assert not at.exception and any("empty" in e.value for e in at.error)
    assert step_mode.STEPPED not in at.session_state


def test_the_prefill_shows_the_cache_it_wrote_per_layer(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there")
    assert (
        "step-itl" not in chart_names(at) and len(chart_names(at)) == 5
    )  # no ITL after the prefill alone: a line says so
    assert any("no inter-token latency yet" in i.value for i in at.info)
    assert any("What the prefill wrote: 8 positions in every layer" in c.value for c in at.caption)


def test_a_stepped_request_follows_the_sidebars_sampling(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    sampling = Sampling(temperature=0.8, top_k=20, seed=7)
    at = prefill_on_the_step_page(tiny_llama_dir, "hello", sampling)
    at.button(key="step-end").click().run()
    assert not at.error, [e.value for e in at.error]
    trace = at.session_state[ui_state.RUN].trace
    assert trace.sampling == sampling
    request = Request("hello", max_new_tokens=16, use_chat_template=False, sampling=sampling)
    assert trace.generated_token_ids == measure(tiny_lm, request).generated_token_ids  # seeded: the same tokens


def test_run_to_end_stops_when_a_step_is_refused(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    monkeypatch.setenv("EXPLORER_MAX_WAIT_S", "1")
    with device_held_elsewhere(leap_s=ui_queue.POLL_S):
        at.button(key="step-end").click().run(timeout=60)  # used to loop for ever: each refused step ran nothing
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and "Waited 1 s for the device" in errors[0], errors
    stepped = at.session_state[step_mode.STEPPED]
    assert len(stepped.passes) == 1 and not stepped.freed  # refused in line: the request is as it was


def test_a_failed_step_is_one_line_without_server_details_and_frees_the_cache(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    stepped = at.session_state[step_mode.STEPPED]
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    monkeypatch.setenv("EXPLORER_ALLOWED_MODELS", str(tiny_llama_dir))
    broken = OSError(2, "No such file or directory", "/srv/explorer/secret/weights.bin")
    with mock.patch.object(SteppedRequest, "step", side_effect=broken):
        at.button(key="step-next").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "FileNotFoundError" in errors[0] and "secret" not in errors[0], errors
    assert step_mode.STEPPED not in at.session_state and stepped.freed


@pytest.mark.parametrize(
    ("method", "failure", "said"),
    [
        (
            "step",
            RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            "Step mode's prefill failed: RuntimeError: CUDA out of memory",
        ),
        ("start", BadInput("The attention maps would need 9 GiB: try a shorter prompt."), "would need 9 GiB"),
    ],
)
def test_a_failed_prefill_stays_on_screen_and_leaves_the_form_usable(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, method: str, failure: Exception, said: str
) -> None:
    with mock.patch.object(SteppedRequest, method, side_effect=failure):
        at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and said in errors[0], errors  # not wiped by a rerun
    assert step_mode.STEPPED not in at.session_state  # no request without a pass is kept
    prefill = at.button(key="step-prefill")
    assert prefill.label == "Prefill" and not prefill.disabled and not at.text_input(key="step-prompt").disabled
    assert at.button(key="step-next").disabled
    prefill.click().run()  # the same form, pressed again, now runs
    assert not at.error and len(at.session_state[step_mode.STEPPED].passes) == 1


def test_starting_a_stepped_request_counts_against_the_rate_limit(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    monkeypatch.setenv("EXPLORER_ALLOWED_MODELS", str(tiny_llama_dir))
    monkeypatch.setenv("EXPLORER_RUNS_PER_MINUTE", "1")
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    assert not at.error, [e.value for e in at.error]
    at.button(key="step-reset").click().run()
    at.button(key="step-prefill").click().run()  # Prefill again, within the same minute
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and "1 runs per minute per visitor" in errors[0], errors
    assert step_mode.STEPPED not in at.session_state


def test_the_sweep_frees_only_requests_left_idle(tiny_lm: LoadedModel) -> None:
    steps, now_s = LiveSteps(), [0.0]  # the default idle timeout, on a clock the test moves
    idle, busy = (
        SteppedRequest.start(
            tiny_lm,
            check_request(tiny_lm, Request(p, max_new_tokens=4, use_chat_template=False)),
            idle_clock=lambda: now_s[0],
        )
        for p in "ab"
    )
    for request in (idle, busy):
        steps.add(request)
        request.step()
    now_s[0] += IDLE_TIMEOUT_S  # exactly the timeout: not yet past it
    assert steps.sweep() == 0
    now_s[0] += 1.0
    busy.step()  # touched again: not idle
    assert steps.sweep() == 1
    assert idle.freed and idle.live.cache is None and idle.replay.cache is None
    assert not busy.freed and not idle.claim() and busy.claim()
    del idle
    assert len(steps.requests) == 1  # held weakly: a session that ends takes its request with it


def test_another_sessions_script_run_frees_an_idle_stepped_request(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    stepped = at.session_state[step_mode.STEPPED]
    stepped.last_used_s -= IDLE_TIMEOUT_S + 1  # as if its owner had walked away
    new_app()  # any other session's script run sweeps, without the owner coming back
    assert stepped.freed
    at.run()
    assert step_mode.STEPPED not in at.session_state
    assert any("idle for over" in i.value for i in at.info)


def test_autoplay_that_finishes_redraws_the_buttons(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi", max_new_tokens=2)  # one pass of two
    at.toggle(key="step-autoplay").set_value(True).run()  # the second pass finishes the request
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state[step_mode.STEPPED].done
    assert at.button(key="step-next").disabled and at.button(key="step-end").disabled  # drawn after it finished


def test_autoplay_goes_off_when_the_request_ends(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    """Autoplay switched on, then the request finished another way (Run to end): the switch is off, not left on and
    greyed out."""
    at = prefill_on_the_step_page(tiny_llama_dir, "hi", max_new_tokens=4)
    at.toggle(key="step-autoplay").set_value(True).run()  # one pass more, the request still under way
    assert not at.session_state[step_mode.STEPPED].done and at.toggle(key="step-autoplay").value
    at.button(key="step-end").click().run()
    assert at.session_state[step_mode.STEPPED].done
    at.run()  # the next script run, as any click makes
    autoplay = at.toggle(key="step-autoplay")
    assert autoplay.disabled and not autoplay.value, (autoplay.disabled, autoplay.value)


# --- Prefill while it has to wait (issue 23): the waiting UI is drawn outside the form ------------------------------
def press_prefill(at: AppTest, prompt: str) -> AppTest:
    at.text_input(key="step-prompt").input(prompt)
    at.number_input(key="step-new-tokens").set_value(4)
    at.toggle(key="step-template").set_value(False)
    return at.button(key="step-prefill").click().run()


def assert_first_pass_without_error(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.session_state[step_mode.STEPPED].passes) == 1
    prompt = at.text_input(key="step-prompt")
    assert prompt.value == "hi there" and prompt.disabled  # the locked form shows what stepped


def test_a_prefill_while_another_session_holds_the_device_waits_then_runs(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    real_line = ui_queue.queued_line
    monkeypatch.setattr(ui_queue, "queued_line", lambda *a: said.append(real_line(*a)) or said[-1])
    at = step_page_on(tiny_llama_dir)
    queue = server_session().queue
    other = queue.enter("run", owner="other session")
    assert queue.wait(other, 30)
    releaser = release_once_someone_waits(queue, other)  # the other session's run ends once this one waits
    try:
        press_prefill(at, "hi there")
    finally:
        releaser.join()
    assert_first_pass_without_error(at)
    assert said and said[0].startswith("Queued: ")  # it said its place in one short line while it waited (issue 42)
    start = next(t for t in queue.turns if t.what == "prefill" and t.number > other.number)
    assert start.waited_s >= HELD_AFTER_SOMEONE_WAITS_S  # its turn came when the other session's ended


@pytest.mark.usefixtures("warming_app")
def test_a_prefill_while_the_server_warms_up_waits_then_runs(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_load, real_wait = hosting_session.load_model, admission.wait_for_warming
    prefill_waits, seen = threading.Event(), list[str]()

    def slow(name: str, *args: object, **kwargs: object) -> object:
        prefill_waits.wait(WAIT_S)  # warming is still under way when Prefill is pressed: it ends once Prefill waits
        return real_load(name, *args, **kwargs)

    def waiting(warmer: Warmer) -> None:
        seen.append(warmer.status().state)
        prefill_waits.set()
        real_wait(warmer)

    monkeypatch.setattr(hosting_session, "load_model", slow)
    monkeypatch.setattr(admission, "wait_for_warming", waiting)
    at = step_page_on(tiny_llama_dir)  # its first script run started warming, as a server's start does
    assert server_session().warmer.status().state == "warming"
    press_prefill(at, "hi there")
    assert_first_pass_without_error(at)
    assert seen == ["warming"]  # Prefill came to the wait while warming was under way
    assert server_session().warmer.status().state == "warm"
    turns = server_session().queue.turns
    warm = next(t for t in turns if t.what == "warm-up")
    step = next(t for t in turns if t.what == "prefill" and t.number > warm.number)
    assert step.granted_unix_s >= warm.released_unix_s  # the prefill's turn came once warming had ended


def chart_names(at: AppTest) -> list[str]:
    """The page's charts by their data download's label ("Download data: NAME.csv"), in the order they are drawn."""
    labels = [b.proto.label for b in at.get("download_button")]
    return [label.removeprefix("Download data: ").removesuffix(".csv") for label in labels if label.endswith(".csv")]


def test_presenting_the_step_page_puts_the_newest_pass_its_row_and_the_kv_growth_first(
    tiny_llama_dir: Path, tiny_lm: LoadedModel
) -> None:
    """Presenting, after Prefill: the newest pass's line, then the newest rows of the map and the KV growth before
    anything else of the request, the locked prompt folded into an expander that names it (the browser tests measure
    that they sit in the first screen)."""
    from explorer.ui.presenter import PRESENTER_ON

    at: AppTest = new_app()
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(model=str(tiny_llama_dir), device="cpu")
    at.session_state[PRESENTER_ON] = True
    at = press_prefill(at.switch_page("pages/step.py").run(), "hi there")
    assert not at.exception, at.exception
    assert at.main.expander[0].label == "Prompt: hi there" and at.text_input(key="step-prompt").value == "hi there"
    assert chart_names(at)[:2] == ["step-newest-rows", "step-kv"]
    first = at.main.get("markdown")
    assert any(m.value.startswith("**Pass 0** · prefill of 8 tokens → ") for m in first), [m.value for m in first]
    laptop = prefill_on_the_step_page(tiny_llama_dir, "hi there")  # on a laptop: the form open, as before
    assert not laptop.main.expander and "step-attention" in chart_names(laptop)


# --- a pass timed while other work ran beside it is marked, never shown clean (issue 30) ---------------------------
@pytest.fixture
def everything_disturbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timed pass of the server finds a second of other work's CPU beside it."""
    from explorer.hosting import quiet

    monkeypatch.setattr(quiet, "beside", lambda _before, _after: Beside(other_threads_s=1.0, other_processes_s=0.0))


@pytest.mark.usefixtures("everything_disturbed")
def test_a_disturbed_step_is_marked_on_its_line_its_itl_bar_and_in_its_trace(
    tiny_llama_dir: Path, tiny_lm: LoadedModel
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there")
    at.button(key="step-next").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    lines = [m.value for m in at.main.get("markdown") if m.value.startswith("**Pass 1**")]
    assert len(lines) == 1 and lines[0].endswith("(measured) ⚠ disturbed"), lines
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("Disturbed: 2 of 2 passes (passes 0, 1) were timed while other work") for w in warnings)
    stepped = at.session_state[step_mode.STEPPED]
    assert [p.beside_cpu_s for p in stepped.passes] == [1.0, 1.0] and all(p.disturbed for p in stepped.passes)


@pytest.mark.usefixtures("everything_disturbed")
def test_a_disturbed_run_says_so_on_every_page_that_shows_it(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    at = new_app()
    at.sidebar.text_area(key="sidebar-prompt").input("hi there")
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(3)
    next(t for t in at.sidebar.text_input if t.label == "Model").input(str(tiny_llama_dir))
    next(b for b in at.sidebar.button if b.label == "Run").click().run()
    assert not at.exception, at.exception
    trace = at.session_state[ui_state.RUN].trace
    assert [p.beside_cpu_s for p in trace.passes] == [1.0] * 3  # each pass its own interval, in the trace JSON too
    assert any("Disturbed: 3 of 3 passes" in w.value for w in at.warning)
    at.switch_page("pages/latency.py").run()
    assert any(c.value.startswith("⚠ Disturbed: 3 of 3 passes") for c in at.caption)
