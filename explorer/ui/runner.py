"""Runs on the shared device: the loaded models and the device lock of this server process, and a run from the
sidebar's inputs (validate, wait for the device, load, run with live streaming, capture attention)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import streamlit as st

from explorer.attention import capture_attention
from explorer.device import device_profile
from explorer.engine import Request, validate, warm_up
from explorer.errors import BadInput, ExplorerError, one_line
from explorer.loading import EMBEDDED, LoadedModel, Progress, load_model
from explorer.measure import keep_figures_honest, measure, recost
from explorer.trace import DeviceProfile, PassRecord, Trace
from explorer.ui.state import LAST_INPUTS, RUN, RunInputs, RunResult, current_run, remember
from explorer.ui.widgets import escape_markdown, show_error

ALLOWED_MODELS_ENV = "EXPLORER_ALLOWED_MODELS"  # comma-separated; a hosted demo sets it to stop arbitrary downloads
ATTENTION_OFF = "Attention capture was off for this run: switch it on in the sidebar and run again."


def check_model_allowed(name: str) -> None:
    allowed = [m.strip() for m in os.environ.get(ALLOWED_MODELS_ENV, "").split(",") if m.strip()]
    if allowed and (name.strip() or EMBEDDED) not in allowed:
        raise BadInput(f"This server only runs these models: {', '.join(allowed)}.")


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


def execute_run(inputs: RunInputs) -> RunResult | None:
    """Validate, wait for the device, load, run with live streaming, capture attention; keep the result in state."""
    request = Request(
        prompt=inputs.prompt,
        max_new_tokens=inputs.max_new_tokens,
        use_chat_template=inputs.use_chat_template,
        sampling=inputs.sampling,
        repeats=inputs.repeats,
    )
    st.session_state[LAST_INPUTS] = inputs  # the labs run on the model and dtype of the sidebar's last run
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


def remeasure_device() -> None:
    """Take the device figures again now and re-cost the current run with them: no model call."""
    run = current_run()
    with device_turn(), st.spinner("Measuring the device (best of 5 matmuls and copies)…"):
        kind, dtype = (run.trace.device.kind, run.trace.device.dtype) if run else ("cpu", "float32")
        fresh = device_profile(kind, dtype, fresh=True)
    if run is not None:
        st.session_state[RUN] = replace(run, trace=keep_figures_honest(recost(run.trace, fresh)))
    st.sidebar.caption(f"Device figures taken at {fresh.measured_at}.")


def run_lab(key: str, what: str, work: Callable[[LoadedModel, DeviceProfile, Progress], object]) -> object | None:
    """A lab's run: under the device lock, on the sidebar's model, with progress; kept in the session under `key` so
    changing a view never runs it again. Errors are one line and keep the previous result."""
    inputs = st.session_state.get(LAST_INPUTS, RunInputs())
    try:
        check_model_allowed(inputs.model)
        with device_turn():
            lm = get_model(inputs)
            bar = st.progress(0.0, text=escape_markdown(what))

            def progress(fraction: float, text: str) -> None:
                bar.progress(min(1.0, fraction), text=escape_markdown(text))

            warm_up(lm)
            device = device_profile(lm.torch_device.type, lm.info.dtype)  # after the warm-up, like every run
            result = work(lm, device, progress)
            bar.empty()
        st.session_state[key] = result
        return result
    except ExplorerError as exc:
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app must keep running; the message says what failed
        show_error(f"{what} failed: {one_line(exc)}")
    return None
