"""The Room page through AppTest: three sessions in one room (three AppTests sharing the test's one ServerSession),
each seeing its own request in the shared schedule; bad input as one line; a round that cannot run reopens."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.units import short_time
from explorer.labs.room_records import RoomRound
from explorer.labs.room_store import OPEN
from explorer.ui import state as ui_state
from explorer.ui.room_view import room_store
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnersOfATest

PAGE = "pages/room.py"
PROMPTS = {1: "Presenter here: name one tree.", 2: "Second person: name one river.", 3: "Third person: one bird?"}


def room_page(at: AppTest, code: str | None = None) -> AppTest:
    """`at` on the Room page, through the room's link when `code` is given."""
    if code is not None:
        at.query_params["room"] = code
    at.switch_page(PAGE).run()
    assert_no_error(at)
    return at


def assert_no_error(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def errors(at: AppTest) -> list[str]:
    """The error lines shown, as a reader reads them (the page escapes markdown in them)."""
    assert not at.exception, at.exception
    return [e.value.replace("\\", "") for e in at.error]


def submit(at: AppTest, prompt: str) -> AppTest:
    at.text_area(key="room-prompt-text").input(prompt)
    return at.button(key="room-submit").click().run()


def open_room(model_dir: Path | None = None) -> tuple[AppTest, str]:
    """A presenter's session on the Room page with a room open (its model: the sidebar's last run's)."""
    at = new_app()
    if model_dir is not None:
        at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(model=str(model_dir), device="cpu")
    room_page(at).button(key="room-open").click().run()
    assert_no_error(at)
    return at, at.session_state[ui_state.ROOM_CODE]


def page_text(at: AppTest) -> str:
    """Everything the page shows as text: markdown, captions, plain text, metrics and tables."""
    parts = [e.value for kind in ("markdown", "caption", "text", "subheader", "info") for e in at.get(kind)]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    parts += [d.value.to_csv() for d in at.dataframe]
    return "\n".join(str(p) for p in parts)


def test_three_sessions_in_one_room_each_see_their_own_request_in_the_shared_schedule(
    tiny_llama_dir: Path, fresh_device_owner: OwnersOfATest
) -> None:
    presenter, code = open_room(tiny_llama_dir)
    people = {1: presenter, 2: room_page(new_app(), code), 3: room_page(new_app(), code)}
    for number, at in people.items():
        assert at.session_state[ui_state.ROOM_CODE] == code and at.query_params["room"] in (code, [code])
        assert_no_error(submit(at, PROMPTS[number]))
    assert not [b for b in people[2].button if b.key == "room-start"]  # only the presenter starts a round
    presenter.number_input(key="room-new-tokens").set_value(4)
    presenter.button(key="room-start").click().run()
    assert_no_error(presenter)

    finished = room_store().view(code, "an observer").finished
    assert len(finished) == 1 and isinstance(finished[0].result, RoomRound)
    (owner,) = fresh_device_owner.started  # the round ran as one job on the device owner, in one turn
    assert [t.what for t in owner.owner.queue.turns] == ["room"] and not owner.owner.steps
    served = finished[0].result
    assert [lane.participant for lane in served.lanes] == [1, 2, 3] and served.all_same_tokens
    del people[1]  # the presenter leaves: the finished round stays for everyone else
    for number, at in [(1, presenter), *people.items()]:
        at.run()
        assert_no_error(at)
        seat = served.seat(number)
        assert seat is not None
        shown = {m.label: m.value for m in at.metric}
        assert shown["Your TTFT"] == short_time(seat.ttft_s) and shown["TTFT alone"] == short_time(seat.alone_ttft_s)
        assert shown["Steps you rode"] == f"{len(seat.steps)} of {len(served.steps)}"
        assert [s.value for s in at.subheader] == ["Round 1: your request among 3"]
        seats = next(d.value for d in at.dataframe if "person" in d.value.columns)
        others = sorted(n for n in PROMPTS if n != number)
        assert list(seats["person"]) == ["you", *(f"participant {n}" for n in others)]  # its own lane first
        lanes = [c for c in at.get("vega_lite_chart") if '"you"' in c.proto.spec or "datum.you" in c.proto.spec]
        assert lanes, "no chart outlines the viewer's own lane"
        text = page_text(at)
        assert PROMPTS[number] in text and not any(PROMPTS[n] in text for n in others)  # never another's prompt
        assert "Download round 1 (JSON)" in [b.proto.label for b in at.get("download_button")]


def test_bad_room_input_is_one_line_and_nothing_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    monkeypatch.setenv("EXPLORER_MAX_ROOM_SIZE", "1")
    stranger = room_page_with_errors(new_app(), "ZZZZZ")
    assert errors(stranger) == [
        "There is no room ZZZZZ on this server: check the code, or ask the presenter for the link."
    ]
    assert ui_state.ROOM_CODE not in stranger.session_state
    stranger.text_input(key="room-code").input("not a code")
    stranger.button(key="room-join-submit").click().run()
    assert len(errors(stranger)) == 1 and "5 letters and digits" in errors(stranger)[0]

    presenter, code = open_room()
    guest = room_page(new_app(), code)
    assert errors(submit(guest, "   ")) == ["The prompt is empty: type a prompt, then submit it."]
    assert_no_error(submit(presenter, "first in"))
    full = errors(submit(guest, "one too many"))
    assert len(full) == 1 and "Round 1 is full (1 prompts, this server's most)" in full[0]
    store = room_store()
    assert store.view(code, "an observer").current.size == 1
    store.start_round(code, presenter.session_state[ui_state.ROOM_MEMBER])  # as the presenter's Start would
    late = errors(submit(guest, "too late"))
    assert len(late) == 1 and "Round 1 has started" in late[0]
    assert "\n" not in full[0] + late[0]


def room_page_with_errors(at: AppTest, code: str) -> AppTest:
    at.query_params["room"] = code
    return at.switch_page(PAGE).run()


def test_a_round_that_cannot_run_is_one_line_and_reopens_with_its_prompts(tmp_path: Path) -> None:
    presenter, code = open_room(tmp_path / "no-model-here")
    assert_no_error(submit(presenter, "hello"))
    presenter.button(key="room-start").click().run()
    shown = errors(presenter)
    assert len(shown) == 1, shown
    current = room_store().view(code, "an observer").current
    assert current.state == OPEN and current.prompt_of(1) == "hello" and "did not finish" in current.note


def reopened(code: str, token: str | None) -> AppTest:
    """A new session (a reload, a tab the phone discarded) opening the personal link `?room=CODE&me=TOKEN`."""
    at = new_app()
    if token is not None:
        at.query_params["me"] = token
    return room_page_with_errors(at, code)


def param(at: AppTest, name: str) -> str:
    value = at.query_params[name]
    return value[0] if isinstance(value, list) else value


def test_a_reload_finds_the_same_member_by_the_link_and_the_room_counts_people_not_tabs() -> None:
    presenter, code = open_room()
    assert param(presenter, "me") == presenter.session_state[ui_state.ROOM_MEMBER]  # the presenter's own link
    guest = room_page(new_app(), code)
    token = param(guest, "me")  # the page switched its link to the guest's personal one
    assert param(guest, "room") == code and token == guest.session_state[ui_state.ROOM_MEMBER]
    assert "You are participant 2" in page_text(guest)
    assert_no_error(submit(guest, "Mine: name one lake."))
    store = room_store()
    for _ in range(2):  # a reload, then a second tab of the same link
        again = reopened(code, token)
        assert_no_error(again)
        assert "You are participant 2" in page_text(again) and param(again, "me") == token
        assert again.text_area(key="room-prompt-text").value == "Mine: name one lake."
    assert store.status(code).members == 2  # type: ignore[union-attr]


def test_an_unknown_member_token_is_refused_in_one_line_and_the_visitor_joins_as_someone_new() -> None:
    _, code = open_room()
    _, other_code = open_room()
    other_token = param(room_page(new_app(), other_code), "me")
    for number, token in ((2, "not-a-token"), (3, other_token)):  # made up, and one from another room
        visitor = reopened(code, token)
        assert errors(visitor) == [f"This link's member token is not one of room {code}'s: you join it as someone new."]
        assert f"You are participant {number}" in page_text(visitor)
        fresh = param(visitor, "me")
        assert fresh not in (token, other_token) and param(visitor, "room") == code
        assert_no_error(visitor.run())  # its next run is on its own new link: no line again
    assert room_store().status(code).members == 3  # type: ignore[union-attr]
