"""What a session keeps: the keys of st.session_state, the run's inputs and result, the current run and history."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import streamlit as st

from explorer.core.attention_maps import AttentionMaps
from explorer.core.loading import EMBEDDED
from explorer.core.recording import RecordingMeta
from explorer.core.trace import Sampling, Trace

# --- session-state keys (never the key of a widget: Streamlit forbids writing those after the widget exists) -------
RUN = "explorer_run"  # the current RunResult
HISTORY = "explorer_history"  # earlier RunResults of this session, oldest first
RUN_COUNT = "explorer_run_count"  # how many runs this session started
LAST_INPUTS = "explorer_last_inputs"  # the RunInputs of the sidebar's last Run: the labs use its model and dtype
RUN_STARTS = "explorer_run_starts"  # monotonic times this session took the device in the last minute (rate limit)
LEFT_QUEUE = "explorer_left_queue"  # set by the "Leave the queue" button, read once by the next script run
HISTORY_LENGTH = 5

DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."
DEFAULT_MAX_NEW_TOKENS = 32
APP_MAX_NEW_TOKENS = 512  # the sidebar's bound; the engine accepts up to MAX_NEW_TOKENS_LIMIT


@dataclass(frozen=True)
class RunInputs:
    """Everything the sidebar's Run button hands to a run."""

    model: str = EMBEDDED
    device: str = "auto"
    dtype: str = "float32"
    prompt: str = DEFAULT_PROMPT
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    use_chat_template: bool = True
    capture_attention: bool = True
    sampling: Sampling = field(default_factory=Sampling)
    repeats: int = 1


@dataclass(frozen=True)
class RunResult:
    """What a page reads: the trace, and the attention maps or why there are none."""

    trace: Trace
    attention: AttentionMaps | None
    attention_note: str  # shown where maps are missing: not requested, or over the cap
    label: str  # "run 3: 'Explain in one…'" for overlays
    contention_note: str = ""  # set when another session drew a page while this run's passes were timed
    recorded: RecordingMeta | None = None  # a recording opened in the app (explorer.ui.recordings); None when live


def current_run() -> RunResult | None:
    return st.session_state.get(RUN)


def history() -> list[RunResult]:
    return list(st.session_state.get(HISTORY, []))


def remember(trace: Trace, prompt: str) -> RunResult:
    """Keep a finished run at once, before anything else can interrupt the script (a click reruns it)."""
    count = st.session_state.get(RUN_COUNT, 0) + 1
    st.session_state[RUN_COUNT] = count
    preview = prompt.strip().replace("\n", " ")
    result = RunResult(
        trace, None, "Capturing attention…", f"run {count}: {preview[:24]}{'…' if len(preview) > 24 else ''}"
    )
    return make_current(result)


def make_current(result: RunResult) -> RunResult:
    """`result` becomes the run every page shows; the previous one moves to the history (Compare, Latency)."""
    previous = current_run()
    if previous is not None:  # earlier runs keep their trace; their attention maps (up to the cap each) are dropped
        kept = replace(previous, attention=None, attention_note="Attention maps are kept for the current run only.")
        st.session_state[HISTORY] = (history() + [kept])[-HISTORY_LENGTH:]
    st.session_state[RUN] = result
    return result
