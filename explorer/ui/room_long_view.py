"""The Room's round of long prompts: the presenter's "everyone send a long prompt now" with its chunked-prefill switch,
and the chart of whose TPOT the others' long prefills pushed past the session's TPOT SLO, served whole and chunked."""

from __future__ import annotations

import streamlit as st

from explorer.charts import room as charts
from explorer.core.units import to_ms
from explorer.labs.room_records import BLOCK_SIZE, MAX_LONG_PROMPT_TOKENS, RoomRound
from explorer.ui.shared import hosting_policy
from explorer.ui.slo_state import current_slos_s
from explorer.ui.widgets import chart

DEFAULT_LONG_TOKENS = 1024  # long enough that its prefill on a CPU outlasts many decode steps (the hosted cap, 256)
LONG_HELP = (
    "Each person's prompt goes after a shared passage, to this many tokens (chat template included), and the prompts "
    "arrive one after another, each once the ones before it are decoding: every long prefill lands on the others' "
    "decodes. Sent all at once, they would all prefill together before anyone decodes, and nothing would stall."
)
CHUNK_HELP = (
    "The same long prompts served again, arriving the same way, with at most this many tokens computed per engine "
    "step: a long prefill is split into chunks that share steps with the others' decodes."
)


def long_round_controls() -> tuple[int | None, int | None]:
    """The presenter's "everyone send a long prompt now" (its length, within this server's prompt cap) and the
    chunked-prefill switch with its token budget: (long prompt tokens, chunk budget), None where switched off."""
    cap = min(hosting_policy().max_prompt_tokens or MAX_LONG_PROMPT_TOKENS, MAX_LONG_PROMPT_TOKENS)
    left, right = st.columns(2)
    if not left.toggle("Everyone: a long prompt now", key="room-long", help=LONG_HELP):
        return None, None
    long_tokens = left.number_input(
        "Long prompt (tokens)", BLOCK_SIZE, cap, min(DEFAULT_LONG_TOKENS, cap), key="room-long-tokens", help=LONG_HELP
    )
    if not right.toggle("Serve it again with chunked prefill", value=True, key="room-chunk", help=CHUNK_HELP):
        return int(long_tokens), None
    budget = right.number_input(
        "Chunk budget (tokens per step)",
        BLOCK_SIZE,
        MAX_LONG_PROMPT_TOKENS,
        min(128, max(BLOCK_SIZE, cap // 4)),
        key="room-chunk-budget",
        help=CHUNK_HELP,
    )
    return int(long_tokens), int(budget)


def long_round(run: RoomRound, viewer: int) -> None:
    """A round of long prompts: whose TPOT the others' long prefills pushed past the session's TPOT SLO, served
    whole and, where asked, chunked; and the chunked serving's steps."""
    if run.long_prompt_tokens is None:
        return
    _, tpot_slo_s = current_slos_s()
    st.markdown(f"**Everyone sent a long prompt ({run.long_prompt_tokens:,} tokens), one after another.**")
    frame = charts.tpot_frame(run, viewer, tpot_slo_s)
    chart(
        charts.tpot_chart(frame, charts.lane_order(run, viewer), to_ms(tpot_slo_s)),
        frame,
        "room-tpot",
        f"Each person's TPOT (dot) and longest gap between two tokens (tick) against the session's TPOT SLO (red "
        f'line); "pushed past": past it in the round though under it alone ("{charts.PAST_ALONE_TOO}": alone '
        f"missed it as well). {run.tpot_sentence(tpot_slo_s)}",
        "measured: each token's time in the round, and each prompt served alone",
    )
    if run.chunked_steps:
        tokens = charts.tokens_frame(run, viewer, run.chunked_steps)
        chart(
            charts.tokens_chart(tokens),
            tokens,
            "room-chunked-steps",
            f"The same prompts served chunked: no step computed more than {run.chunk_budget:,} tokens, so each long "
            "prefill shared its steps with the others' decodes.",
            "measured: tokens from the engine's scheduled batch",
        )
