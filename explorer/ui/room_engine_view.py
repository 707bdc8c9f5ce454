"""The Room page's round on a serving engine (vLLM from `./run vllm`, or the operator's allowed endpoint): which engine
the presenter can send a round to, the round sent from this web process, and each person's figures as the engine
served them (`explorer.labs.room_engine`)."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from explorer.core.errors import BadInput, ExplorerError
from explorer.core.units import short_time
from explorer.hosting import settings
from explorer.labs import room_engine
from explorer.labs.room_engine import EngineLane, EngineRound
from explorer.labs.room_records import RoundAsk
from explorer.remote import engine as local_engine
from explorer.ui.admission import count_run
from explorer.ui.widgets import metrics, show_error, table

ENGINE_LOOKUP_TTL_S = 10
ENGINE_LOOKUP_KEY = "room-engine-target"


def engine_target() -> tuple[str, str] | None:
    """(base URL, model) of the engine a round can be sent to: in hosted mode the operator's first allowed endpoint
    (a visitor never chooses where the server sends requests), else the vLLM `./run vllm` started; None without one.
    Kept in the session for a few seconds: finding it asks the engine over the network (/health, /models), and the
    presenter's page reruns on every click."""
    kept = st.session_state.get(ENGINE_LOOKUP_KEY)
    if kept is not None and time.monotonic() - kept[0] < ENGINE_LOOKUP_TTL_S:
        return kept[1]
    found = find_engine()
    st.session_state[ENGINE_LOOKUP_KEY] = (time.monotonic(), found)
    return found


def find_engine() -> tuple[str, str] | None:
    policy = settings.EndpointPolicy.from_env()
    url = (policy.allowed[0] if policy.allowed else None) if policy.hosted else local_engine.local_engine_url()
    if url is None:
        return None
    try:
        return url, room_engine.served_model(url)
    except BadInput:
        return None


def round_on_engine(ask: RoundAsk, base_url: str, model: str) -> EngineRound | None:
    """The round sent from this web process to the engine (as the Endpoint page sends a sweep): counted against the
    presenter's run limit; a failure is its one line, and None."""
    try:
        count_run()
        bar = st.progress(0.0, text="Sending the round to the engine…")
        result = room_engine.serve_round_on_engine(ask, base_url, model, lambda f, text: bar.progress(f, text=text))
        bar.empty()
        return result
    except ExplorerError as exc:
        show_error(str(exc))
        return None


# --- a round served by the engine --------------------------------------------------------------------------------
def engine_results(run: EngineRound, viewer: int | None, show_prompts: bool) -> None:
    """Your TTFT, ITL and cached tokens as the engine served the round, your tokens against its answer alone, and
    everyone's figures as anonymous rows."""
    lane = run.lane_of(viewer)
    st.subheader(f"Round {run.number}: {len(run.lanes)} requests served by the engine ({run.model})")
    if lane is None:
        st.caption("You sent no prompt to this round: below, everyone's requests as anonymous rows.")
    elif lane.error:
        show_error(f"Your request failed: {lane.error}")
    else:
        your_request(run, lane)
    if run.step_mix:  # from the engine's own /metrics, where it publishes them
        mix = ", ".join(f"{name} {value:g}" for name, value in run.step_mix.items())
        st.caption(f"The engine's steps during the round: {mix} — *reported (server)*")
    table(
        lanes_frame(run, viewer, show_prompts),
        "Every request of the round: TTFT and ITL p50 measured here, tokens and cached tokens as the engine reported "
        "them, and whether each answer equals the engine's answer to that prompt alone.",
        "measured (client) · reported (server)",
    )
    st.text(  # text, not markdown: the model name is the server's
        f"{run.model} on the engine at {run.base_url} · {run.api} API · greedy, up to {run.max_new_tokens} new "
        f"tokens · the round took {short_time(run.wall_s)} from the first send to the last answer (measured)"
    )
    st.download_button(
        f"Download round {run.number} (JSON)",
        run.to_json(),
        file_name=f"room-{run.code}-round-{run.number}-engine.json",
        mime="application/json",
        key="room-engine-json",
        on_click="ignore",
    )


def your_request(run: EngineRound, lane: EngineLane) -> None:
    cached = "not sent" if lane.cached_tokens is None else f"{lane.cached_tokens:,} of {lane.prompt_tokens or 0:,}"
    same = {True: "yes", False: "NO", None: "n/a"}[lane.same_tokens]
    metrics(
        [
            ("Your TTFT", short_time(lane.ttft_s), "measured (client): sending your request to its first chunk"),
            ("Your ITL p50", short_time(lane.itl_p50_s), "measured (client): median gap between your chunks"),
            ("Your new tokens", f"{lane.output_tokens}", "reported (server): usage.completion_tokens"),
            ("Your cached prompt tokens", cached, "reported (server): usage.prompt_tokens_details.cached_tokens"),
            (
                "Same tokens alone",
                same,
                "reported (server): your answer against its greedy one to your prompt alone",
            ),
        ]
    )
    sentence = room_engine.ttft_sentence(run.lanes)
    if sentence:
        st.caption(f"{sentence} — *measured (client)*")
    st.text(f"Your prompt: {lane.prompt_text}\nThe answer: {lane.answer_text}")  # text: never markdown
    if lane.difference:
        st.text(lane.difference)


def lanes_frame(run: EngineRound, viewer: int | None, show_prompts: bool) -> pd.DataFrame:
    """One row per person: the figures everyone may see; prompts and answers only where the presenter shows them."""
    return pd.DataFrame(
        [
            {
                "participant": x.participant,
                "you": x.participant == viewer,
                "ttft_ms": None if x.ttft_s is None else x.ttft_s * 1e3,
                "itl_p50_ms": None if x.itl_p50_s is None else x.itl_p50_s * 1e3,
                "new_tokens": x.output_tokens,
                "prompt_tokens": x.prompt_tokens,
                "cached_tokens": x.cached_tokens,
                "same_tokens_alone": x.same_tokens,
                **({"prompt": x.prompt_text, "answer": x.answer_text} if show_prompts else {}),
                "error": x.error,
            }
            for x in run.lanes
        ]
    )
