"""The one bridge to Streamlit: the cached model and run lock, session-state keys, the shared sidebar, chart helpers.

Pages call these and the pure builders in `explorer.charts`; nothing else in `explorer` imports streamlit.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import altair as alt
import pandas as pd
import streamlit as st

from explorer.attention import AttentionMaps, capture_attention
from explorer.device import device_profile
from explorer.engine import MAX_NEW_TOKENS_LIMIT, MAX_REPEATS, Request, validate
from explorer.errors import BadInput, ExplorerError, one_line
from explorer.loading import DEVICES, DTYPES, EMBEDDED, LoadedModel, Progress, load_model
from explorer.measure import keep_figures_honest, measure, recost
from explorer.trace import PassRecord, Sampling, Trace

ALLOWED_MODELS_ENV = "EXPLORER_ALLOWED_MODELS"  # comma-separated; a hosted demo sets it to stop arbitrary downloads
ATTENTION_OFF = "Attention capture was off for this run: switch it on in the sidebar and run again."
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$])")


def escape_markdown(text: str) -> str:
    """Backslash-escape what Streamlit's markdown would interpret, for messages that quote user input."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", text)


def check_model_allowed(name: str) -> None:
    allowed = [m.strip() for m in os.environ.get(ALLOWED_MODELS_ENV, "").split(",") if m.strip()]
    if allowed and (name.strip() or EMBEDDED) not in allowed:
        raise BadInput(f"This server only runs these models: {', '.join(allowed)}.")


# --- session-state keys (never the key of a widget: Streamlit forbids writing those after the widget exists) -------
RUN = "explorer_run"  # the current RunResult
HISTORY = "explorer_history"  # earlier RunResults of this session, oldest first
RUN_COUNT = "explorer_run_count"  # how many runs this session started
HISTORY_LENGTH = 5

DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."
DEFAULT_MAX_NEW_TOKENS = 32
APP_MAX_NEW_TOKENS = 512  # the sidebar's bound; the engine accepts up to MAX_NEW_TOKENS_LIMIT
PROMPT_MAX_CHARS = 20_000


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


# --- shared, process-wide resources ------------------------------------------------------------------------------
class ModelStore:
    """Loaded models for every session of this server process, at most `capacity`, oldest evicted first.

    Not `st.cache_resource` on the loader itself: a cached function may not draw into the caller's progress bar.
    """

    def __init__(self, capacity: int = 2) -> None:
        self.capacity = capacity
        self.models: dict[tuple[str, str, str], LoadedModel] = {}
        self.lock = threading.Lock()

    def get(self, name: str, device: str, dtype: str, on_progress: Progress | None = None) -> LoadedModel:
        key = (name, device, dtype)
        with self.lock:  # two sessions asking for the same new model load it once
            if key not in self.models:
                loaded = load_model(name, device, dtype, on_progress=on_progress)
                while len(self.models) >= self.capacity:
                    self.models.pop(next(iter(self.models)))
                self.models[key] = loaded
            return self.models[key]


@st.cache_resource
def model_store() -> ModelStore:
    return ModelStore()


@st.cache_resource
def device_lock() -> threading.Lock:
    """Runs are serialized on the device, so two sessions never disturb each other's timings."""
    return threading.Lock()


def get_model(inputs: RunInputs) -> LoadedModel:
    bar = st.progress(0.0, text=escape_markdown(f"Loading {inputs.model} …"))

    def progress(fraction: float, text: str) -> None:
        bar.progress(min(1.0, fraction), text=escape_markdown(text))

    try:
        return model_store().get(inputs.model.strip() or EMBEDDED, inputs.device, inputs.dtype, progress)
    finally:
        bar.empty()


# --- the run -------------------------------------------------------------------------------------------------------
def current_run() -> RunResult | None:
    return st.session_state.get(RUN)


def history() -> list[RunResult]:
    return list(st.session_state.get(HISTORY, []))


def _stream_text(passes: list[PassRecord], itl_s: list[float]) -> str:
    parts = [
        f"{p.token_text!r} (TTFT)" if p.is_prefill else f"{p.token_text!r} {gap * 1e3:.0f} ms"
        for p, gap in zip(passes, [0.0, *itl_s])
    ]
    return "  ".join(parts)


@contextmanager
def device_turn() -> Iterator[None]:
    """Hold the device for a whole run; a second session waits here and says so."""
    lock = device_lock()
    if not lock.acquire(blocking=False):
        waiting = st.empty()
        waiting.info("Another session is running on this device: waiting for it, so the timings stay clean…")
        started = time.perf_counter()
        lock.acquire()
        waiting.caption(f"Waited {time.perf_counter() - started:.1f} s for another session's run to finish.")
    try:
        yield
    finally:
        lock.release()


def run_streaming(lm: LoadedModel, request: Request) -> Trace:
    """The timed run, drawing each token with its gap as its pass finishes (the drawing falls inside the ITL)."""
    live = st.container(border=True)
    live.caption("Live: each token appears as its pass finishes, with its inter-token latency (measured).")
    stream = live.empty()
    streamed: list[PassRecord] = []
    token_times: list[float] = []

    def on_pass(p: PassRecord) -> None:
        streamed.append(p)
        token_times.append(p.start_s + p.wall_s)
        gaps = [b - a for a, b in zip(token_times, token_times[1:])]
        stream.text(_stream_text(streamed, gaps))  # text, never markdown or HTML: tokens come from the user

    trace = measure(lm, request, on_pass=on_pass)
    stream.text(_stream_text(list(trace.passes), list(trace.itl_s)))
    return trace


def remember(trace: Trace, prompt: str) -> RunResult:
    """Keep a finished run at once, before anything else can interrupt the script (a click reruns it)."""
    count = st.session_state.get(RUN_COUNT, 0) + 1
    st.session_state[RUN_COUNT] = count
    preview = prompt.strip().replace("\n", " ")
    result = RunResult(
        trace, None, "Capturing attention…", f"run {count}: {preview[:24]}{'…' if len(preview) > 24 else ''}"
    )
    previous = current_run()
    if previous is not None:  # earlier runs keep their trace; their attention maps (up to the cap each) are dropped
        kept = RunResult(previous.trace, None, "Attention maps are kept for the current run only.", previous.label)
        st.session_state[HISTORY] = (history() + [kept])[-HISTORY_LENGTH:]
    st.session_state[RUN] = result
    return result


def attach_attention(lm: LoadedModel, result: RunResult) -> RunResult:
    """The untimed eager replay; a failure or the memory cap leaves the timed run intact, with a note why."""
    try:
        with st.spinner("Replaying the same tokens with eager attention to capture the maps (untimed)…"):
            result = replace(result, attention=capture_attention(lm, result.trace), attention_note="")
    except Exception as exc:  # noqa: BLE001 - keep the timed run even when the replay fails
        note = str(exc) if isinstance(exc, ExplorerError) else f"Attention capture failed: {one_line(exc)}"
        result = replace(result, attention_note=note)
    st.session_state[RUN] = result
    return result


def show_error(message: str) -> None:
    st.error(escape_markdown(message))  # messages quote the model name the user typed


def execute_run(inputs: RunInputs) -> RunResult | None:
    """Validate, wait for the device, load, run with live streaming, capture attention; keep the result in state."""
    request = Request(
        prompt=inputs.prompt,
        max_new_tokens=inputs.max_new_tokens,
        use_chat_template=inputs.use_chat_template,
        sampling=inputs.sampling,
        repeats=inputs.repeats,
    )
    try:
        validate(request)
        check_model_allowed(inputs.model)
        with device_turn():
            lm = get_model(inputs)
            result = remember(run_streaming(lm, request), inputs.prompt)
            if not inputs.capture_attention:
                result = replace(result, attention_note=ATTENTION_OFF)
                st.session_state[RUN] = result
                return result
            return attach_attention(lm, result)
    except ExplorerError as exc:
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app must keep running; the message says what failed
        show_error(f"The run failed: {one_line(exc)}")
    return None


# --- the shared sidebar --------------------------------------------------------------------------------------------
def sidebar() -> RunInputs | None:
    """The run's inputs, in a form so that typing never reruns anything; returns them when Run is pressed."""
    with st.sidebar.form("run-form"):
        st.markdown("**Run a prompt**")
        prompt = st.text_area("Prompt", value=DEFAULT_PROMPT, max_chars=PROMPT_MAX_CHARS, height=110)
        max_new_tokens = st.number_input(
            "Max new tokens",
            min_value=1,
            max_value=min(APP_MAX_NEW_TOKENS, MAX_NEW_TOKENS_LIMIT),
            value=DEFAULT_MAX_NEW_TOKENS,
            step=1,
        )
        use_chat_template = st.toggle("Use the chat template", value=True, help="Wrap the prompt as a user message.")
        attention = st.toggle(
            "Capture attention maps", value=True, help="An untimed replay of the same tokens with eager attention."
        )
        repeats = st.number_input(
            "Repeats",
            min_value=1,
            max_value=MAX_REPEATS,
            value=1,
            help="Run the same request N times in a row: figures become a median with their min and max.",
        )
        with st.expander("Model and device"):
            model = st.text_input("Model", value=EMBEDDED, help="'embedded' (SmolLM2-135M), a hub id or a folder")
            device = st.selectbox("Device", DEVICES, index=0)
            dtype = st.selectbox("Dtype", list(DTYPES), index=0, help="float16 runs on CUDA only")
        with st.expander("Sampling"):
            temperature = st.number_input("Temperature (0 = greedy)", min_value=0.0, max_value=5.0, value=0.0)
            top_k = st.number_input("Top-k (0 = off)", min_value=0, max_value=1000, value=0)
            seed = st.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0)
        submitted = st.form_submit_button("Run", type="primary", width="stretch")
    if not submitted:
        return None
    return RunInputs(
        model=model,
        device=device,
        dtype=dtype,
        prompt=prompt,
        max_new_tokens=int(max_new_tokens),
        use_chat_template=use_chat_template,
        capture_attention=attention,
        repeats=int(repeats),
        sampling=Sampling(temperature=float(temperature), top_k=int(top_k) or None, seed=int(seed)),
    )


def remeasure_button() -> None:
    """Take the device figures again now and re-cost the current run with them: no model call."""
    if not st.sidebar.button(
        "Re-measure device figures",
        help="Runs the matmul and copy microbenchmarks again (they are reused otherwise, and re-taken by themselves "
        "when a pass beats them), then divides the current run by the new figures.",
    ):
        return
    run = current_run()
    with device_turn(), st.spinner("Measuring the device (best of 5 matmuls and copies)…"):
        kind, dtype = (run.trace.device.kind, run.trace.device.dtype) if run else ("cpu", "float32")
        fresh = device_profile(kind, dtype, fresh=True)
    if run is not None:
        st.session_state[RUN] = replace(run, trace=keep_figures_honest(recost(run.trace, fresh)))
    st.sidebar.caption(f"Device figures taken at {fresh.measured_at}.")


def sidebar_downloads() -> None:
    """The current run's trace and passes; drawn after any run of this script, so they are never one run behind."""
    run = current_run()
    if run is None:
        return
    st.sidebar.download_button(
        "Download trace (JSON)", run.trace.to_json(), file_name="trace.json", mime="application/json", on_click="ignore"
    )
    st.sidebar.download_button(
        "Download passes (CSV)", run.trace.passes_csv(), file_name="passes.csv", mime="text/csv", on_click="ignore"
    )


# --- page helpers --------------------------------------------------------------------------------------------------
def require_run() -> RunResult:
    """The current run; without one, a hint to make one and the page stops here (it has nothing else to draw)."""
    run = current_run()
    if run is None:
        st.info("No run yet: press **Run** in the sidebar (a default prompt is filled in).")
        st.stop()
    return run


def run_metrics(trace: Trace) -> None:
    """The request's headline numbers, all measured."""
    cols = st.columns(6)
    cols[0].metric("Prompt tokens", trace.prompt_len)
    cols[1].metric("New tokens", trace.new_tokens, help=f"stopped by {trace.stop_reason}")
    cols[2].metric("TTFT", short_time(trace.ttft_s), help="measured: request start (before tokenizing) to first token")
    cols[3].metric("ITL p50", short_time(trace.itl_p50_s), help="measured: median gap between consecutive tokens")
    rate = trace.decode_tokens_per_s
    cols[4].metric("Decode tok/s", f"{rate:.1f}" if rate else "n/a", help="measured: decode tokens / sum of ITLs")
    cols[5].metric("E2E", short_time(trace.e2e_s), help="measured: request start to the last token")
    st.text(  # text, not markdown: the model name is whatever the user typed
        f"{trace.model.display_name} · {trace.model.dtype} on {trace.device.name} · all six figures measured"
        + ("" if trace.warmup_ran else " · no warm-up: the first pass includes one-off start-up costs")
    )


def short_time(seconds: float | None) -> str:
    """Fits a metric column: '87 ms', '1.44 s'."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def chart(chart_obj: alt.TopLevelMixin, data: pd.DataFrame, name: str, caption: str, source: str) -> None:
    """A chart, its one-line caption with where its numbers come from, and a download of the data behind it."""
    st.altair_chart(chart_obj, width="stretch")
    st.caption(f"{caption} — *{source}*")
    st.download_button(
        f"Download data: {name}.csv",
        data.to_csv(index=False),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"download-{name}",
        on_click="ignore",
    )


def table(data: pd.DataFrame, caption: str, source: str) -> None:
    st.dataframe(data, hide_index=True, width="stretch")
    st.caption(f"{caption} — *{source}*")
