"""Hosted mode: the policy (`explorer.hosting.settings`) and the device queue (`explorer.owner.line`) tested
directly (threads for the queue), then the app through AppTest with `EXPLORER_HOSTED=1`: refusals by name, caps
before tokenizing, the rate limit, the wait limit, and a normal run right after."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core import engine
from explorer.core.errors import BadInput
from explorer.hosting.settings import (
    HOSTED_MAX_NEW_TOKENS,
    HOSTED_MAX_PROMPT_TOKENS,
    LOCAL_MAX_PROMPT_CHARS,
    HostedPolicy,
    LabSize,
)
from explorer.models.loading import load_model
from explorer.owner.job import TICK_S, Job
from explorer.owner.line import DeviceQueue, QueueStatus, Ticket, read_turn_log, wait_sentence, work_ahead
from explorer.owner.state import Owner
from explorer.ui import state as ui_state
from explorer.ui.device_link import device_link
from tests.apptest_support import navigation_like_a_server  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnersOfATest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 180
HOSTILE_NAMES = ["/etc", "../../", "gpt2", "https://example.com/model", "~/.ssh", "./no/such/model"]
LONG_PROMPT = "word " * 6_000  # 30,000 characters


# --- the policy ----------------------------------------------------------------------------------------------------
def hosted(**env: str) -> HostedPolicy:
    return HostedPolicy.from_env({"EXPLORER_HOSTED": "1", **env})


def test_local_mode_is_as_free_as_before() -> None:
    policy = HostedPolicy.from_env({})
    assert not policy.hosted and policy.allowed_models == ()
    assert policy.check_model("/any/folder") == "/any/folder" and policy.check_model("  ") == "embedded"
    policy.check_request("x" * LOCAL_MAX_PROMPT_CHARS, 4096, 20)
    policy.check_prompt_tokens(100_000)
    policy.check_lab(None)
    assert policy.check_rate(tuple(range(100)), 50.0)[-1] == 50.0  # no rate limit
    assert policy.max_wait_s is None and policy.caps_lines() == []


def test_local_allow_list_still_applies() -> None:
    policy = HostedPolicy.from_env({"EXPLORER_ALLOWED_MODELS": "embedded, Qwen/Qwen2.5-0.5B-Instruct"})
    assert policy.check_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    with pytest.raises(BadInput, match="only runs these models: embedded, Qwen/Qwen2.5-0.5B-Instruct"):
        policy.check_model("gpt2")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hosted_refuses_any_other_name_by_name_alone(name: str) -> None:
    with mock.patch("os.path.exists") as exists, mock.patch("os.path.isdir") as isdir, pytest.raises(BadInput) as err:
        hosted().check_model(name)
    assert not exists.called and not isdir.called  # refused before touching the filesystem
    message = str(err.value)
    assert message == "This server only runs these models: embedded. Type one of them in the Model box."


def test_hosted_defaults_and_overrides() -> None:
    policy = hosted()
    assert policy.allowed_models == ("embedded",)
    assert policy.max_prompt_tokens == HOSTED_MAX_PROMPT_TOKENS and policy.max_new_tokens == HOSTED_MAX_NEW_TOKENS
    assert policy.max_prompt_chars == 8 * HOSTED_MAX_PROMPT_TOKENS
    assert policy.attention_cap_bytes == 64 * 2**20
    custom = hosted(
        EXPLORER_ALLOWED_MODELS="embedded,gpt2",
        EXPLORER_MAX_NEW_TOKENS="16",
        EXPLORER_MAX_PROMPT_TOKENS="100",
        EXPLORER_RUNS_PER_MINUTE="0",
        EXPLORER_MAX_WAIT_S="2.5",
        EXPLORER_ATTENTION_CAP_MIB="8",
    )
    assert custom.allowed_models == ("embedded", "gpt2") and custom.max_new_tokens == 16
    assert custom.max_prompt_chars == 800 and custom.runs_per_minute is None and custom.max_wait_s == 2.5
    assert custom.attention_cap_bytes == 8 * 2**20
    assert hosted(EXPLORER_HOSTED="no").hosted is False


def test_a_malformed_setting_is_one_line_without_its_value() -> None:
    with pytest.raises(BadInput, match="EXPLORER_MAX_NEW_TOKENS must be a whole number") as err:
        hosted(EXPLORER_MAX_NEW_TOKENS="/srv/secret")
    assert "/srv/secret" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(BadInput, match="0 \\(no limit\\) or more"):
        hosted(EXPLORER_MAX_WAIT_S="-1")


def test_hosted_caps_on_a_request() -> None:
    policy = hosted()
    policy.check_request("short", HOSTED_MAX_NEW_TOKENS, 3)
    with pytest.raises(BadInput, match="30,000 characters; this server takes at most 2,048 characters and 256 tokens"):
        policy.check_request(LONG_PROMPT, 8, 1)
    with pytest.raises(BadInput, match="at most 64 new tokens per run, not 65"):
        policy.check_request("hi", 65, 1)
    with pytest.raises(BadInput, match="at most 3 repeats"):
        policy.check_request("hi", 8, 4)
    policy.check_prompt_tokens(256)
    with pytest.raises(BadInput, match="257 tokens \\(chat template included\\); this server takes at most 256"):
        policy.check_prompt_tokens(257)


def test_hosted_caps_on_a_lab() -> None:
    policy = hosted()
    policy.check_lab(LabSize(prompt_tokens=32, new_tokens=16, batch_sizes=(1, 2, 8), budget_s=60))
    policy.check_lab(LabSize(prompt_chars=100, new_tokens=16, budget_s=30))
    refusals = [
        (None, "does not state its size"),
        (LabSize(prompt_tokens=32, new_tokens=16, batch_sizes=(1, 16), budget_s=60), "batches of at most 8, not 16"),
        (LabSize(prompt_tokens=512, new_tokens=16, budget_s=60), "512 tokens"),
        (LabSize(prompt_chars=5000, new_tokens=16, budget_s=60), "5,000 characters"),
        (LabSize(prompt_chars=10, new_tokens=200, budget_s=60), "at most 64 new tokens per lab run"),
        (LabSize(prompt_chars=10, new_tokens=16, budget_s=300), "at most 60 s on the device"),
        (LabSize(prompt_chars=10, new_tokens=16), "at most 60 s on the device"),
    ]
    assert policy.lab_budget_s(600.0) == 60.0 and HostedPolicy().lab_budget_s(600.0) == 600.0
    for size, message in refusals:
        with pytest.raises(BadInput, match=message):
            policy.check_lab(size)


def test_rate_limit_is_a_sliding_minute() -> None:
    policy = hosted(EXPLORER_RUNS_PER_MINUTE="2")
    starts = policy.check_rate((), 100.0)
    starts = policy.check_rate(starts, 110.0)
    with pytest.raises(BadInput, match="2 runs per minute per visitor.*try again in 31 s") as err:
        policy.check_rate(starts, 130.0)
    assert "\n" not in str(err.value)
    assert policy.check_rate(starts, 160.5) == (110.0, 160.5)  # the first start has left the minute


def test_the_sidebar_lines_name_every_cap() -> None:
    text = "; ".join(hosted().caps_lines())
    for phrase in [
        "models: embedded",
        "2,048 characters",
        "256 tokens",
        "64 new tokens",
        "3 repeats",
        "batches up to 8",
    ]:
        assert phrase in text
    for phrase in ["labs up to 60 s", "64 MiB", "6 runs per minute", "at most 120 s"]:
        assert phrase in text


def test_hosted_visitors_get_a_device_choice_only_when_the_operator_allows_it() -> None:
    assert HostedPolicy.from_env({}).device_choice  # local: free, and no line says otherwise
    assert HostedPolicy.from_env({"EXPLORER_ALLOW_DEVICE_CHOICE": "0"}).device_choice  # only hosted mode pins them
    pinned = hosted()
    assert not pinned.device_choice and "device and dtype fixed by the server" in pinned.caps_lines()
    for word in ["1", " Yes ", "on"]:
        allowed = hosted(EXPLORER_ALLOW_DEVICE_CHOICE=word)
        assert allowed.device_choice and not any("dtype" in line for line in allowed.caps_lines())
    assert not hosted(EXPLORER_ALLOW_DEVICE_CHOICE="no").device_choice


def test_wait_sentences_say_the_work_ahead_in_passes() -> None:
    unknown = wait_sentence(QueueStatus(False, True, 1, 1, (), None, 2.0), 120)
    assert "You are next in line: 1 pass ahead, how long is not known" in unknown and "at most 120 s" in unknown
    third = wait_sentence(QueueStatus(False, True, 3, 2, (), 0.12, 4.0), None)
    assert "You are number 3 in line (2 waiting before you): 2 passes ahead, about 0.1 s." in third
    assert "at most" not in third
    lab = wait_sentence(QueueStatus(False, True, 2, 16, ("lab",), 12.4, 1.0), None)
    assert "16 passes and a lab ahead, about 12 s" in lab
    soon = wait_sentence(QueueStatus(False, True, 1, 1, (), 0.04, 0.0), None)
    assert "1 pass ahead, any moment now" in soon


def test_work_ahead_names_passes_and_other_work() -> None:
    assert work_ahead(0, ()) == "nothing"
    assert work_ahead(1, ()) == "1 pass"
    assert work_ahead(0, ("lab", "lab")) == "2 labs"
    assert work_ahead(3, ("device figures", "lab")) == "3 passes, a device measurement and a lab"


# --- the queue -------------------------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class LeapingClock:
    """A clock on which each reading is `leap_s` later than the one before."""

    def __init__(self, start_s: float, leap_s: float) -> None:
        self.now, self.leap_s = start_s, leap_s

    def __call__(self) -> float:
        self.now += self.leap_s
        return self.now


def test_queue_is_first_come_first_served_with_threads() -> None:
    queue = DeviceQueue()
    first = queue.enter("run")
    assert queue.holds(first)
    order: list[int] = []
    entered = []

    def worker(i: int) -> None:
        ticket = queue.enter("run", owner=str(i))
        entered.append(i)
        assert queue.wait(ticket, 30)
        order.append(i)
        time.sleep(0.01)
        queue.release(ticket)

    threads = []
    for i in range(5):  # entered one after another, so the line order is known
        threads.append(threading.Thread(target=worker, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while len(entered) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert queue.waiting == 5
    queue.release(first)
    for t in threads:
        t.join(30)
    assert order == [0, 1, 2, 3, 4]
    assert [t.owner for t in queue.turns][-5:] == ["0", "1", "2", "3", "4"]
    assert queue.waiting == 0


def test_only_one_holder_at_a_time_under_contention() -> None:
    queue = DeviceQueue()
    inside = 0
    most = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, most
        for _ in range(20):
            ticket = queue.enter("run")
            assert queue.wait(ticket, 30)
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.0005)
            with guard:
                inside -= 1
            queue.release(ticket)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most == 1 and len(queue.turns) == 64  # 120 turns, the latest 64 kept


def test_place_expected_wait_in_passes_and_cancel() -> None:
    clock = FakeClock()
    queue = DeviceQueue(clock=clock)
    for passes, held_s in ((1, 0.2), (1, 0.4)):  # two finished steps: 0.3 s a pass on average
        t = queue.enter("step", passes=passes)
        clock.now += held_s
        queue.release(t)
    holder = queue.enter("step", passes=1)
    clock.now += 0.1
    second, third = queue.enter("run", passes=8), queue.enter("step", passes=1)
    status = queue.status(third)
    assert (status.holding, status.in_line, status.ahead, status.passes_ahead) == (False, True, 2, 9)
    # the holder's 0.3 s less the 0.1 s it has used, then 8 passes at the steps' 0.3 s (no run has finished yet)
    assert status.expected_wait_s == pytest.approx(0.2 + 8 * 0.3)
    assert not queue.wait(third, 0)
    queue.release(second)  # cancelled while waiting: the one behind moves up
    assert queue.status(third).ahead == 1 and not queue.status(second).in_line
    assert not queue.wait(second, 0)
    queue.release(holder)
    assert queue.holds(third)
    assert [t.ended for t in queue.turns][-2:] == ["cancelled", "released"]


def test_the_expected_wait_takes_each_kinds_own_time_per_pass_and_per_turn() -> None:
    clock = FakeClock()
    queue = DeviceQueue(clock=clock)
    for what, passes, held_s in (("run", 10, 2.0), ("step", 1, 0.1), ("lab", None, 30.0)):
        t = queue.enter(what, passes=passes)
        clock.now += held_s
        queue.release(t)
    holder = queue.enter("lab")
    run, step, me = queue.enter("run", passes=5), queue.enter("step", passes=1), queue.enter("step", passes=1)
    status = queue.status(me)
    assert status.passes_ahead == 6 and status.other_work_ahead == ("lab",)
    assert status.expected_wait_s == pytest.approx(30.0 + 5 * 0.2 + 0.1)
    for ticket in (holder, run, step, me):
        queue.release(ticket)


def test_a_turn_ends_with_its_work_and_its_log_line_has_the_passes_it_ran(tmp_path: Path) -> None:
    log = tmp_path / "turns.jsonl"
    queue = DeviceQueue(log_path=log)
    step = queue.enter("step", owner="abc", passes=1)
    nxt = queue.enter("step", owner="def", passes=1)
    queue.record_work(step, 1, 0.061, 0.15)
    queue.record_work(nxt, 1, 9.0, 9.0)  # not on the device yet: ignored
    queue.release(step)
    assert queue.wait(nxt, 0)  # the next session's pass starts at once: nothing is kept for drawing
    queue.release(nxt)
    first, second = read_turn_log(log)
    assert (first.passes, first.pass_s, first.forward_s, first.ended) == (1, 0.061, 0.15, "released")
    assert (second.passes, second.pass_s, second.first_ahead) == (0, 0.0, 1)
    assert second.entered_unix_s == pytest.approx(second.granted_unix_s - second.waited_s)


def test_a_turns_forwards_are_timed_from_its_grant_not_from_when_it_joined_the_line(tmp_path: Path) -> None:
    """The turn log's `forward_s` is work the turn ran on the device: a click that waited in line behind another turn
    did not run forwards while it waited (the workshop benchmark's forwards ahead counted every wait twice)."""
    log = tmp_path / "turns.jsonl"
    line = DeviceQueue(log_path=log)
    device = SimpleNamespace(policy=HostedPolicy.from_env({}), queue=line, steps={})
    holder = line.enter("run", owner="ahead", passes=1)

    def click() -> None:
        with Job(device, "step", {"session": "me"}).turn("step", passes=1) as turn:  # type: ignore[arg-type]
            time.sleep(0.05)
            turn.ran(1, 0.04)

    thread = threading.Thread(target=click)
    thread.start()
    time.sleep(0.6)  # the click waits in line behind the holder
    line.release(holder)
    thread.join(10)
    mine = next(t for t in read_turn_log(log) if t.owner == "me")
    assert mine.waited_s >= 0.5
    assert 0.04 <= mine.forward_s <= mine.held_s


def in_a_thread(work: object) -> None:
    """Run `work` in a thread of its own to its end (a script thread that finished or died)."""
    thread = threading.Thread(target=work)  # type: ignore[arg-type]
    thread.start()
    thread.join(30)


def test_a_turn_whose_thread_is_gone_is_taken_back() -> None:
    queue = DeviceQueue()
    in_a_thread(lambda: queue.wait(queue.enter("run"), 10))  # took the device and ended without giving it back
    nxt = queue.enter("run")
    assert queue.wait(nxt, 5)  # within the queue's poll (1 s), not never
    assert queue.turns[-1].ended == "owner gone"


def test_a_place_in_line_whose_thread_is_gone_is_dropped() -> None:
    queue = DeviceQueue()
    holder = queue.enter("run")
    in_a_thread(lambda: queue.enter("run"))  # queued behind the holder, then its thread ended
    nxt = queue.enter("run")
    queue.release(holder)
    assert queue.wait(nxt, 5) and queue.turns[-1].ended == "owner gone"


def test_the_turn_log_has_one_line_per_turn(tmp_path: Path) -> None:
    log = tmp_path / "turns.jsonl"
    queue = DeviceQueue(log_path=log)
    a = queue.enter("run", owner="abc")
    b = queue.enter("lab", owner="def")
    queue.release(a)
    queue.release(b)
    turns = read_turn_log(log)
    assert [(t.what, t.owner, t.first_ahead, t.ended) for t in turns] == [
        ("run", "abc", 0, "released"),
        ("lab", "def", 1, "released"),
    ]
    assert turns[0].released_unix_s <= turns[1].granted_unix_s


# --- loading: one answer for a missing folder and a folder that holds no model ---------------------------------------
def test_missing_and_existing_non_model_folders_get_the_same_answer(tmp_path: Path) -> None:
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "notes.txt").write_text("private")
    answers = []
    for name in [str(tmp_path / "exists"), str(tmp_path / "missing"), "/etc"]:
        with pytest.raises(BadInput) as err:
            load_model(name, device="cpu")
        answers.append(str(err.value).replace(name, "NAME"))
    assert len(set(answers)) == 1, answers
    assert answers[0].endswith("or a hub id.") and "\n" not in answers[0] and "private" not in answers[0]


# --- the app in hosted mode -----------------------------------------------------------------------------------------
@pytest.fixture
def hosted_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    monkeypatch.delenv("EXPLORER_ALLOWED_MODELS", raising=False)


def new_app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception
    return at


def press_run(at: AppTest, prompt: str | None = None, model: str | None = None, max_new_tokens: int = 2) -> AppTest:
    if prompt is not None:
        at.sidebar.text_area(key="sidebar-prompt").input(prompt)
    if model is not None:
        at.sidebar.text_input(key="sidebar-model").input(model)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(max_new_tokens)
    at.sidebar.button(key="sidebar-run").click().run()
    assert not at.exception, at.exception
    return at


def shown_errors(at: AppTest) -> list[str]:
    """The error lines as a visitor reads them (the app escapes markdown in them with backslashes)."""
    return [e.value.replace("\\", "") for e in at.error]


class Calls:
    """Counts what must not happen on a refusal: a model load, a tokenization, a forward."""

    def __init__(self) -> None:
        self.loads = 0
        self.tokenized: list[int] = []

    def patches(self) -> contextlib.ExitStack:
        owner_load = Owner.load
        real_tokenize = engine.tokenize

        def get(owner: Owner, *args: object, **kwargs: object) -> object:
            self.loads += 1
            return owner_load(owner, *args, **kwargs)

        def tokenize(lm: object, prompt: str, use_chat_template: bool) -> list[int]:
            self.tokenized.append(len(prompt))
            return real_tokenize(lm, prompt, use_chat_template)

        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(Owner, "load", get))
        stack.enter_context(mock.patch.object(engine, "tokenize", tokenize))
        return stack


@pytest.mark.usefixtures("hosted_env")
def test_hosted_app_refuses_names_and_long_prompts_then_runs() -> None:
    at = new_app()
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "Limits on this server" in captions and "64 new tokens" in captions and "models: embedded" in captions
    calls = Calls()
    with calls.patches():
        for name in ["/etc", "../../", "gpt2", "https://huggingface.co/gpt2"]:
            press_run(at, model=name)
            errors = shown_errors(at)
            assert len(errors) == 1 and "\n" not in errors[0], errors
            assert "only runs these models: embedded" in errors[0]
            assert ui_state.RUN not in at.session_state
        assert calls.loads == 0 and calls.tokenized == []
        at.sidebar.text_input(key="sidebar-model").input("embedded")
        press_run(at, prompt=LONG_PROMPT)
        errors = shown_errors(at)
        assert len(errors) == 1 and "30,000 characters" in errors[0] and "Nothing ran" in errors[0]
        assert calls.loads == 0 and calls.tokenized == []  # refused before a single token was made
        press_run(at, prompt="Name a colour.", max_new_tokens=2)  # a normal run right after
        assert not at.error, shown_errors(at)
        trace = at.session_state[ui_state.RUN].trace
        assert trace.prompt_text == "Name a colour." and 1 <= trace.new_tokens <= 2
        assert calls.loads == 1 and max(calls.tokenized) == len("Name a colour.")


@pytest.mark.usefixtures("hosted_env")
def test_hosted_prompt_token_cap_is_checked_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_MAX_PROMPT_TOKENS", "20")
    monkeypatch.setenv("EXPLORER_MAX_PROMPT_CHARS", "2000")
    at = press_run(new_app(), prompt="one two three four five six seven eight nine ten " * 3)
    errors = shown_errors(at)
    assert len(errors) == 1 and "tokens (chat template included); this server takes at most 20" in errors[0]
    assert ui_state.RUN not in at.session_state


def test_local_app_says_a_too_long_prompt_is_refused() -> None:
    at = press_run(new_app(), prompt="x" * 30_000)
    errors = shown_errors(at)
    assert len(errors) == 1 and "30,000 characters" in errors[0] and "20,000" in errors[0]


@pytest.mark.usefixtures("hosted_env")
def test_hosted_rate_limit_refuses_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_RUNS_PER_MINUTE", "1")
    at = press_run(new_app(), prompt="Hi.", max_new_tokens=1)
    assert not at.error and at.session_state[ui_state.RUN].trace.new_tokens == 1
    press_run(at, prompt="Hi again.", max_new_tokens=1)
    errors = shown_errors(at)
    assert len(errors) == 1 and "1 runs per minute per visitor" in errors[0] and "try again in" in errors[0]
    assert at.session_state[ui_state.RUN].trace.prompt_text == "Hi."


@contextlib.contextmanager
def device_held_elsewhere(owner: Owner, leap_s: float = 0.0) -> Iterator[DeviceQueue]:
    """Another session holds the device owner's device for the whole block; with `leap_s`, every look at the queue's
    clock finds that much more time gone, so a wait past a limit is refused at once instead of being waited out."""
    queue = owner.queue
    if leap_s:
        queue.clock = LeapingClock(queue.clock(), leap_s)
    other = queue.enter("run", owner="other session")
    assert queue.wait(other, 30)
    try:
        yield queue
    finally:
        queue.release(other)


def test_a_run_that_waits_too_long_is_refused(
    monkeypatch: pytest.MonkeyPatch, fresh_device_owner: OwnersOfATest
) -> None:
    monkeypatch.setenv("EXPLORER_MAX_WAIT_S", "1")
    at = new_app()
    device_link()  # the test's owner, started now
    with device_held_elsewhere(fresh_device_owner.latest, leap_s=TICK_S) as queue:
        press_run(at, prompt="Hi.", max_new_tokens=1)
    errors = shown_errors(at)
    assert len(errors) == 1 and "Waited 1 s for the device and 1 turn(s) are still ahead: nothing ran" in errors[0]
    assert ui_state.RUN not in at.session_state
    assert queue.turns[-1].ended == "released" and queue.turns[-2].ended == "cancelled"


def test_a_lab_makes_way_for_every_job_waiting_and_a_run_for_one_pass_jobs_only() -> None:
    """`Turn.make_way`: a lab between two units lets every waiting job go first and waits at the back; a Run between
    two passes lets only the one-pass jobs (Next token, Prefill) go first and resumes ahead of the rest."""
    owner = Owner()
    order: list[str] = []

    def waiting(what: str, passes: int | None) -> threading.Thread:
        def visitor() -> None:
            ticket = owner.queue.enter(what, owner=what, passes=passes)
            assert owner.queue.wait(ticket, 30)
            order.append(what)
            owner.queue.release(ticket)

        thread = threading.Thread(target=visitor)
        thread.start()
        deadline = time.monotonic() + 10
        while owner.queue.status(Ticket(0, "")).ahead < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        return thread

    job = Job(owner, "lab", {})
    with job.turn("lab") as turn:
        visitor = waiting("run", passes=8)
        turn.make_way(everyone=True)  # between two units: the Run goes first, then the lab has the device again
        order.append("lab")
        visitor.join(10)
        assert order == ["run", "lab"] and owner.queue.holds(turn.ticket)
        before = turn.ticket
        turn.make_way(everyone=True)  # nobody waiting: the lab keeps its turn
        assert turn.ticket == before
    order.clear()
    run = Job(owner, "run", {})
    with run.turn("run", passes=8, makes_way=True) as turn:
        other_run, step = waiting("another run", passes=8), waiting("step", passes=1)
        turn.make_way()  # between two passes: the step goes first, the other Run waits for this one's end
        order.append("run")
    for thread in (other_run, step):
        thread.join(10)
    assert order == ["step", "run", "another run"]


@pytest.mark.usefixtures("hosted_env")
def test_a_hosted_lab_over_the_caps_is_refused_before_it_takes_the_device(fresh_device_owner: OwnersOfATest) -> None:
    at = new_app().switch_page("pages/batching.py").run()
    at.button(key="batch-run").click().run()  # the page's defaults: batches up to 32, a 600 s budget
    assert not at.exception
    errors = shown_errors(at)
    assert len(errors) == 1 and "\n" not in errors[0] and "batches of at most 8" in errors[0]
    assert "explorer_batch_result" not in at.session_state
    assert fresh_device_owner.started == []  # refused by the page: no job was sent (the owner refuses one too)


@pytest.mark.usefixtures("hosted_env")
def test_hosted_visitors_cannot_switch_device_or_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    at = new_app()
    device, dtype = at.sidebar.selectbox(key="sidebar-device"), at.sidebar.selectbox(key="sidebar-dtype")
    assert device.disabled and dtype.disabled  # fixed: another dtype would evict everyone's model
    assert (device.options, dtype.options) == ([ui_state.RunInputs().device], [ui_state.RunInputs().dtype])
    monkeypatch.setenv("EXPLORER_ALLOW_DEVICE_CHOICE", "1")  # the operator allows a choice
    at.run()
    assert not at.sidebar.selectbox(key="sidebar-dtype").disabled
    assert len(at.sidebar.selectbox(key="sidebar-dtype").options) > 1


def test_remeasuring_while_the_wait_is_too_long_is_one_line(
    monkeypatch: pytest.MonkeyPatch, fresh_device_owner: OwnersOfATest
) -> None:
    monkeypatch.setenv("EXPLORER_MAX_WAIT_S", "1")
    at = new_app()
    device_link()  # the test's owner, started now
    with device_held_elsewhere(fresh_device_owner.latest, leap_s=TICK_S):
        next(b for b in at.sidebar.button if b.label == "Re-measure device figures").click().run()
    assert not at.exception
    errors = shown_errors(at)
    assert len(errors) == 1 and "Waited 1 s for the device" in errors[0]


def test_the_first_conversion_tells_a_visitor_no_server_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    from explorer.models import loading

    class Saved:
        """Stands in for the tokenizer and the dequantized model: only what the conversion calls."""

        def save_pretrained(self, folder: Path) -> None:
            for name in ("config.json", "model.safetensors"):
                (Path(folder) / name).write_text("{}")

    monkeypatch.setattr(loading, "embedded_folder", lambda: tmp_path / "private-cache" / "embedded")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Saved())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Saved())
    lines: list[str] = []
    target = loading.ensure_embedded_converted(lambda _fraction, text: lines.append(text))
    assert (target / "model.safetensors").exists() and len(lines) == 3
    assert not any(str(tmp_path) in line or "private-cache" in line for line in lines), lines
