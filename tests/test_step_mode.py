"""Step mode: one real pass per step gives a normal run's tokens, grows the cache one position at a time, frees it.
The stepped request lives in the device owner (`explorer.owner.steps`): owner-level tests send its jobs through
`OwnerClient`, page tests click the Step page (AppTest), which sends them through the test's own owner."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.engine import Request, check_request
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Sampling
from explorer.hosting.client import Event, OwnerClient
from explorer.labs.step_mode import SteppedRequest
from explorer.labs.stepped_view import GONE, SteppedView
from explorer.owner.job import TICK_S
from explorer.owner.state import Owner
from explorer.owner.steps import IDLE_TIMEOUT_S
from explorer.ui import device_link as ui_link
from explorer.ui import state as ui_state
from explorer.ui import step_mode, step_mode_view
from tests.apptest_support import (  # noqa: F401 - the fixture patches AppTest's pages
    HELD_AFTER_SOMEONE_WAITS_S,
    navigation_like_a_server,
    new_app,
    release_once_someone_waits,
)
from tests.owner_support import OwnerInThread, OwnersOfATest
from tests.test_hosted import device_held_elsewhere


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


# --- the owner's jobs, through its own protocol -----------------------------------------------------------------------
@pytest.fixture
def owner() -> Iterator[OwnerInThread]:
    started = OwnerInThread()
    yield started
    started.stop()


def job(client: OwnerClient, kind: str, body: dict[str, Any]) -> list[Event]:
    """Every event of one job, to its end."""
    return list(client.job(kind, body))


def done_of(events: list[Event]) -> dict[str, Any]:
    assert events[-1].name == "done", events[-1]
    return events[-1].data


def error_of(events: list[Event]) -> str:
    assert events[-1].name == "error", events[-1]
    return str(events[-1].data["message"])


def prefill_body(model_dir: Path, request: Request) -> dict[str, Any]:
    return {"model": str(model_dir), "device": "cpu", "dtype": "float32", "request": asdict(request)}


def prefilled(client: OwnerClient, model_dir: Path) -> str:
    """A stepped request of four tokens on the owner, prefilled: its handle."""
    body = prefill_body(model_dir, Request("hi", max_new_tokens=4, use_chat_template=False))
    return str(done_of(job(client, "prefill", body))["handle"])


def test_stepping_on_the_owner_gives_greedy_generates_tokens_and_maps(
    owner: OwnerInThread, tiny_llama_dir: Path, tiny_lm: LoadedModel
) -> None:
    client, request = owner.client(), Request("hi there", max_new_tokens=6, use_chat_template=False)
    events = job(client, "prefill", prefill_body(tiny_llama_dir, request))
    assert [e.name for e in events if e.name == "pass"] == ["pass"]
    view = SteppedView.first(request, done_of(events))
    handle = view.handle
    assert view.passes[0].is_prefill and not view.done and handle in owner.owner.steps
    while not view.done:
        before = view.passes[-1].kv_cache_bytes
        view = view.then(done_of(job(client, "step", {"handle": handle})))
        assert view.passes[-1].kv_cache_bytes == before + tiny_lm.info.kv_bytes_per_token  # one position per pass
    expected = measure(tiny_lm, request)  # greedy generate()
    assert view.trace.generated_token_ids == expected.generated_token_ids and len(view.passes) == 6
    assert view.maps.same_tokens_as(view.trace) and len(view.maps.decode[0]) == 5
    assert len(view.maps.tokens_text) == view.maps.prompt_len + 6
    assert handle not in owner.owner.steps  # finished: the owner keeps nothing, the page has the trace and maps
    assert error_of(job(client, "step", {"handle": handle})) == GONE


def test_reset_frees_the_request_on_the_owner(owner: OwnerInThread, tiny_llama_dir: Path) -> None:
    client = owner.client()
    handle = prefilled(client, tiny_llama_dir)
    stepped = owner.owner.steps[handle]
    assert done_of(job(client, "reset", {"handle": handle})) == {}
    assert stepped.freed and stepped.replay.cache is None and not owner.owner.steps
    events = job(client, "step", {"handle": handle})
    assert error_of(events) == GONE and "freed" in [e.name for e in events]


def test_an_idle_request_is_freed_as_any_job_starts(owner: OwnerInThread, tiny_llama_dir: Path) -> None:
    client = owner.client()
    body = prefill_body(tiny_llama_dir, Request("hi", max_new_tokens=4, use_chat_template=False))
    idle, busy = (done_of(job(client, "prefill", body))["handle"] for _ in range(2))
    idle_request, busy_request = owner.owner.steps[idle], owner.owner.steps[busy]
    idle_request.last_used_s -= IDLE_TIMEOUT_S - 30.0  # half a minute short of the timeout: not idle yet
    job(client, "reset", {"handle": "nobody's"})  # any job: the sweep runs as it starts
    assert not idle_request.freed
    idle_request.last_used_s -= 31.0  # past it: as if its page had walked away
    job(client, "reset", {"handle": "nobody's"})
    assert idle_request.freed and idle_request.replay.cache is None and idle not in owner.owner.steps
    assert not busy_request.freed and busy in owner.owner.steps
    assert error_of(job(client, "step", {"handle": idle})) == GONE
    assert done_of(job(client, "step", {"handle": busy}))["record"]["index"] == 1


def test_a_failed_pass_frees_the_request_on_the_owner(owner: OwnerInThread, tiny_llama_dir: Path) -> None:
    client = owner.client()
    handle = prefilled(client, tiny_llama_dir)
    stepped = owner.owner.steps[handle]
    with mock.patch.object(stepped.live, "step", side_effect=RuntimeError("CUDA out of memory")):
        events = job(client, "step", {"handle": handle})
    assert "freed" in [e.name for e in events] and "CUDA out of memory" in error_of(events)
    assert events[-1].data["failed"] == "RuntimeError"
    assert stepped.freed and stepped.replay.cache is None and handle not in owner.owner.steps


def waiting_line_event(events: Iterator[Event]) -> Event:
    for event in events:
        if event.name == "line" and not event.data["holding"]:
            return event
    raise AssertionError("the job never said its place in line")


def test_a_step_whose_client_went_away_while_waiting_is_dropped(owner: OwnerInThread, tiny_llama_dir: Path) -> None:
    """ "A job whose client went away is dropped": a Next token waits behind another session's turn, its page closes the
    stream; its ticket leaves the line (the turn log says cancelled) and the request is as it was."""
    client, queue = owner.client(), owner.owner.queue
    handle = prefilled(client, tiny_llama_dir)
    other = queue.enter("run", owner="other session", passes=2)
    assert queue.wait(other, 30)
    try:
        stream = client.job("step", {"handle": handle, "session": "leaver"})
        line = waiting_line_event(stream)
        assert line.data["ahead"] == 1 and queue.waiting == 1
        stream.close()  # the page went away
        deadline = time.monotonic() + 10 * TICK_S
        while queue.waiting and time.monotonic() < deadline:
            time.sleep(0.02)
        assert queue.waiting == 0  # it left the line at its next place-in-line tick
        dropped = [t for t in queue.turns if t.what == "step"]
        assert [t.ended for t in dropped] == ["cancelled"] and dropped[0].owner == "leaver"
    finally:
        queue.release(other)
    assert len(owner.owner.steps[handle].passes) == 1  # nothing ran: the request is as it was


# --- the Step page (AppTest): its jobs go to the test's own owner -----------------------------------------------------
def app_owner(owners: OwnersOfATest) -> Owner:
    """The owner the app's pages send their jobs to (started now if no job has asked yet)."""
    ui_link.device_link()
    return owners.started[-1].owner


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


def shown_errors(at: AppTest) -> list[str]:
    return [e.value.replace("\\", "") for e in at.error]


def test_the_step_page_steps_one_pass_per_click_and_resets(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, fresh_device_owner: OwnersOfATest
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there", max_new_tokens=6)
    assert not at.error, [e.value for e in at.error]
    sizes = [at.session_state[step_mode.STEPPED].passes[-1].kv_cache_bytes]
    for _ in range(3):
        at.button(key="step-next").click().run()
        assert not at.exception
        sizes.append(at.session_state[step_mode.STEPPED].passes[-1].kv_cache_bytes)
    stepped = at.session_state[step_mode.STEPPED]
    assert isinstance(stepped, SteppedView) and len(stepped.passes) == 4  # the session holds no model nor cache
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
    owner = app_owner(fresh_device_owner)
    on_owner = owner.steps[stepped.handle]
    at.button(key="step-end").click().run()  # finishes: the stepped request becomes the current run
    assert at.session_state[ui_state.RUN].trace.generated_token_ids == expected
    maps = at.session_state[ui_state.RUN].attention
    assert maps is not None and maps.same_tokens_as(at.session_state[ui_state.RUN].trace)
    assert on_owner.freed and on_owner.replay.cache is None and not owner.steps  # done: both caches freed there
    at.button(key="step-reset").click().run()
    assert step_mode.STEPPED not in at.session_state


def test_reset_frees_the_owners_cache_and_unlocks_the_form(
    tiny_llama_dir: Path, fresh_device_owner: OwnersOfATest
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there")
    owner = app_owner(fresh_device_owner)
    on_owner = owner.steps[at.session_state[step_mode.STEPPED].handle]
    at.button(key="step-reset").click().run()
    assert not at.exception and not at.error
    assert step_mode.STEPPED not in at.session_state and on_owner.freed and not owner.steps
    assert not at.text_input(key="step-prompt").disabled


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
    tiny_llama_dir: Path, tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch, fresh_device_owner: OwnersOfATest
) -> None:
    monkeypatch.setenv("EXPLORER_MAX_WAIT_S", "1")  # read by the web tier and by the owner as it starts
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    owner = app_owner(fresh_device_owner)
    with device_held_elsewhere(owner, leap_s=TICK_S):
        at.button(key="step-end").click().run(timeout=60)  # used to loop for ever: each refused step ran nothing
    errors = shown_errors(at)
    assert len(errors) == 1 and "Waited 1 s for the device" in errors[0], errors
    stepped = at.session_state[step_mode.STEPPED]
    assert len(stepped.passes) == 1 and not owner.steps[stepped.handle].freed  # refused in line: as it was


def test_a_failed_step_is_one_line_without_server_details_and_frees_the_cache(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, monkeypatch: pytest.MonkeyPatch, fresh_device_owner: OwnersOfATest
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    owner = app_owner(fresh_device_owner)
    on_owner = owner.steps[at.session_state[step_mode.STEPPED].handle]
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    monkeypatch.setenv("EXPLORER_ALLOWED_MODELS", str(tiny_llama_dir))
    broken = OSError(2, "No such file or directory", "/srv/explorer/secret/weights.bin")
    with mock.patch.object(SteppedRequest, "step", side_effect=broken):
        at.button(key="step-next").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "FileNotFoundError" in errors[0] and "secret" not in errors[0], errors
    assert step_mode.STEPPED not in at.session_state and on_owner.freed and not owner.steps
    at.run()  # the next script run, as any click makes
    assert not at.text_input(key="step-prompt").disabled  # the form is usable again


def test_a_hosted_owner_names_only_the_type_of_a_failure(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its text can quote a path of the device's machine: a hosted owner does not send it, whatever web tier asks."""
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    monkeypatch.setenv("EXPLORER_ALLOWED_MODELS", str(tiny_llama_dir))
    hosted = OwnerInThread()
    try:
        broken = OSError(2, "No such file or directory", "/srv/explorer/secret/weights.bin")
        with mock.patch.object(SteppedRequest, "step", side_effect=broken):
            body = prefill_body(tiny_llama_dir, Request("hi", max_new_tokens=4, use_chat_template=False))
            events = job(hosted.client(), "prefill", body)
    finally:
        hosted.stop()
    assert events[-1].data["failed"] == "FileNotFoundError" and "secret" not in error_of(events)


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
    errors = shown_errors(at)
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
    errors = shown_errors(at)
    assert len(errors) == 1 and "1 runs per minute per visitor" in errors[0], errors
    assert step_mode.STEPPED not in at.session_state


def test_a_request_left_idle_is_freed_by_another_sessions_job_and_the_next_click_says_so(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, fresh_device_owner: OwnersOfATest
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi")
    owner = app_owner(fresh_device_owner)
    on_owner = owner.steps[at.session_state[step_mode.STEPPED].handle]
    on_owner.last_used_s -= IDLE_TIMEOUT_S + 1  # as if its page had walked away
    other = prefill_on_the_step_page(tiny_llama_dir, "hello")  # any other session's job sweeps, without this one
    assert not other.error and on_owner.freed and len(owner.steps) == 1
    at.button(key="step-next").click().run()
    assert not at.exception and shown_errors(at) == [GONE]
    assert step_mode.STEPPED not in at.session_state
    at.run()  # the next script run, as any click makes
    assert not at.text_input(key="step-prompt").disabled and at.button(key="step-next").disabled


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
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, fresh_device_owner: OwnersOfATest
) -> None:
    said: list[str] = []
    real_line = ui_link.queued_line
    monkeypatch.setattr(ui_link, "queued_line", lambda *a: said.append(real_line(*a)) or said[-1])
    at = step_page_on(tiny_llama_dir)
    queue = app_owner(fresh_device_owner).queue
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


def test_a_prefill_while_the_owner_warms_up_waits_then_runs(
    tiny_llama_dir: Path, fresh_device_owner: OwnersOfATest
) -> None:
    at = step_page_on(tiny_llama_dir)
    owner = app_owner(fresh_device_owner)
    prefill_waits, seen = threading.Event(), list[str]()

    def warm(say: Any) -> None:  # the owner's warm-up, in a turn of its own, still under way when Prefill is pressed
        ticket = owner.queue.enter("warm-up", "server")
        try:
            owner.queue.wait(ticket, None)
            say("taking the device figures and warming up")
            prefill_waits.wait(60)
            time.sleep(2 * TICK_S)
        finally:
            owner.queue.release(ticket)

    real_progress = ui_link.JobView.progress

    def progress(view: ui_link.JobView, fraction: float, text: str) -> None:
        seen.append(text)
        prefill_waits.set()
        real_progress(view, fraction, text)

    owner.warmer.start(warm, thread_name="test-warm")
    with mock.patch.object(ui_link.JobView, "progress", progress):
        press_prefill(at, "hi there")
    assert_first_pass_without_error(at)
    assert seen[0].startswith("The device is warming up")  # Prefill came while warming was under way, and said so
    assert owner.warmer.status().state == "warm"
    turns = owner.queue.turns
    warm_turn = next(t for t in turns if t.what == "warm-up")
    step = next(t for t in turns if t.what == "prefill" and t.number > warm_turn.number)
    assert step.granted_unix_s >= warm_turn.released_unix_s  # the prefill's turn came once warming had ended


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
def every_step_disturbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stepped pass the owner runs says a second of other work's CPU ran beside it."""
    real_step = SteppedRequest.step

    def step(self: SteppedRequest, twin: bool = True) -> object:
        real_step(self, twin)
        record = self.live.passes[-1] = replace(self.live.passes[-1], beside_cpu_s=1.0)
        return record

    monkeypatch.setattr(SteppedRequest, "step", step)


@pytest.mark.usefixtures("every_step_disturbed")
def test_a_disturbed_step_is_marked_on_its_line_its_itl_bar_and_in_its_trace(
    tiny_llama_dir: Path, tiny_lm: LoadedModel
) -> None:
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there")
    at.button(key="step-next").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    lines = [m.value for m in at.main.get("markdown") if m.value.startswith("**Pass 1**")]
    assert len(lines) == 1 and "(measured)" in lines[0] and lines[0].endswith("⚠ disturbed"), lines
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("Disturbed: 2 of 2 passes (passes 0, 1) were timed while other work") for w in warnings)
    stepped = at.session_state[step_mode.STEPPED]
    assert [p.beside_cpu_s for p in stepped.passes] == [1.0, 1.0] and all(p.disturbed for p in stepped.passes)


def test_presenting_a_next_token_redraws_the_gaps_and_leaves_the_rest_of_the_request_folded_until_opened(
    tiny_llama_dir: Path, tiny_lm: LoadedModel
) -> None:
    """Presenting, a Next token redraws the first screen, the figures and the gaps (the ITL chart, issue 31); the
    whole map, the top five, the cache per layer and the pass times wait in an expander that draws them only while
    it is open, and stays open for the presses after (benchmarks/step_latency.py: what a key costs)."""
    from explorer.ui.presenter import PRESENTER_ON

    at: AppTest = new_app()
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(model=str(tiny_llama_dir), device="cpu")
    at.session_state[PRESENTER_ON] = True
    at = press_prefill(at.switch_page("pages/step.py").run(), "hi there")
    at.button(key="step-next").click().run()
    assert not at.exception, at.exception
    assert chart_names(at) == ["step-newest-rows", "step-kv", "step-itl"]
    folded = [e for e in at.main.expander if e.label == step_mode_view.WHOLE_REQUEST]
    assert len(folded) == 1 and not at.get("table")  # nor the top five
    at.session_state[step_mode_view.WHOLE_REQUEST_KEY] = True  # the presenter opens it
    at.run()
    assert chart_names(at) == [
        "step-newest-rows",
        "step-kv",
        "step-itl",
        "step-attention",
        "step-kv-layers",
        "step-times",
    ]
    assert at.get("table")  # the top five, drawn in the opened fold
    at.button(key="step-next").click().run()
    assert not at.exception, at.exception
    assert len(at.session_state[step_mode.STEPPED].passes) == 3 and "step-times" in chart_names(at)  # still open
