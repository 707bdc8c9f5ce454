"""Runs on the shared device: the loaded models of this server process, and a run from the sidebar's inputs (check
the server's limits, wait in line for the device (`explorer.ui.queue`), load, run with live streaming, capture
attention).

What holds the device and for how long (one turn each, first come first served, see
`explorer.hosting.queue.DeviceQueue`):
- the server's warm-up at start (`explorer.ui.warm`): loading the default model, the device figures and the
  warm-up, once per process; a run pressed meanwhile waits for it (`wait_for_warming`) and then starts warm;
- a sidebar run: loading (once per model), the device figures (measured once per process) and the warm-up, the
  timed passes of every repeat, the untimed attention replay, then the drawing of that session's page: the turn
  ends when the session's script run ends (at most `DRAW_HOLD_S`), so the next run's passes never share the cores
  with that drawing;
- a lab: the no-cache and batching labs hand the device to anyone waiting between any two timed passes (their
  figures are sums of individually timed passes); the scheduling lab only between its measured spans (the engine's
  run, static batching, one-at-a-time serving), which are wall-clock spans and never cut (`core.lab_progress`);
- a stepped request (`explorer.ui.stepper`): one pass per click, so other sessions run between clicks; the click
  that finishes it also runs `keep_figures_honest`, which may re-run the microbenchmarks (seconds);
- "Re-measure device figures": the microbenchmarks (a few seconds).
Changing a view takes no turn: it only reads the session's stored run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import streamlit as st

from explorer.core.attention import capture_attention
from explorer.core.device import device_profile
from explorer.core.engine import CheckedRequest, OnPass, Request, check_request, validate
from explorer.core.errors import ExplorerError
from explorer.core.lab_progress import LabProgress, Report
from explorer.core.loading import EMBEDDED, LoadedModel, Progress, load_model, resolve_device
from explorer.core.measure import keep_figures_honest, measure, prepare_device, recost
from explorer.core.trace import DeviceProfile, PassRecord, Trace
from explorer.hosting.settings import ALLOWED_MODELS_ENV as ALLOWED_MODELS_ENV  # older code imports it from here
from explorer.hosting.settings import LabSize
from explorer.hosting.warm import Warmer
from explorer.ui.queue import ContentionProbe, count_run, device_turn, hosting_policy
from explorer.ui.state import LAST_INPUTS, RUN, RunInputs, RunResult, current_run, remember
from explorer.ui.widgets import escape_markdown, failure_line, show_error

ATTENTION_OFF = "Attention capture was off for this run: switch it on in the sidebar and run again."


def check_model_allowed(name: str) -> str:
    """The model to load for what was typed, or a one-line refusal that names the allowed models."""
    return hosting_policy().check_model(name)


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
def warmer() -> Warmer:
    """The server's warm-up at start (`explorer.ui.warm`): the default model loaded, the device figures taken."""
    return Warmer()


def wait_for_warming(poll_s: float = 0.5) -> None:
    """A run pressed while the server warms up waits for it, saying so: the warm-up holds the device and is loading
    the very model the run needs (once: the store's lock), so the run then starts warm. A click meanwhile reruns the
    script, which stops this wait at its next redraw."""
    if warmer().status().state != "warming":
        return
    line = st.empty()
    while not warmer().wait(0):
        line.info(warmer().status().line())
        warmer().wait(poll_s)
    line.empty()


@contextmanager
def progress_bar(text: str) -> Iterator[Report]:
    """A progress bar while the block runs, drawn by any progress report (loading, the device figures, the warm-up, a
    lab), and removed when the block ends."""
    bar = st.progress(0.0, text=escape_markdown(text))

    def report(fraction: float, what: str) -> None:
        bar.progress(min(1.0, fraction), text=escape_markdown(what))

    try:
        yield report
    finally:
        bar.empty()


def get_model(inputs: RunInputs) -> LoadedModel:
    with progress_bar(f"Loading {inputs.model} …") as report:
        return model_store().get(inputs.model.strip() or EMBEDDED, inputs.device, inputs.dtype, report)


# --- the run -------------------------------------------------------------------------------------------------------
def _stream_text(passes: list[PassRecord], itl_s: list[float]) -> str:
    parts = [
        f"{p.token_text!r} (TTFT)" if p.is_prefill else f"{p.token_text!r} {gap * 1e3:.0f} ms"
        for p, gap in zip(passes, [0.0, *itl_s])
    ]
    return "  ".join(parts)


def run_streaming(lm: LoadedModel, checked: CheckedRequest, probe: ContentionProbe | None = None) -> Trace:
    """The device figures and the warm-up on a progress bar, then the timed run, drawing each token with its gap as its
    pass finishes (the drawing falls inside the ITL)."""
    live = st.container(border=True)
    live.caption("Live: each token appears as its pass finishes, with its inter-token latency (measured).")
    stream = live.empty()
    streamed: list[PassRecord] = []
    token_times: list[float] = []

    def on_pass(p: PassRecord) -> None:
        if probe is not None:
            probe.sample()
        streamed.append(p)
        token_times.append(p.token_s)  # the trace's own definition of when a token arrived
        gaps = [b - a for a, b in zip(token_times, token_times[1:])]
        stream.text(_stream_text(streamed, gaps))  # text, never markdown or HTML: tokens come from the user

    with progress_bar("Preparing the device…") as report:
        trace = measure(lm, checked, on_pass=OnPass(see=on_pass), progress=report)
    stream.text(_stream_text(list(trace.passes), list(trace.itl_s)))
    return trace


def attach_attention(lm: LoadedModel, result: RunResult, cap_bytes: int | None = None) -> RunResult:
    """The untimed eager replay; a failure or the memory cap leaves the timed run intact, with a note why."""
    try:
        with st.spinner("Replaying the same tokens with eager attention to capture the maps (untimed)…"):
            maps = capture_attention(lm, result.trace, cap_bytes=cap_bytes)
            result = replace(result, attention=maps, attention_note="")
    except Exception as exc:  # noqa: BLE001 - keep the timed run even when the replay fails
        note = str(exc) if isinstance(exc, ExplorerError) else failure_line("Attention capture", exc)
        result = replace(result, attention_note=note)
    st.session_state[RUN] = result
    return result


def execute_run(inputs: RunInputs) -> RunResult | None:
    """Check the server's limits, wait in line for the device, load, run with live streaming, capture attention;
    keep the result in state. Everything a visitor typed is checked before anything is loaded or tokenized."""
    request = Request(
        prompt=inputs.prompt,
        max_new_tokens=inputs.max_new_tokens,
        use_chat_template=inputs.use_chat_template,
        sampling=inputs.sampling,
        repeats=inputs.repeats,
    )
    try:
        policy = hosting_policy()
        model = policy.check_model(inputs.model)  # by name alone: a path never reaches the filesystem
        policy.check_request(inputs.prompt, inputs.max_new_tokens, inputs.repeats)  # characters before tokens
        validate(request)  # its numbers, before anything loads
        count_run(policy)
        wait_for_warming()
        with device_turn("run"):
            lm = get_model(replace(inputs, model=model))
            st.session_state[LAST_INPUTS] = inputs  # a model that loaded: the labs run on the sidebar's last one
            checked = check_request(lm, request)  # once: the run takes it as checked
            if policy.max_prompt_tokens is not None:  # a few thousand characters at most, after the check above
                policy.check_prompt_tokens(len(checked.prompt_ids))
            probe = ContentionProbe()
            trace = run_streaming(lm, checked, probe)
            result = replace(remember(trace, inputs.prompt), contention_note=probe.note)
            st.session_state[RUN] = result
            if result.contention_note:
                st.warning(result.contention_note)
            if not inputs.capture_attention:
                result = replace(result, attention_note=ATTENTION_OFF)
                st.session_state[RUN] = result
                return result
            return attach_attention(lm, result, policy.attention_cap_bytes)
    except ExplorerError as exc:
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app must keep running; the message says what failed
        show_error(failure_line("The run", exc))
    return None


def remeasure_device(device: str, dtype: str) -> None:
    """Take the device figures again now and re-cost the current run with them: no model call. Without a run, the
    figures are those of the device and dtype the sidebar would run on (`device` may be "auto")."""
    run = current_run()
    try:
        count_run()
        kind, dtype = (run.trace.device.kind, run.trace.device.dtype) if run else (resolve_device(device).type, dtype)
        with (
            device_turn("device figures"),
            progress_bar("Measuring the device (best of 5 matmuls, copies and reads)…") as bar,
        ):
            fresh = device_profile(kind, dtype, fresh=True, progress=bar)
    except ExplorerError as exc:  # the rate limit, a refusal in line, or a device this server does not have
        show_error(str(exc))
        return
    if run is not None:
        st.session_state[RUN] = replace(run, trace=keep_figures_honest(recost(run.trace, fresh)))
    st.sidebar.caption(f"Device figures taken at {fresh.measured_at}.")


def run_lab(
    key: str,
    what: str,
    work: Callable[[LoadedModel, DeviceProfile, LabProgress], object],
    size: LabSize | None = None,
) -> object | None:
    """A lab's run: on the device in turn, on the sidebar's model, with progress; kept in the session under `key` so
    changing a view never runs it again. `size` is what the lab is about to run, checked against a hosted server's
    caps before it waits for the device (a hosted server refuses a lab without one). `work` gets a `LabProgress`:
    calling it only moves the bar; its `between_units()` lets anyone waiting go first, and the lab calls it only
    where no measured span crosses it (`core.lab_progress`). Errors are one line and keep the previous result."""
    inputs = st.session_state.get(LAST_INPUTS, RunInputs())
    try:
        policy = hosting_policy()
        model = policy.check_model(inputs.model)
        policy.check_lab(size)
        count_run(policy)
        wait_for_warming()
        with device_turn("lab") as turn:
            lm = get_model(replace(inputs, model=model))
            with progress_bar(what) as report:
                device = prepare_device(lm, progress=report)  # the figures, then the warm-up: once, before the lab
                result = work(lm, device, LabProgress(report, turn.pass_on))
        st.session_state[key] = result
        return result
    except ExplorerError as exc:
        show_error(str(exc))
    except Exception as exc:  # noqa: BLE001 - the app must keep running; the message says what failed
        show_error(failure_line(what, exc))
    return None
