"""Runs on the shared device: the loaded models and the device queue of this server process, and a run from the
sidebar's inputs (check the server's limits, wait in line for the device, load, run with live streaming, capture
attention).

What holds the device and for how long (one turn each, first come first served, see `explorer.hosting.DeviceQueue`):
- a sidebar run: loading (once per model), warm-up, the timed passes of every repeat, the untimed attention replay,
  then the drawing of that session's page: the turn ends when the session's script run ends (at most
  `DRAW_HOLD_S`), so the next run's passes never share the cores with that drawing;
- a lab (no-cache, batching): the whole lab, except that between its units (each solo reference, each batch size,
  the cached loop, the naive loop) it passes the device to anyone waiting and takes it back after them;
- "Re-measure device figures": the microbenchmarks (a few seconds).
Changing a view takes no turn: it only reads the session's stored run.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.attention import capture_attention
from explorer.device import device_profile
from explorer.engine import Request, tokenize, validate, warm_up
from explorer.errors import BadInput, ExplorerError, one_line
from explorer.hosting import ALLOWED_MODELS_ENV as ALLOWED_MODELS_ENV  # older code imports it from here
from explorer.hosting import (
    DeviceQueue,
    HostedPolicy,
    LabSize,
    ScriptActivity,
    Ticket,
    wait_sentence,
)
from explorer.loading import EMBEDDED, LoadedModel, Progress, load_model
from explorer.measure import keep_figures_honest, measure, recost
from explorer.trace import DeviceProfile, PassRecord, Trace
from explorer.ui.state import (
    HELD_TICKET,
    LAST_INPUTS,
    LEFT_QUEUE,
    RUN,
    RUN_STARTS,
    RunInputs,
    RunResult,
    current_run,
    remember,
)
from explorer.ui.widgets import escape_markdown, show_error

ATTENTION_OFF = "Attention capture was off for this run: switch it on in the sidebar and run again."
DRAW_HOLD_S = 30.0  # a finished run keeps the device while its page is drawn, at most this long
POLL_S = 0.5  # how often a waiting page redraws its place in line (each redraw is also where a click can cancel)
CONTENTION_NOTE = (
    "While this run's passes were timed, {n} other session(s) were drawing a page on this server: the timings may be "
    "slower than on a quiet machine. Run again for a clean measurement."
)


def hosting_policy() -> HostedPolicy:
    """This server's limits, read from the environment on every call (cheap; tests change it between runs)."""
    return HostedPolicy.from_env()


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
def device_queue() -> DeviceQueue:
    """Runs are serialized on the device, first come first served, so two sessions never disturb each other's
    timings; the queue also tells a waiting session its place and expected wait."""
    return DeviceQueue(log_path=hosting_policy().turn_log)


@st.cache_resource
def script_activity() -> ScriptActivity:
    return ScriptActivity()


class QueueLock:
    """The device queue as a lock (`acquire`/`release`), for code that only needs to hold the device: it waits in the
    same line as every session. Like `threading.Lock`, any thread may release it."""

    def __init__(self, queue: DeviceQueue) -> None:
        self.queue = queue
        self.ticket: Ticket | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        ticket = self.queue.enter("lock")
        if self.queue.wait(ticket, None if blocking and timeout < 0 else (timeout if blocking else 0)):
            self.ticket = ticket
            return True
        self.queue.release(ticket)
        return False

    def release(self) -> None:
        ticket, self.ticket = self.ticket, None
        if ticket is None:
            raise RuntimeError("release of an unheld device lock")
        self.queue.release(ticket)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


@st.cache_resource
def device_lock() -> QueueLock:
    return QueueLock(device_queue())


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


def note_script() -> None:
    """Count this script run as drawing until its thread ends (the sidebar calls it on every script run)."""
    if get_script_run_ctx(suppress_warning=True) is not None:
        script_activity().note(threading.current_thread())


def _session_label() -> str:
    """An anonymous label for the turn log: a hash of the session id, never a prompt or a path."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return hashlib.sha256(ctx.session_id.encode()).hexdigest()[:8] if ctx is not None else "no-session"


def _left_queue() -> None:
    st.session_state[LEFT_QUEUE] = True


def _wait_for_turn(queue: DeviceQueue, ticket: Ticket, max_wait_s: float | None) -> None:
    """Until `ticket` holds the device: its place, the expected wait and a "Leave the queue" button, redrawn every
    POLL_S. A click anywhere (that button too) reruns the script, which stops this loop at its next redraw and gives
    the place up; past `max_wait_s` the wait is refused with one line."""
    if queue.wait(ticket, 0):
        return
    first = queue.status(ticket)
    box = st.empty()
    with box.container():
        line = st.empty()
        st.button("Leave the queue", key=f"leave-queue-{ticket.number}", on_click=_left_queue)
    while True:
        status = queue.status(ticket)
        if status.holding:
            break
        if not status.in_line:
            raise BadInput("You left the queue: nothing ran.")
        if max_wait_s is not None and status.waited_s > max_wait_s:
            raise BadInput(
                f"Waited {max_wait_s:.0f} s for the device and {status.ahead} turn(s) are still ahead: nothing ran. "
                "Try again in a minute."
            )
        line.info(wait_sentence(status, max_wait_s))
        if queue.wait(ticket, POLL_S):
            break
    box.empty()
    waited_s = queue.status(ticket).waited_s
    st.caption(
        f"Waited {waited_s:.1f} s for another session's run to finish (you were number {first.ahead} in line when "
        "you asked)."
    )


class DeviceTurn:
    """A session's turn on the device, as `device_turn()` yields it. Long work calls `pass_on()` between its units."""

    def __init__(self, queue: DeviceQueue, ticket: Ticket) -> None:
        self.queue, self.ticket = queue, ticket

    def pass_on(self) -> None:
        """If anyone is waiting, let them go first and take the device back after them: long work then never blocks
        another session for more than one of its units. The line is FIFO, so later arrivals queue behind this."""
        if self.queue.waiting == 0:
            return
        self.queue.release(self.ticket, "passed on")
        self.ticket = self.queue.enter(self.ticket.what, self.ticket.owner)
        _wait_for_turn(self.queue, self.ticket, max_wait_s=None)  # admitted once already: no refusal mid-way


@contextmanager
def device_turn(what: str = "run") -> Iterator[DeviceTurn]:
    """Hold the device for a whole run, waiting in line (and saying so) while other sessions hold it.

    The turn outlives the `with` block: it ends when this session's script run ends, so the page this run is about
    to draw never competes with the next session's passes (at most DRAW_HOLD_S). Outside a script run, or when the
    block raises, it ends at once.
    """
    queue = device_queue()
    earlier = st.session_state.pop(HELD_TICKET, None)
    if earlier is not None:  # this session is still drawing after its last run: give that turn back, queue again
        queue.release(earlier)
    turn = DeviceTurn(queue, queue.enter(what, _session_label()))
    try:
        _wait_for_turn(queue, turn.ticket, hosting_policy().max_wait_s)
        yield turn
    except BaseException:  # an error, a refusal, or a click that stops the script: nothing left to draw for this run
        queue.release(turn.ticket)
        raise
    if get_script_run_ctx(suppress_warning=True) is None:
        queue.release(turn.ticket)
        return
    st.session_state[HELD_TICKET] = turn.ticket
    queue.release_when_done(turn.ticket, threading.current_thread(), DRAW_HOLD_S)


class ContentionProbe:
    """Samples, at the start and after every pass, how many other sessions' scripts are drawing (not waiting)."""

    def __init__(self) -> None:
        self.me = threading.get_ident()
        self.most = 0
        self.sample()

    def sample(self) -> None:
        others = script_activity().others_drawing(self.me, device_queue().waiting_thread_ids())
        self.most = max(self.most, others)

    @property
    def note(self) -> str:
        return CONTENTION_NOTE.format(n=self.most) if self.most else ""


def _count_run(policy: HostedPolicy) -> None:
    """The per-session rate limit: every turn on the device counts."""
    st.session_state[RUN_STARTS] = policy.check_rate(st.session_state.get(RUN_STARTS, ()), time.monotonic())


def run_streaming(lm: LoadedModel, request: Request, probe: ContentionProbe | None = None) -> Trace:
    """The timed run, drawing each token with its gap as its pass finishes (the drawing falls inside the ITL)."""
    live = st.container(border=True)
    live.caption("Live: each token appears as its pass finishes, with its inter-token latency (measured).")
    stream = live.empty()
    streamed: list[PassRecord] = []
    token_times: list[float] = []

    def on_pass(p: PassRecord) -> None:
        if probe is not None:
            probe.sample()
        streamed.append(p)
        token_times.append(p.start_s + p.wall_s)
        gaps = [b - a for a, b in zip(token_times, token_times[1:])]
        stream.text(_stream_text(streamed, gaps))  # text, never markdown or HTML: tokens come from the user

    trace = measure(lm, request, on_pass=on_pass)
    stream.text(_stream_text(list(trace.passes), list(trace.itl_s)))
    return trace


def attach_attention(lm: LoadedModel, result: RunResult, cap_bytes: int | None = None) -> RunResult:
    """The untimed eager replay; a failure or the memory cap leaves the timed run intact, with a note why."""
    try:
        with st.spinner("Replaying the same tokens with eager attention to capture the maps (untimed)…"):
            maps = capture_attention(lm, result.trace, cap_bytes=cap_bytes)
            result = replace(result, attention=maps, attention_note="")
    except Exception as exc:  # noqa: BLE001 - keep the timed run even when the replay fails
        note = str(exc) if isinstance(exc, ExplorerError) else f"Attention capture failed: {one_line(exc)}"
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
        validate(request)
        _count_run(policy)
        with device_turn("run"):
            lm = get_model(replace(inputs, model=model))
            st.session_state[LAST_INPUTS] = inputs  # a model that loaded: the labs run on the sidebar's last one
            if policy.max_prompt_tokens is not None:  # a few thousand characters at most, after the check above
                policy.check_prompt_tokens(len(tokenize(lm, request.prompt, request.use_chat_template)))
            probe = ContentionProbe()
            trace = run_streaming(lm, request, probe)
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
        show_error(f"The run failed: {one_line(exc)}")
    return None


def remeasure_device() -> None:
    """Take the device figures again now and re-cost the current run with them: no model call."""
    run = current_run()
    try:
        _count_run(hosting_policy())
    except ExplorerError as exc:
        show_error(str(exc))
        return
    with device_turn("device figures"), st.spinner("Measuring the device (best of 5 matmuls and copies)…"):
        kind, dtype = (run.trace.device.kind, run.trace.device.dtype) if run else ("cpu", "float32")
        fresh = device_profile(kind, dtype, fresh=True)
    if run is not None:
        st.session_state[RUN] = replace(run, trace=keep_figures_honest(recost(run.trace, fresh)))
    st.sidebar.caption(f"Device figures taken at {fresh.measured_at}.")


def run_lab(
    key: str,
    what: str,
    work: Callable[[LoadedModel, DeviceProfile, Progress], object],
    size: LabSize | None = None,
) -> object | None:
    """A lab's run: on the device in turn, on the sidebar's model, with progress; kept in the session under `key` so
    changing a view never runs it again. `size` is what the lab is about to run, checked against a hosted server's
    caps before it waits for the device (a hosted server refuses a lab without one). Between the lab's units (each
    progress report) anyone waiting goes first. Errors are one line and keep the previous result."""
    inputs = st.session_state.get(LAST_INPUTS, RunInputs())
    try:
        policy = hosting_policy()
        model = policy.check_model(inputs.model)
        policy.check_lab(size)
        _count_run(policy)
        with device_turn("lab") as turn:
            lm = get_model(replace(inputs, model=model))
            bar = st.progress(0.0, text=escape_markdown(what))

            def progress(fraction: float, text: str) -> None:
                bar.progress(min(1.0, fraction), text=escape_markdown(text))
                turn.pass_on()

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
