"""The attention replay runs on the model's eager twin (every weight shared, the shared model never switched to eager
nor hooked), after the turn of the Run or the click that timed the passes, in an untimed turn of its own (issue 43):
never beside another session's timed pass, and a Next token that arrives meanwhile goes before it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.core.attention import HOOK_DICTS, EagerTwin, capture_attention, decoder_attention_modules, eager_twin
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.owner import run as run_job
from explorer.owner.line import DeviceQueue
from explorer.ui import runner, step_mode
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - the fixture patches AppTest's pages
from tests.owner_support import OwnersOfATest
from tests.test_hosted import press_run
from tests.test_step_mode import app_owner, prefill_on_the_step_page


def test_the_eager_twin_shares_every_weight_and_the_replay_leaves_the_shared_model_alone(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("attention!", max_new_tokens=4))
    twin = eager_twin(tiny_lm)
    assert twin is eager_twin(tiny_lm)  # made once, kept with the loaded model
    assert all(a is b for a, b in zip(tiny_lm.model.parameters(), twin.model.parameters(), strict=True))
    assert twin.model.config._attn_implementation == "eager"
    shared_modules = decoder_attention_modules(tiny_lm.model)
    seen: list[tuple[str, int]] = []

    @contextmanager
    def during_each_replay_pass() -> Iterator[None]:
        yield  # what the shared model looks like while a replay pass runs: another session could time a pass now
        seen.append((tiny_lm.model.config._attn_implementation, sum(len(m._forward_hooks) for m in shared_modules)))

    maps = capture_attention(tiny_lm, trace, section=during_each_replay_pass)
    assert maps.same_tokens_as(trace)
    assert seen == [("sdpa", 0)] * len(trace.passes)  # one section per replay pass, the shared model untouched


def test_the_twin_takes_none_of_the_hooks_the_shared_model_has_when_it_is_made(tiny_lm: LoadedModel) -> None:
    calls: list[int] = []
    first = decoder_attention_modules(tiny_lm.model)[0]
    handles = [
        first.register_forward_pre_hook(lambda *_: calls.append(1)),
        first.register_forward_hook(lambda *_: None),
    ]
    try:
        twin = EagerTwin.of(tiny_lm.model)
    finally:
        for handle in handles:
            handle.remove()
    assert all(not getattr(m, hooks) for m in twin.model.modules() for hooks in HOOK_DICTS)
    trace = measure(tiny_lm, Request("hooks", max_new_tokens=2))
    calls.clear()
    handles = [first.register_forward_pre_hook(lambda *_: calls.append(1))]
    try:
        with torch.inference_mode():
            twin.model(torch.tensor([list(trace.prompt_token_ids)]))
    finally:
        for handle in handles:
            handle.remove()
    assert calls == []  # a hook on the shared model never sees the twin's forwards


def test_two_replays_at_once_each_keep_their_own_maps(tiny_lm: LoadedModel) -> None:
    """Two sessions' replays after their turns run at once: each keeps its own maps, exactly as alone (the twin lets
    one replay pass through at a time: its hooks would otherwise catch the other's forwards). Each pass's section
    (where a replay makes way) runs before it takes the twin, so the twin is never held while it makes way."""
    traces = [measure(tiny_lm, Request(prompt, max_new_tokens=5)) for prompt in ("short", "a much longer prompt here")]
    alone = [capture_attention(tiny_lm, trace) for trace in traces]
    inside_alone: list[bool] = []  # the sections entered

    @contextmanager
    def pass_alone() -> Iterator[None]:
        inside_alone.append(True)  # one section a pass, each replay's
        yield

    together: dict[int, list] = {0: [], 1: []}

    def replay(k: int) -> None:
        for _ in range(4):
            together[k].append(capture_attention(tiny_lm, traces[k], section=pass_alone))

    threads = [threading.Thread(target=replay, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(inside_alone) == 4 * sum(len(t.passes) for t in traces)
    for k in (0, 1):
        assert len(together[k]) == 4
        for maps in together[k]:
            for layer in alone[k].layers:
                np.testing.assert_array_equal(maps.prefill[layer], alone[k].prefill[layer])
                for row, row_alone in zip(maps.decode[layer], alone[k].decode[layer], strict=True):
                    np.testing.assert_array_equal(row, row_alone)


def device_free(queue: DeviceQueue) -> bool:
    """Whether another session would get the device right now (a probe ticket granted at once, then given back)."""
    probe = queue.enter("probe", owner="probe")
    try:
        return queue.wait(probe, 0.5)
    finally:
        queue.release(probe)


def watch_device_during(monkeypatch: pytest.MonkeyPatch, owners: OwnersOfATest, owner: object, name: str) -> list[bool]:
    """Whether the owner's device was free each time `owner.name` (the replay) ran."""
    free: list[bool] = []
    real: Callable[..., object] = getattr(owner, name)

    def watched(*args: object, **kwargs: object) -> object:
        free.append(device_free(owners.latest.queue))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, watched)
    return free


@pytest.mark.parametrize(
    ("warm_within_s", "turns"),
    [
        (0.0, ["prefill", "step"]),  # always cold: each row replayed before its pass, inside the click's turn
        (1e9, ["prefill", "step", "attention"]),  # warm after the first pass: the row after the turn, in its own
    ],
)
def test_a_step_clicks_attention_row_is_replayed_with_the_device_held(
    warm_within_s: float,
    turns: list[str],
    tiny_llama_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_device_owner: OwnersOfATest,
) -> None:
    """On the device owner, every replay forward holds the device (a probe waits), so no timed pass runs beside it: on
    a device gone cold it runs before its pass, inside the click's turn, and warms the device for it (no twin); on a
    warm one after the click's turn, in an untimed "attention" turn of its own."""
    from explorer.core.attention import AttentionReplay
    from explorer.owner import steps

    monkeypatch.setattr(steps, "WARM_WITHIN_S", warm_within_s)
    queue = app_owner(fresh_device_owner).queue
    free: list[bool] = []
    real = AttentionReplay.step

    def watched(self: AttentionReplay, *args: object, **kwargs: object) -> int:
        free.append(device_free(queue))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(AttentionReplay, "step", watched)
    at = prefill_on_the_step_page(tiny_llama_dir, "hi there", max_new_tokens=4)
    at.button(key="step-next").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    current = at.session_state[step_mode.STEPPED]
    on_owner = app_owner(fresh_device_owner).steps[current.handle]
    assert len(current.passes) == 2 and len(on_owner.replay.replayed) == 2  # both passes' rows, replayed once each
    assert len(current.maps.decode[current.maps.layers[0]]) == 1  # and sent: the prefill's map and one decode row
    assert free == [False, False]  # each replay held the device: nothing ran beside it
    assert [t.what for t in queue.turns if t.what != "probe"] == turns


def test_a_runs_attention_is_replayed_after_its_turn(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, fresh_device_owner: OwnersOfATest
) -> None:
    free = watch_device_during(monkeypatch, fresh_device_owner, run_job, "capture_attention")
    at = new_app().run()
    press_run(at, "hi there", model=str(tiny_llama_dir), max_new_tokens=3)
    assert not at.error, [e.value for e in at.error]
    assert free == [False]  # the owner's replay ran once, in a turn of its own: nothing beside it
    whats = [t.what for t in app_owner(fresh_device_owner).queue.turns if t.what != "probe"]
    assert whats == ["run", "attention"]
    assert at.session_state[runner.RUN].attention is not None
