"""The Room page's sections: opening or joining a room by its code (`?room=CODE`), your prompt for the open round, the
presenter's start (the round as one job on the device owner, in one turn), a live line that redraws the page when a
round ends, and each finished round as you may see it: your request inside the shared steps, a lane per person, the
tokens of each step and the step time against the batch size.

Privacy: a prompt is its author's. Everyone sees their own request whole and the others as anonymous lanes
("participant 3") with times and counts only, in charts, tables and downloads alike. The presenter's screen is the
same until the presenter switches on "Show the round's prompts and answers" (off by default, and the room is told
that the presenter can): seeing what was asked makes the lanes concrete (a long answer keeps its lane decoding), but
a projector should never show a typed prompt by accident.
"""

from __future__ import annotations

import streamlit as st

from explorer.charts import room as charts
from explorer.core.errors import BadInput
from explorer.core.units import short_time
from explorer.labs.room_engine import EngineRound
from explorer.labs.room_records import (
    RoomRound,
    RoundAsk,
    RoundPrompt,
    split_passage,
)
from explorer.labs.room_store import RUNNING, NotAMember, RoomStore, RoomView, Round
from explorer.remote import engine as local_engine
from explorer.ui.admission import DeviceAsk, ask_owner
from explorer.ui.room_engine_view import engine_results, engine_target, round_on_engine
from explorer.ui.room_long_view import long_round, long_round_controls
from explorer.ui.shared import hosting_policy
from explorer.ui.slo_state import current_slos_s
from explorer.ui.state import ROOM_CODE, ROOM_MEMBER, last_inputs
from explorer.ui.widgets import chart, metrics, show_error, table

ROOM_PARAM = "room"  # ?room=CODE: the link participants open
MEMBER_PARAM = "me"  # ?room=CODE&me=TOKEN: a member's personal link, which a reload or a discarded tab comes back to
POLL_S = 2.0  # how often an open Room page checks whether a round has started or ended
DEFAULT_NEW_TOKENS = 16
PRIVACY = (
    "Prompts stay private: you see your own request whole and everyone else as an anonymous lane. The presenter can "
    "choose to show the round's prompts and answers on their screen, so type nothing you would not show the room."
)
PERSONAL_LINK = (
    "This page's address is your personal link: it keeps you as the same person across reloads. Share the room's "
    "link above, not the address bar."
)


def member() -> str | None:
    """This session's member token in the room it is in (None before it joins one)."""
    return ROOM_MEMBER.get()


@st.cache_resource(show_spinner=False)
def room_store() -> RoomStore:
    """This web process's rooms, shared by all its sessions (each session's script runs in a thread of its own):
    web-tier state, which the device owner never holds; it serves one round at a time, as a job. Tests clear it
    (`room_store.clear()`) to start from no rooms."""
    return RoomStore()


def enter(view: RoomView) -> None:
    """This session is `view`'s member: kept across pages, and in the address bar as their personal link."""
    ROOM_CODE.set(view.code)
    ROOM_MEMBER.set(view.member)
    for param, value in ((ROOM_PARAM, view.code), (MEMBER_PARAM, view.member)):  # other parameters are untouched
        if st.query_params.get(param) != value:
            st.query_params[param] = value


def leave() -> None:
    ROOM_CODE.pop()
    ROOM_MEMBER.pop()
    for param in (ROOM_PARAM, MEMBER_PARAM):
        if param in st.query_params:
            del st.query_params[param]


def current_room() -> RoomView | None:
    """The room this session is in, as its member sees it: the link's `?room=CODE&me=TOKEN` first, else the room and
    member this session joined before (another page and back). A link without a token, or with one the room does
    not know (one line says so), joins its visitor as someone new. An unknown, malformed or closed code is one line,
    and the session leaves it."""
    code = st.query_params.get(ROOM_PARAM) or ROOM_CODE.get()
    if not code:
        return None
    token = st.query_params.get(MEMBER_PARAM)
    if token is None and ROOM_CODE.get() == code:
        token = member()
    try:
        view = rejoin(code, token) if token else None
        if view is None:
            view = room_store().join(code)
    except BadInput as exc:
        show_error(str(exc))
        leave()
        return None
    enter(view)
    return view


def rejoin(code: str, token: str) -> RoomView | None:
    """The token's member, or None after one line when the room does not know it (the caller joins someone new)."""
    try:
        return room_store().rejoin(code, token)
    except NotAMember as exc:
        show_error(str(exc))
        return None


def open_or_join() -> None:
    """Without a room: open one (you present) or join one by its code."""
    left, right = st.columns(2)
    left.subheader("Present")
    left.caption("Open a room: you get a short code and a link for everyone, and you start each round.")
    opened = left.button("Open a room", key="room-open", type="primary")
    right.subheader("Join")
    with right.form("room-join", border=False):
        code = st.text_input("Room code", key="room-code", placeholder="K7QX2")
        joined = st.form_submit_button("Join", key="room-join-submit")
    try:
        if opened:
            enter(room_store().open_room())
        elif joined:
            enter(room_store().join(code))
        else:
            return
    except BadInput as exc:
        show_error(str(exc))
        return
    st.rerun()


def room_link(code: str) -> str:
    """The link participants open: this page's address in the presenter's browser, with the room's code."""
    page = st.context.url
    return f"{page}?{ROOM_PARAM}={code}" if page else f"/room?{ROOM_PARAM}={code}"


def room_header(view: RoomView) -> None:
    """Who you are in the room. The presenter, who projects it, gets the code and counts large with the room's link;
    a participant, often on a phone, one line, so their prompt box comes next in their first screen."""
    if not view.is_presenter:
        st.markdown(
            f"**You are participant {view.participant}** in room {view.code} · {people(view.members)} · round "
            f"{view.current.number} takes prompts"
        )
        return
    metrics(
        [
            ("Room code", view.code, "type it on the Room page, or open the link below"),
            ("People", str(view.members), "who have joined by the room's link, each counted once (you included)"),
            ("Open round", str(view.current.number), "the round that takes prompts now"),
        ]
    )
    st.code(room_link(view.code), language=None)


def people(count: int) -> str:
    return "1 person" if count == 1 else f"{count} people"


def room_footer(view: RoomView) -> None:
    """The room's link (a participant's, below their prompt), what is private, the personal link, and a way out."""
    if view.is_presenter:
        role = "You opened this room: you start its rounds."
    else:
        st.code(room_link(view.code), language=None)
        role = f"You are participant {view.participant}."
    st.caption(f"{role} Anyone with the room's link joins, no account. {PRIVACY} {PERSONAL_LINK}")
    if st.button("Leave this room", key="room-leave"):
        leave()
        st.rerun()


# --- the open round ------------------------------------------------------------------------------------------------
def prompt_panel(view: RoomView) -> None:
    """Your prompt for the open round: one per person per round, a later one replaces it."""
    mine = view.current.prompt_of(view.participant)
    with st.form("room-prompt"):
        text = st.text_area("Your prompt", value=mine or "", key="room-prompt-text", height=90)
        label = "Replace my prompt" if mine else "Submit my prompt"
        sent = st.form_submit_button(label, type="primary", key="room-submit")
    if sent:
        submit(view, text)
    elif mine is not None:
        st.caption(f"Your prompt is in round {view.current.number}: the presenter starts the round.")


def submit(view: RoomView, text: str) -> None:
    try:
        policy = hosting_policy()
        policy.check_prompt_chars(text)  # before anything keeps it
        room_store().submit(view.code, view.member, text, policy.max_room_size)
    except BadInput as exc:
        show_error(str(exc))
        return
    st.rerun()  # the form again, with this prompt in it and the round's count


def presenter_panel(view: RoomView) -> RoomView:
    """The presenter's start: how many new tokens each answer gets, and the button that serves the round. The room
    as the rest of the page draws it: read again after a start that did not finish (its line stays on screen)."""
    if not view.is_presenter:
        return view
    cap = hosting_policy().max_new_tokens or 256
    left, right = st.columns([1, 2])
    new_tokens = left.number_input(
        "New tokens per answer",
        1,
        cap,
        min(DEFAULT_NEW_TOKENS, cap),
        key="room-new-tokens",
        help="greedy; an answer that ends sooner (end-of-sequence) leaves the batch",
    )
    target = engine_target()
    on_engine = target is not None and right.toggle(
        f"Serve the round on the engine at {target[0]}",
        key="room-on-engine",
        help="Every prompt sent at once to a serving engine (vLLM), one streamed request per person, instead of this "
        "device's model: the path for a room past one machine.",
    )
    if on_engine:
        right.caption(
            "Start sends every prompt of the round at once to the engine, one streamed request each, then each prompt "
            "alone, to compare the tokens."
        )
    else:
        right.caption(
            "Start serves every prompt of the round together through transformers' continuous batching engine, then "
            "each prompt alone through the same engine: one turn on the device. Clicking anything meanwhile stops it."
            + ("" if target is not None else f" A serving engine instead: {local_engine.START_HINT}.")
        )
    long_tokens, chunk_budget = (None, None) if on_engine else long_round_controls()
    # Below every control of the round (the long prompts' too), so it is the last thing the presenter sets.
    if not st.button(f"Start round {view.current.number}", key="room-start", type="primary"):
        return view
    start_round(view, int(new_tokens), target if on_engine else None, long_tokens, chunk_budget)
    try:
        return room_store().rejoin(view.code, view.member)
    except BadInput:  # closed meanwhile: the page's next run says so
        return view


def start_round(
    view: RoomView,
    new_tokens: int,
    on_engine: tuple[str, str] | None = None,
    long_tokens: int | None = None,
    chunk_budget: int | None = None,
) -> None:
    """The round on the device (or on the engine at `on_engine`): fixed now, served, kept in the room; reopened (its
    prompts kept) if it was refused, failed or cut off, so the presenter can start it again. `long_tokens`: everyone's
    prompt long, arriving in turn; `chunk_budget`: that round served again chunked (`long_round_controls`)."""
    store = room_store()
    try:
        policy = hosting_policy()
        if policy.max_new_tokens is not None and new_tokens > policy.max_new_tokens:
            raise BadInput(f"This server makes at most {policy.max_new_tokens} new tokens per answer: lower it.")
        started = store.start_round(view.code, view.member)
    except BadInput as exc:
        show_error(str(exc))
        return
    inputs = last_inputs()  # the room runs on the model, dtype and chat-template choice of the sidebar's last run
    prompts = tuple(RoundPrompt(s.participant, s.prompt) for s in started.submissions)
    ask = RoundAsk(
        view.code,
        started.number,
        prompts,
        new_tokens,
        inputs.use_chat_template,
        policy.max_prompt_tokens,
        long_tokens,
        chunk_budget,
    )
    result: RoomRound | EngineRound | None = None
    try:
        if on_engine is not None:
            result = round_on_engine(ask, *on_engine)
        else:
            done = ask_owner(DeviceAsk("room", f"Round {started.number}", inputs), "room", {"round": ask.to_dict()})
            result = None if done is None else RoomRound.from_dict(done)
    finally:  # also on a click or a closed tab mid-round (the owner drops the job): the round must not stay "running"
        if result is None:
            store.reopen_round(view.code, started.number, f"Round {started.number} did not finish: start it again.")
        else:
            store.finish_round(view.code, started.number, result)
    if result is not None:
        st.rerun()  # every section again, from the round's record


@st.fragment(run_every=POLL_S)
def watch(code: str, rounds_version: int) -> None:
    """A live line about the open round; the whole page redraws when a round starts, ends or reopens (or the room
    closes). Only this line redraws between those: cheap for a room of thirty, and nothing heavy draws while a
    round's steps are timed."""
    status = room_store().status(code)
    if status is None or status.rounds_version != rounds_version:
        st.rerun()
    current = status.current
    if current.state == RUNNING:
        st.info(f"Round {current.number} is running on the device with {current.size} prompts: results appear here.")
        return
    note = f"{current.note} " if current.note else ""
    st.caption(f"{note}Round {current.number}: {current.size} prompt(s) in · {status.members} people in the room.")


def live_line(view: RoomView) -> None:
    watch(view.code, view.rounds_version)


# --- a finished round ----------------------------------------------------------------------------------------------
def chosen_round(view: RoomView) -> Round | None:
    """The newest finished round, or another chosen from the room's list."""
    if not view.finished:
        st.info("No round has run in this room yet: once the presenter starts one, every request appears here.")
        return None
    numbers = [r.number for r in reversed(view.finished)]
    number = numbers[0] if len(numbers) == 1 else st.selectbox("Round", numbers, key=f"room-round-{numbers[0]}")
    return next(r for r in view.finished if r.number == number)


def results(view: RoomView) -> None:
    finished = chosen_round(view)
    if finished is None or not isinstance(finished.result, RoomRound | EngineRound):
        return
    show = view.is_presenter and st.toggle(
        "Show the round's prompts and answers",
        key="room-show-prompts",
        help="Off: anonymous lanes only, as every participant sees them. The room was told you can.",
    )
    if isinstance(finished.result, EngineRound):
        engine_results(finished.result.seen_by(view.participant, show_prompts=show), view.participant, show)
        return
    run = finished.result.seen_by(view.participant, show_prompts=show)
    your_request(run, view.participant)
    long_round(run, view.participant)
    schedule_sections(run, view.participant)
    everyone(run, view.participant, show)


def your_request(run: RoomRound, viewer: int) -> None:
    """Your TTFT and ITL in the round against alone, and the steps your tokens rode in."""
    left_out = run.left_out_of(viewer)
    if left_out is not None:
        st.warning(left_out.reason)
    seat, lane = run.seat(viewer), run.lane_of(viewer)
    if seat is None or lane is None:
        st.subheader(f"Round {run.number}: {len(run.lanes)} requests")
        st.caption("You sent no prompt to this round: below, everyone's requests as anonymous lanes.")
        return
    st.subheader(f"Round {run.number}: your request among {len(run.lanes)}")
    batch = "n/a" if seat.batch is None else f"{seat.batch:g}"
    metrics(
        [
            ("Your TTFT", short_time(seat.ttft_s), "measured: handed to the engine to your first token, in the round"),
            ("TTFT alone", short_time(seat.alone_ttft_s), "measured: your prompt served alone by the same engine"),
            (f"Your ITL p50 (batch of {batch})", short_time(seat.itl_p50_s), "measured: median gap, in the round"),
            ("ITL p50 alone", short_time(seat.alone_itl_p50_s), "measured: median gap, your prompt served alone"),
            ("Steps you rode", f"{len(seat.steps)} of {seat.total_steps}", "engine steps that carried your tokens"),
            ("Same tokens alone", "yes" if seat.same_tokens else "NO", "the round's tokens equal your alone run's"),
        ]
    )
    st.caption(
        f"{seat.sentence()} Your tokens rode in engine steps {seat.steps_text} (of 0–{seat.total_steps - 1}), your "
        "row outlined below. — *measured*"
    )
    passage, own = split_passage(lane.prompt_text)
    after = f" (after a shared passage of {len(passage.split()):,} words)" if passage else ""
    st.text(f"Your prompt{after}: {own}\nThe answer: {lane.answer_text}")  # text: never markdown
    if lane.difference:
        st.text(lane.difference)


def schedule_sections(run: RoomRound, viewer: int) -> None:
    """The shared schedule: a lane per person, the tokens of each step, the step time against the batch size."""
    you = run.lane_of(viewer) is not None
    lanes = charts.lanes_frame(run, viewer)
    chart(
        charts.lanes_chart(lanes, charts.lane_order(run, viewer)),
        lanes,
        "room-lanes",
        "One row per person, one column per engine step (one forward pass): a cell where the step carried that "
        "person's tokens, prefill orange, decode green. "
        + (
            "Your row is outlined; every column in it is one pass you shared with the rows lit beside it."
            if you
            else ""
        ),
        "measured: the engine's scheduled batches",
    )
    tokens = charts.tokens_frame(run, viewer)
    chart(
        charts.tokens_chart(tokens),
        tokens,
        "room-steps",
        "The tokens each forward pass computed, stacked by person (white seams).",
        "measured: tokens from the engine's scheduled batch",
    )
    chart(
        charts.step_times_chart(tokens),
        tokens,
        "room-step-times",
        "Each forward pass's time, the same steps as above, against how many people it carried.",
        "measured: time around the engine's forward and sampling",
    )
    batches = charts.batch_frame(run)
    chart(
        charts.batch_chart(batches),
        batches,
        "room-batch",
        run.batch_sentence(),
        "measured: the round's decode-only steps, and each prompt's decode steps alone",
    )


def everyone(run: RoomRound, viewer: int, show_prompts: bool) -> None:
    """Every request's figures, the prompts this viewer may see, the round's record, and where it was measured."""
    if any(lane.token_times_s for lane in run.lanes):
        ttft_slo_s, tpot_slo_s = current_slos_s()
        st.markdown(f"**Goodput of the round:** {run.goodput(ttft_slo_s, tpot_slo_s).sentence()} (measured).")
    table(
        charts.seats_frame(run, viewer),
        "Every request: TTFT and ITL p50 in the round and alone, the batch its decode tokens rode in (median), the "
        "steps that carried it, and whether its tokens equal its alone run's.",
        "measured",
    )
    if show_prompts:
        table(charts.prompts_frame(run, viewer), "The round's prompts and answers, shown by the presenter.", "as typed")
    load = "" if run.load_avg_1m is None else f"; 1-minute load average {run.load_avg_1m:.1f} as it finished"
    st.text(  # text, not markdown: the model name is whatever was typed
        f"{run.model} · {run.dtype} on {run.device} · transformers {run.transformers_version} · greedy, "
        f"{'chat template' if run.chat_template else 'no chat template'}, up to {run.max_new_tokens} new tokens · "
        f"every figure measured on a machine other sessions may share{load}"
    )
    st.download_button(
        f"Download round {run.number} (JSON)",
        run.to_json(),
        file_name=f"room-{run.code}-round-{run.number}.json",
        mime="application/json",
        key="room-json",
        on_click="ignore",
    )
