"""The Room's store, pure: codes, joins, one prompt per person per round, the caps, rounds that start, end or reopen,
expiry on an injected clock, people who leave, and many sessions at once."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from explorer.core.errors import BadInput
from explorer.core.trace import JsonRecord
from explorer.hosting.settings import HostedPolicy
from explorer.labs.room_store import (
    CODE_PATTERN,
    DONE,
    IDLE_S,
    MAX_ROUND_SIZE,
    OPEN,
    PRESENTER,
    RUNNING,
    RUNNING_LIMIT_S,
    NotAMember,
    RoomStore,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@dataclass(frozen=True)
class Result(JsonRecord):
    """Stands in for a round's record: the store keeps any JSON record."""

    value: int

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> RoomStore:
    return RoomStore(clock=clock)


def one_line(exc: pytest.ExceptionInfo[BadInput]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.endswith("."), text
    return text


def test_a_room_gets_a_short_code_its_opener_presents_and_round_1_is_open(store: RoomStore) -> None:
    views = [store.open_room(f"presenter {k}") for k in range(40)]
    assert all(CODE_PATTERN.match(v.code) for v in views)
    assert len({v.code for v in views}) == 40  # each room its own code
    first = views[0]
    assert first.is_presenter and first.participant == PRESENTER and first.members == 1
    assert (first.current.number, first.current.state, first.current.size, first.finished) == (1, OPEN, 0, ())


def test_a_code_already_in_use_is_drawn_again(clock: Clock) -> None:
    codes: Iterator[str] = iter(["AAAAA", "AAAAA", "BBBBB"])
    store = RoomStore(clock=clock, make_code=lambda: next(codes))
    assert [store.open_room("a").code, store.open_room("b").code] == ["AAAAA", "BBBBB"]


def test_people_are_numbered_in_the_order_they_join_and_joining_again_changes_nothing(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    assert store.view(code, "b").participant == 2
    assert store.view(code.lower(), "c").participant == 3  # a code typed in lower case, or with spaces
    assert store.view(f" {code[:2]} {code[2:]} ", "b").participant == 2
    view = store.view(code, "presenter")
    assert view.is_presenter and view.members == 3


def test_a_member_token_brings_back_the_same_person_and_the_head_count_counts_people(store: RoomStore) -> None:
    opened = store.open_room()
    joined = store.join(opened.code)
    assert (opened.participant, joined.participant, joined.members) == (PRESENTER, 2, 2)
    assert len({opened.member, joined.member}) == 2 and len(joined.member) >= 22  # minted apart, 128 bits each
    store.submit(opened.code, joined.member, "my prompt", None)
    for _ in range(3):  # reloads, a discarded tab, a second tab: the same person each time
        back = store.rejoin(opened.code.lower(), joined.member)
        assert (back.participant, back.members, back.member) == (2, 2, joined.member)
        assert back.current.prompt_of(back.participant) == "my prompt"
    assert store.rejoin(opened.code, opened.member).is_presenter
    assert store.status(opened.code).members == 2  # type: ignore[union-attr]


def test_a_token_the_room_does_not_know_is_refused_in_one_line_and_joins_nobody(store: RoomStore) -> None:
    here, there = store.open_room(), store.open_room()
    for token in ("made-up", there.member, ""):
        with pytest.raises(NotAMember) as refused:
            store.rejoin(here.code, token)
        assert one_line(refused) == (
            f"This link's member token is not one of room {here.code}'s: you join it as someone new."
        )
    assert store.status(here.code).members == 1  # type: ignore[union-attr]
    assert store.join(here.code).participant == 2  # what the page does next
    with pytest.raises(BadInput, match="There is no room ZZZZZ"):  # a bad room is the room's line, not the token's
        store.rejoin("ZZZZZ", here.member)


def test_a_bad_unknown_or_closed_code_is_one_line(store: RoomStore, clock: Clock) -> None:
    for bad in ("", "ABC", "ABCD0", "ABCDEF", "AB/CD"):
        with pytest.raises(BadInput) as exc:
            store.view(bad, "b")
        assert "5 letters and digits" in one_line(exc)
    with pytest.raises(BadInput) as exc:
        store.view("ZZZZZ", "b")
    assert "There is no room ZZZZZ" in one_line(exc)
    code = store.open_room("presenter").code
    clock.now_s += IDLE_S + 1
    with pytest.raises(BadInput) as exc:
        store.view(code, "b")
    assert f"Room {code} has closed" in one_line(exc) and "30 minutes" in str(exc.value)


def test_one_prompt_per_person_per_round_a_later_one_replaces_it(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    store.view(code, "b")
    store.submit(code, "presenter", "first", None)
    store.submit(code, "b", "second", None)
    current = store.submit(code, "presenter", "  first, edited  ", None)
    assert current.size == 2
    assert [(s.participant, s.prompt) for s in current.submissions] == [(1, "first, edited"), (2, "second")]


def test_an_empty_prompt_or_a_stranger_is_refused_in_one_line(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    with pytest.raises(BadInput) as exc:
        store.submit(code, "presenter", " \n ", None)
    assert "The prompt is empty" in one_line(exc)
    with pytest.raises(BadInput) as exc:
        store.submit(code, "never joined", "hello", None)
    assert "you have not joined it" in one_line(exc)


def test_a_full_round_refuses_a_new_prompt_but_takes_a_replacement(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    for member in "bc":
        store.view(code, member)
    store.submit(code, "presenter", "one", 2)
    store.submit(code, "b", "two", 2)
    with pytest.raises(BadInput) as exc:
        store.submit(code, "c", "three", 2)
    assert "Round 1 is full (2 prompts" in one_line(exc)
    assert store.submit(code, "b", "two, again", 2).prompt_of(2) == "two, again"


def test_without_a_server_cap_the_stores_own_limit_holds(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    for k in range(MAX_ROUND_SIZE):
        store.view(code, f"m{k}")
        store.submit(code, f"m{k}", f"prompt {k}", None)
    store.view(code, "late")
    with pytest.raises(BadInput, match=f"full \\({MAX_ROUND_SIZE} prompts"):
        store.submit(code, "late", "one too many", 0)  # 0 from a setting means no server cap, not zero prompts


def test_only_the_presenter_starts_a_round_and_never_an_empty_one(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    store.view(code, "b")
    with pytest.raises(BadInput) as exc:
        store.start_round(code, "presenter")
    assert "no prompts yet" in one_line(exc)
    store.submit(code, "b", "hello", None)
    with pytest.raises(BadInput) as exc:
        store.start_round(code, "b")
    assert "Only the presenter" in one_line(exc)
    started = store.start_round(code, "presenter")
    assert started.state == RUNNING and started.prompt_of(2) == "hello"


def test_a_started_round_takes_no_prompt_and_does_not_start_twice(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    store.submit(code, "presenter", "hello", None)
    store.start_round(code, "presenter")
    with pytest.raises(BadInput) as exc:
        store.submit(code, "presenter", "another", None)
    assert "Round 1 has started" in one_line(exc) and "round 2" in str(exc.value)
    with pytest.raises(BadInput) as exc:
        store.start_round(code, "presenter")
    assert "already running" in one_line(exc)


def test_a_finished_round_is_kept_and_the_next_one_opens(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    store.submit(code, "presenter", "hello", None)
    before = store.view(code, "presenter").rounds_version
    store.start_round(code, "presenter")
    store.finish_round(code, 1, Result(7))
    view = store.view(code, "presenter")
    assert view.rounds_version > before  # a page polling the room redraws
    assert [(r.number, r.state, r.result) for r in view.finished] == [(1, DONE, Result(7))]
    assert (view.current.number, view.current.state, view.current.size) == (2, OPEN, 0)
    store.finish_round(code, 1, Result(8))  # a late or repeated finish changes nothing
    assert store.view(code, "presenter").finished[0].result == Result(7)


def test_a_round_that_did_not_finish_reopens_with_its_prompts(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    store.submit(code, "presenter", "hello", None)
    store.start_round(code, "presenter")
    store.reopen_round(code, 1, "Round 1 did not finish: start it again.")
    current = store.view(code, "presenter").current
    assert (current.state, current.prompt_of(1), current.note) == (
        OPEN,
        "hello",
        "Round 1 did not finish: start it again.",
    )


def test_rooms_close_when_idle_but_never_while_a_round_runs(store: RoomStore, clock: Clock) -> None:
    code = store.open_room("presenter").code
    store.submit(code, "presenter", "hello", None)
    store.start_round(code, "presenter")
    clock.now_s += IDLE_S + 60
    assert store.status(code) is not None  # running: not idle
    clock.now_s += RUNNING_LIMIT_S  # a run that never ended (its thread died): the round reopens
    status = store.status(code)
    assert status is not None and status.current.state == OPEN and "did not finish" in status.current.note
    clock.now_s += IDLE_S + 1
    assert store.status(code) is None


def test_a_room_in_use_stays_open_and_prompts_left_too_long_expire(store: RoomStore, clock: Clock) -> None:
    code = store.open_room("presenter").code
    store.view(code, "b")
    store.submit(code, "b", "left behind", None)
    for _ in range(3):  # the presenter's page is drawn every 20 minutes: the room stays
        clock.now_s += 20 * 60
        store.view(code, "presenter")
    assert store.view(code, "presenter").current.size == 0  # b's prompt, 60 minutes old, has expired


def test_someone_who_leaves_takes_nothing_from_the_others(store: RoomStore, clock: Clock) -> None:
    code = store.open_room("presenter").code
    for member in ("b", "c"):
        store.view(code, member)
        store.submit(code, member, f"from {member}", None)
    store.start_round(code, "presenter")
    store.finish_round(code, 1, Result(3))
    clock.now_s += IDLE_S / 2  # b's tab closed, and so did the presenter's: neither comes back
    seen = store.view(code, "c")
    assert seen.participant == 3 and seen.finished[0].result == Result(3) and seen.members == 3


def test_a_server_opens_at_most_its_rooms(clock: Clock) -> None:
    store = RoomStore(clock=clock, max_rooms=2)
    store.open_room("a")
    store.open_room("b")
    with pytest.raises(BadInput) as exc:
        store.open_room("c")
    assert "2 rooms open, its most" in one_line(exc)
    clock.now_s += IDLE_S + 1  # idle rooms close and make space
    assert store.open_room("c").is_presenter


def test_many_sessions_at_once_fill_a_round_exactly_to_its_cap(store: RoomStore) -> None:
    code = store.open_room("presenter").code
    accepted, refused = [], []
    go = threading.Barrier(16)

    def visitor(k: int) -> None:
        go.wait()
        number = store.view(code, f"m{k}").participant
        try:
            store.submit(code, f"m{k}", f"prompt {k}", 8)
            accepted.append(number)
        except BadInput:
            refused.append(number)

    threads = [threading.Thread(target=visitor, args=(k,)) for k in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(accepted) == 8 and len(refused) == 8
    assert sorted(accepted + refused) == list(range(2, 18))  # every number given once
    assert sorted(s.participant for s in store.view(code, "presenter").current.submissions) == sorted(accepted)


def test_the_round_size_cap_is_a_hosted_setting() -> None:
    hosted = HostedPolicy.from_env({"EXPLORER_HOSTED": "1"})
    assert hosted.max_room_size == 8 and "Room rounds of up to 8 prompts" in "; ".join(hosted.caps_lines())
    assert HostedPolicy.from_env({"EXPLORER_HOSTED": "1", "EXPLORER_MAX_ROOM_SIZE": "3"}).max_room_size == 3
    assert HostedPolicy.from_env({"EXPLORER_HOSTED": "1", "EXPLORER_MAX_ROOM_SIZE": "0"}).max_room_size is None
    assert HostedPolicy.from_env({}).max_room_size is None  # locally: the store's own limit
    with pytest.raises(BadInput, match="EXPLORER_MAX_ROOM_SIZE must be a whole number"):
        HostedPolicy.from_env({"EXPLORER_HOSTED": "1", "EXPLORER_MAX_ROOM_SIZE": "many"})


def test_the_rooms_web_tier_modules_import_no_torch() -> None:
    """The store, the round's records and asks, the room-size model and the Room's charts are what a web process
    holds and draws; the engine that serves a round lives on the device owner (`explorer.owner.room`)."""
    code = (
        "import sys\n"
        "import explorer.labs.room_store, explorer.labs.room_records, explorer.owner.room_size, explorer.charts.room\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch or transformers imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
