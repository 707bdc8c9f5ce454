"""What a session keeps: every key of st.session_state (one registry, typed accessors), the run's inputs and result,
the current run and history."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

import streamlit as st

from explorer.core.attention_maps import AttentionMaps
from explorer.core.paths import EMBEDDED
from explorer.core.request import DEFAULT_MAX_NEW_TOKENS, DEFAULT_PROMPT
from explorer.core.trace import DecodePath, Sampling, Trace
from explorer.recording.pdx import RecordingMeta

if TYPE_CHECKING:
    from explorer.core.pass_profile import PassProfile
    from explorer.labs.stepped_view import SteppedView

T = TypeVar("T")


class Slot(str, Generic[T]):
    """One session-state key and the type of what it holds. A `str` (the key itself, as AppTest reads it) with typed
    accessors. Never the key of a widget: Streamlit forbids writing those after the widget exists."""

    def get(self, default: T | None = None) -> T | None:
        return st.session_state.get(str(self), default)

    def set(self, value: T) -> None:
        st.session_state[str(self)] = value

    def pop(self) -> T | None:
        return st.session_state.pop(str(self), None)


# --- every session-state key of the app, in one place (widget keys stay with their widgets) -------------------------
RUN: Slot[RunResult] = Slot("explorer_run")  # the current RunResult
HISTORY: Slot[list[RunResult]] = Slot("explorer_history")  # earlier RunResults of this session, oldest first
RUN_COUNT: Slot[int] = Slot("explorer_run_count")  # how many runs this session started
LAST_INPUTS: Slot[RunInputs] = Slot("explorer_last_inputs")  # the sidebar's last Run: the labs use its model and dtype
RUN_STARTS: Slot[tuple[float, ...]] = Slot("explorer_run_starts")  # monotonic times of its turns (rate limit)
LEFT_QUEUE: Slot[bool] = Slot("explorer_left_queue")  # set by "Leave the queue", read once by the next script run
PROMPT_TYPED: Slot[str] = Slot("explorer_prompt_typed")  # a page's own Run ran this prompt: the sidebar shows it next
STEPPED: Slot[SteppedView] = Slot("explorer_stepped")  # the session's stepped request as the owner sent it
PROFILE: Slot[tuple[str, PassProfile]] = Slot("explorer_profile")  # the last "Profile this pass" (cost_view)
DECODE_PATHS: Slot[tuple[str, tuple[Trace, ...]]] = Slot("explorer_decode_paths")  # (run label, one trace per path)
NOCACHE_RESULT: Slot[object] = Slot("explorer_nocache_result")  # the no-cache lab's last result
BATCH_RESULT: Slot[object] = Slot("explorer_batch_result")  # the batching lab's last result
SCHEDULE_RUN: Slot[object] = Slot("explorer_schedule_run")  # the scheduling lab's last ScheduleRun
SCALE_HERE: Slot[Trace] = Slot("explorer_scale_here")  # At scale's "measure this here": its last shape model run
TOUR_SLIDE: Slot[int] = Slot("explorer_tour_slide")  # the Tour's 0-based slide
TOUR_PARAM_SEEN: Slot[str] = Slot("explorer_tour_param_seen")  # the ?slide value last applied: a stale one is ignored
RECORDING_LINKED: Slot[str] = Slot("explorer_recording_linked")  # the recording a link opened: a link opens it once
RECORDING_LINKED_PAIR: Slot[tuple[str, str]] = Slot("explorer_recording_linked_pair")  # ?recording=A&compare=B, once
RECORDING_UPLOADED: Slot[str] = Slot("explorer_recording_uploaded")  # the upload last opened: a rerun keeps it
TTFT_SLO_MS: Slot[float] = Slot("explorer_ttft_slo_ms")  # the SLOs: the Latency page sets them, every page reads them
ITL_SLO_MS: Slot[float] = Slot("explorer_itl_slo_ms")
ENDPOINT_RESULT: Slot[object] = Slot("endpoint_result")  # the SweepResult shown: measured here or loaded from a file
ENDPOINT_LOADED_FILE: Slot[tuple[str, str]] = Slot("endpoint_loaded_file")  # (file id, refusal or ""): read once
ENDPOINT_UPLOAD: Slot[tuple[str, object]] = Slot("endpoint_upload")  # (sha256, sweep or refusal): same bytes read once
ENDPOINT_TABLES: Slot[tuple[object, ...]] = Slot("endpoint_tables")  # (sweep, SLOs, tables): derived once
ENDPOINT_PREFIX: Slot[object] = Slot("endpoint_prefix")  # the PrefixResult of the prefix-reuse experiment, if run
EDITOR_VERSION: Slot[int] = Slot("by_hand_editor_version")  # bumped by Reset: new widget keys start from the seed's
QUIZ_VERSION: Slot[int] = Slot("quiz_version")  # bumped by Start over: new radio keys start unanswered
ROOM_MEMBER: Slot[str] = Slot("explorer_room_member")  # this session's opaque token in the Room store, never shown
ROOM_CODE: Slot[str] = Slot("explorer_room_code")  # the room this session opened or joined (kept across pages)
HISTORY_LENGTH = 5
# What a run's attention note says from the moment its timed passes end until its replay ends: read by any later script
# run only if the replay never ended in its own (a click or a closed tab stops a script at its next draw), so it says
# what happened and how to get the maps, never "capturing" (a page that read that would wait for nothing).
CAPTURE_CUT_SHORT = (
    "The attention capture was cut short: a click left the page while it replayed the run's tokens. "
    "Open the Attention page to capture the maps again (an untimed replay of the same tokens)."
)

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
    decode_path: DecodePath | None = None  # None: the device's default (graph on CUDA, eager on a CPU)


@dataclass(frozen=True)
class RunResult:
    """What a page reads: the trace, and the attention maps or why there are none."""

    trace: Trace
    attention: AttentionMaps | None
    attention_note: str  # shown where maps are missing: not requested, or over the cap
    label: str  # "run 3: 'Explain in one…'" for overlays
    contention_note: str = ""  # the line naming passes timed while other work ran beside them (none: "")
    recorded: RecordingMeta | None = None  # a recording opened in the app (explorer.ui.recordings); None when live
    capture_owed: OwedCapture | None = None  # capture on and its replay not yet taken in; None: nothing owed

    @property
    def capture_cut_short(self) -> bool:
        """Its attention capture was asked for and never finished: the Attention page replays it again."""
        return self.attention is None and self.capture_owed is not None and self.capture_owed.maps is None


@dataclass(eq=False)
class OwedCapture:
    """A run's attention capture until a script run takes its maps in: the inputs whose model replays it, the maps
    once a replay has made them, and whether a replay is running now.

    Mutable, and written with no Streamlit call, on purpose. A page link's click stops the script (Streamlit's stop
    exception) at its next draw, the replay spinner's end, and again at every session-state access after it, so the
    replay cannot store its maps in the session; and Streamlit starts the next page's script run in a new thread while
    the stopped one still replays. The replay ends here (`end`), the next page waits for it (`wait`) and
    takes its maps in (`current_run`)."""

    inputs: RunInputs
    maps: AttentionMaps | None = None
    replaying: bool = False  # a thread replays it now (also one whose script a click stopped: it runs to its end)
    changed: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def start(self) -> None:
        with self.changed:
            self.replaying = True

    def end(self, maps: AttentionMaps | None) -> None:
        """A replay ended: with its maps, or with none (failed, or stopped before it made them)."""
        with self.changed:
            self.maps = maps if maps is not None else self.maps
            self.replaying = False
            self.changed.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """Until no replay runs (True), or `timeout_s` has passed (False)."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.replaying, timeout_s)


def current_run() -> RunResult | None:
    """The run every page shows, with the maps of a replay that ended while a click stopped its script."""
    run = RUN.get()
    if run is not None and run.capture_owed is not None and run.capture_owed.maps is not None:
        run = replace(run, attention=run.capture_owed.maps, attention_note="", capture_owed=None)
        RUN.set(run)
    return run


def history() -> list[RunResult]:
    return list(HISTORY.get() or [])


def last_inputs() -> RunInputs:
    """The sidebar's last Run's inputs (the defaults before any): labs and Step mode run on its model and sampling."""
    return LAST_INPUTS.get() or RunInputs()


def remember(trace: Trace, prompt: str, capture: RunInputs | None = None) -> RunResult:
    """Keep a finished run at once, before anything else can interrupt the script (a click reruns it). With `capture`
    (the run's inputs, attention capture on) the run owes its maps: cut short until its replay ends and says
    otherwise (`CAPTURE_CUT_SHORT`)."""
    count = (RUN_COUNT.get() or 0) + 1
    RUN_COUNT.set(count)
    preview = prompt.strip().replace("\n", " ")
    label = f"run {count}: {preview[:24]}{'…' if len(preview) > 24 else ''}"
    owed = OwedCapture(capture) if capture is not None else None
    result = RunResult(trace, None, CAPTURE_CUT_SHORT if capture is not None else "", label, capture_owed=owed)
    return make_current(result)


def make_current(result: RunResult) -> RunResult:
    """`result` becomes the run every page shows; the previous one moves to the history (Compare, Latency)."""
    previous = current_run()
    if previous is not None:  # earlier runs keep their trace; their attention maps (up to the cap each) are dropped
        kept = replace(
            previous,
            attention=None,
            attention_note="Attention maps are kept for the current run only.",
            capture_owed=None,  # only the current run's capture is replayed
        )
        HISTORY.set((history() + [kept])[-HISTORY_LENGTH:])
    RUN.set(result)
    return result
