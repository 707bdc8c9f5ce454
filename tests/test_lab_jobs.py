"""The labs as jobs of the device owner (`explorer.owner.labs`): a hosted owner holds a lab sent straight over HTTP to
its own caps, whatever page sent it or none; "Profile this pass" runs there and comes back as the record the page
draws; the records the jobs send back are their own JSON, rebuilt whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from explorer.core.engine import Request, check_request, generate
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.pass_profile import PassProfile
from explorer.core.profiler import profile_pass
from explorer.core.trace import DeviceProfile, Trace
from explorer.hosting.settings import HostedPolicy
from explorer.labs import sizes
from explorer.labs.schedule.workload import Workload
from explorer.owner import labs as lab_jobs
from explorer.owner.registry import JOBS
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnerInThread, OwnersOfATest


@pytest.fixture(scope="module")
def long_trace(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> Trace:
    """70 tokens of the tiny model: past a hosted server's 64 new tokens per lab when decoded or profiled again."""
    request = Request("abc", max_new_tokens=70, use_chat_template=False, stop_at_eos=False)
    return generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)


@pytest.fixture
def hosted_owner() -> Iterator[OwnerInThread]:
    owner = OwnerInThread(HostedPolicy.from_env({"EXPLORER_HOSTED": "1"}))
    yield owner
    owner.stop()


def oversized(kind: str, trace: Trace) -> tuple[dict[str, Any], str]:
    """A body over a hosted server's caps (batches of 8, labs of 60 s, 64 new tokens), and what the refusal says."""
    workload = Workload(requests=32)
    return {
        "nocache": ({"prompt": "hello", "new_tokens": 16, "budget_s": 600.0}, "at most 60 s on the device"),
        "batch": (
            {"batch_sizes": [1, 64], "prompt_tokens": 8, "new_tokens": 4, "distinct_prompts": True, "budget_s": 60.0},
            "batches of at most 8, not 64",
        ),
        "schedule": (
            {"workload": asdict(workload), "settings": {}, "compare": True},
            "batches of at most 8, not 32",
        ),
        "decode-paths": ({"trace": trace.to_dict()}, "at most 64 new tokens per lab run, not 210"),
        "profile": ({"trace": trace.to_dict(), "pass_index": 69}, "at most 64 new tokens per lab run, not 70"),
    }[kind]


def test_the_page_and_the_owner_size_a_lab_with_one_definition() -> None:
    """The page refuses before it sends (`sizes`), the owner's job again from its body, in the same words."""
    policy = HostedPolicy.from_env({"EXPLORER_HOSTED": "1"})
    with pytest.raises(BadInput, match="batches of at most 8, not 32"):
        policy.check_lab(sizes.schedule_size(Workload(requests=32), policy))
    kinds = ("nocache", "batch", "schedule", "decode-paths", "profile", "measure-here")
    assert all(JOBS[kind].__module__ == lab_jobs.__name__ for kind in kinds)


@pytest.mark.parametrize("kind", ["nocache", "batch", "schedule", "decode-paths", "profile"])
def test_a_hosted_owner_refuses_an_oversized_lab_sent_straight_over_http_and_runs_nothing(
    kind: str, hosted_owner: OwnerInThread, long_trace: Trace
) -> None:
    """No page checked this body: the owner checks its own caps, before any place in line or model load."""
    body, says = oversized(kind, long_trace)
    events = list(hosted_owner.client().job(kind, {"model": "embedded", **body}))
    assert [e.name for e in events] == ["error"], events
    message = events[0].data["message"]
    assert says in message and "\n" not in message
    owner = hosted_owner.owner
    assert not owner.queue.turns and owner.queue.waiting == 0 and owner.models == {}  # nothing ran, nothing loaded


def test_profile_this_pass_runs_on_the_device_owner_and_draws_what_it_sends_back(
    tiny_llama_dir: Path, tiny_lm: LoadedModel, cpu_figures: DeviceProfile, fresh_device_owner: OwnersOfATest
) -> None:
    request = Request("a prompt of some tokens", max_new_tokens=4, use_chat_template=False)
    trace = generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)
    at = open_page("pages/cost.py", ui_state.RunResult(trace, None, "", "run 1: tokens"), timeout_s=180)
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(model=str(tiny_llama_dir), device="cpu")
    at.selectbox(key="profile-pass").set_value(2).run()
    next(b for b in at.main.button if b.label == "Profile this pass").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    label, profiled = at.session_state[ui_state.PROFILE]
    assert label == "run 1: tokens" and isinstance(profiled, PassProfile) and profiled.pass_index == 2
    assert profiled.replay_argmax_token_id == trace.passes[3].input_token_ids[0]  # the replay made the run's token
    assert any("time in no op" in c.value for c in at.caption)  # the profiled pass is drawn
    owner = fresh_device_owner.owner()
    assert [turn.what for turn in owner.queue.turns] == ["lab"]  # on the owner, in one turn
    assert list(owner.models) == [(str(tiny_llama_dir), "cpu", "float32")]


def test_a_profiled_pass_and_a_workload_come_back_whole_from_their_json(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    request = Request("abc", max_new_tokens=3, use_chat_template=False)
    profiled = profile_pass(tiny_lm, generate(tiny_lm, check_request(tiny_lm, request), cpu_figures), 1)
    assert PassProfile.from_dict(json.loads(profiled.to_json())) == profiled
    workload = Workload(requests=3, prompt_tokens=(8, 24), arrivals_ms=(0.0, 0.0, 150.0), prompts=("a", "b", "c"))
    assert Workload.from_dict(json.loads(json.dumps(asdict(workload)))) == workload
