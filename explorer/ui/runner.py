"""Work on the shared device, each through the one way onto it (`explorer.ui.admission.on_device`): a run from the
sidebar's inputs (run with live streaming, capture attention), a lab's run, and re-measuring the device figures.

What holds the device and for how long (one turn each, first come first served, see
`explorer.hosting.queue.DeviceQueue`):
- the server's warm-up at start (`explorer.ui.warm_start`): loading the default model, the device figures and the
  warm-up, once per process; a run pressed meanwhile waits for it (`explorer.ui.waiting.wait_for_warming`) and
  then starts warm;
- a sidebar run: loading (once per model), the device figures (measured once per server, kept in its
  `ServerSession`) and the warm-up, the timed passes of every repeat, stepping aside between any two of its passes
  or warm-up forwards for the one-pass turns waiting (other sessions' Next tokens and Prefills: `RunOnTurn`); the
  untimed attention replay comes after the turn (on the model's eager twin), and the page is drawn after it; the next
  session's passes are kept apart from both, pass by pass, by the server's gate (`explorer.hosting.quiet`: between
  this run's own passes, with its clock paused, other sessions' charts go first), each pass's record saying what
  still ran beside it;
- a lab: the no-cache and batching labs hand the device to anyone waiting between any two timed passes (their
  figures are sums of individually timed passes); the scheduling lab only between its measured spans (the engine's
  run, static batching, one-at-a-time serving), which are wall-clock spans and never cut (`core.lab_progress`);
- a stepped request (`explorer.ui.step_mode`): one pass per click, so other sessions run between clicks; the click
  that finishes it also runs `keep_figures_honest`, which may re-run the microbenchmarks (seconds);
- "Re-measure device figures": the microbenchmarks (a few seconds).
Changing a view takes no turn: it only reads the session's stored run.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

import streamlit as st

from explorer.charts.step_mode import disturbed_sentence
from explorer.core.attention import capture_attention
from explorer.core.device import FiguresStore
from explorer.core.engine import CheckedRequest, OnPass, Request, generate, warm_up_shapes
from explorer.core.errors import ExplorerError
from explorer.core.figure_correction import keep_figures_honest, recost
from explorer.core.lab_progress import MakeWay, Report, nobody_waits
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import prepare_device
from explorer.core.trace import DeviceProfile, PassRecord, Trace
from explorer.hosting.quiet import PassGate, TimedRun
from explorer.models.loading import resolve_device
from explorer.ui.admission import Admitted, DeviceAsk, on_device
from explorer.ui.device_turn import DeviceTurn, RunOnTurn
from explorer.ui.shared import server_session
from explorer.ui.state import LAST_INPUTS, RUN, RunInputs, RunResult, current_run, remember
from explorer.ui.waiting import progress_bar
from explorer.ui.widgets import failure_line

ATTENTION_OFF = "Attention capture was off for this run: switch it on in the sidebar and run again."
REPLAYING = "Replaying the same tokens with eager attention"


# --- the run -------------------------------------------------------------------------------------------------------
def _stream_text(passes: list[PassRecord], itl_s: list[float]) -> str:
    parts = [
        f"{p.token_text!r} (TTFT)" if p.is_prefill else f"{p.token_text!r} {gap * 1e3:.0f} ms"
        for p, gap in zip(passes, [0.0, *itl_s])
    ]
    return "  ".join(parts)


def run_streaming(
    lm: LoadedModel,
    checked: CheckedRequest,
    figures: FiguresStore,
    gate: PassGate | None = None,
    turn: DeviceTurn | None = None,
) -> Trace:
    """The device figures and the warm-up (`prepare_for_run`) on a progress bar, then the timed run, drawing each token
    with its gap as its pass finishes (the drawing falls inside the ITL); with a server's `gate`, the warm-up's
    forwards run apart from other sessions' drawing and every pass is timed apart from it, its record saying what
    still ran beside it (as `measure` runs it otherwise);
    with the session's `turn`, other sessions' waiting one-pass turns go between its passes and warm-up forwards,
    its clock paused (`RunOnTurn`), and each pass is counted on the turn as it ends."""
    live = st.container(border=True)
    live.caption("Live: each token appears as its pass finishes, with its inter-token latency (measured).")
    stream = live.empty()
    paused = live.empty()
    streamed: list[PassRecord] = []
    token_times: list[float] = []

    def on_pass(p: PassRecord) -> None:
        streamed.append(p)
        token_times.append(p.token_s)  # the trace's own definition of when a token arrived
        gaps = [b - a for a, b in zip(token_times, token_times[1:])]
        stream.text(_stream_text(streamed, gaps))  # text, never markdown or HTML: tokens come from the user

    def say(text: str) -> None:  # a pause for other sessions' one-pass turns, while it lasts
        if text:
            paused.caption(text)
        else:
            paused.empty()

    on_turn = RunOnTurn(turn, say) if turn is not None else None
    let_through = on_turn.let_through if on_turn is not None else nobody_waits
    with progress_bar("Preparing the device…") as report:
        # The warm-up's forwards apart from drawing, as the passes are: beside three sessions drawing charts, the
        # generic warm-up took 2.1-2.2 s outside the gate and 0.46-0.47 s inside it.
        warming = TimedRun(gate) if gate is not None else None
        with warming if warming is not None else nullcontext():
            between = (lambda: warming.between(let_through)) if warming is not None else let_through
            profile = prepare_for_run(lm, figures, gate, report, checked, between)
        report(1.0, "Running the request: the timed passes…")
        timed = TimedRun(gate) if gate is not None else None
        with timed if timed is not None else nullcontext():
            make_way = (lambda: timed.between(let_through)) if timed is not None else None
            tally = on_turn.tally if on_turn is not None else None
            on = OnPass(on_pass, make_way, tally)
            trace = generate(lm, checked, profile, on, warmed_up=True, shapes_warmed=True)  # prepare_for_run did
    if on_turn is not None:
        on_turn.done()
    trace = keep_figures_honest(trace, figures)
    if timed is not None:
        trace = trace.with_beside_cpu([b.cpu_s for b in timed.passes_beside])
    stream.text(_stream_text(list(trace.passes), list(trace.itl_s)))
    return trace


def prepare_for_run(
    lm: LoadedModel,
    figures: FiguresStore,
    gate: PassGate | None,
    report: Report,
    checked: CheckedRequest | None = None,
    between: MakeWay = nobody_waits,
) -> DeviceProfile:
    """A Run's figures, and its warm-up unless another session's passes left the device warm (`PassGate.warm`) or it
    is crowded (`PassGate.crowded`: turns in line, or a room sharing the device, would wait for the warm-up): in a
    busy room a Run's turn was its warm-up and its passes, about half of it the warm-up (its 8-token prefill warms no
    shape of the Run's own), and everyone behind it waited for both. The trace says warmed up either way: this
    process's one-off start-up costs were paid by the server's warm-up, and in a room the passes before its first
    were other sessions'. `checked`'s own shapes are warmed here, where this process has not run them,
    before the timed run holds the pass gate (none on a CPU left warm: `warm_up_shapes`); `between` follows each generic
    warm-up forward."""
    if gate is not None and (gate.warm() or gate.crowded()):
        profile = figures.get(lm.torch_device.type, lm.info.dtype, progress=report)
        if checked is not None:
            warm_up_shapes(lm, checked, progress=report, device_warm=True)
        return profile
    return prepare_device(lm, figures, checked, progress=report, between=between)


def attach_attention(
    lm: LoadedModel, result: RunResult, cap_bytes: int | None = None, gate: PassGate | None = None
) -> RunResult:
    """The untimed eager replay, after the run's turn (on the model's eager twin; with a server's `gate`, each replay
    pass kept apart from other sessions' timed passes); a failure or the memory cap leaves the timed run intact, with
    a note why.

    A click on a page link during the replay stops the script at the spinner's end, after the maps are made: they are
    kept in the run's `OwedCapture` (no Streamlit call there), which the next page waits for and takes them from. A
    replay stopped sooner leaves the run cut short (`CAPTURE_CUT_SHORT`): the Attention page replays it
    (`capture_again`)."""
    section = gate.drawing if gate is not None else nullcontext
    owed = result.capture_owed
    maps = None
    if owed is not None:
        owed.start()
    try:
        with st.spinner(f"{REPLAYING} to capture the maps (untimed)…"):
            maps = capture_attention(lm, result.trace, cap_bytes=cap_bytes, section=section)
    except Exception as exc:  # noqa: BLE001 - keep the timed run even when the replay fails
        note = str(exc) if isinstance(exc, ExplorerError) else failure_line("Attention capture", exc)
        result = replace(result, attention_note=note, capture_owed=None)  # a failure is said, not replayed again
    finally:
        if owed is not None:
            owed.end(maps)  # also when a click stopped the script: its maps kept, the page waiting for them woken
    if maps is not None:
        result = replace(result, attention=maps, attention_note="", capture_owed=None)
    RUN.set(result)
    return result


def capture_again(result: RunResult) -> RunResult | None:
    """A capture that was cut short, replayed now on the run's own model (the trace holds every token, so the replay
    is the same untimed one): the model is fetched in a turn like any work on it (loaded already, this is at once),
    and the replay runs after the turn; None when it was refused or failed (one line on screen says why)."""
    if result.capture_owed is None:
        return result
    ask = DeviceAsk("attention", "The attention capture", result.capture_owed.inputs, counts=False)
    return on_device(ask, lambda _: result, _attention_after_the_turn)


def execute_run(inputs: RunInputs) -> RunResult | None:
    """Check the server's limits, wait in line for the device, load, run with live streaming, capture attention;
    keep the result in state. Everything a visitor typed is checked before anything is loaded or tokenized."""
    request = Request(
        prompt=inputs.prompt,
        max_new_tokens=inputs.max_new_tokens,
        use_chat_template=inputs.use_chat_template,
        sampling=inputs.sampling,
        repeats=inputs.repeats,
        decode_path=inputs.decode_path,
    )
    passes = request.max_new_tokens * request.repeats
    ask = DeviceAsk("run", "The run", inputs, request, passes=passes, steps_aside=True)
    return on_device(
        ask, lambda admitted: _run(admitted, inputs), _attention_after_the_turn if inputs.capture_attention else None
    )


def _attention_after_the_turn(admitted: Admitted, result: RunResult) -> RunResult:
    """The replay holds no turn: the next session's passes start while it runs (`on_device`'s `after_turn`)."""
    return attach_attention(admitted.model, result, admitted.policy.attention_cap_bytes, admitted.session.gate)


def _run(admitted: Admitted, inputs: RunInputs) -> RunResult:
    LAST_INPUTS.set(inputs)  # a model that loaded: the labs run on the sidebar's last one
    assert admitted.checked is not None
    session = admitted.session
    trace = run_streaming(admitted.model, admitted.checked, session.figures, session.gate, admitted.turn)
    owed = inputs if inputs.capture_attention else None  # its replay comes after the turn (`attach_attention`)
    result = replace(remember(trace, inputs.prompt, owed), contention_note=disturbed_sentence(trace.passes))
    if owed is None:
        result = replace(result, attention_note=ATTENTION_OFF)
    RUN.set(result)
    if result.contention_note:
        st.warning(result.contention_note)
    return result


def remeasure_device(device_choice: str, dtype: str) -> None:
    """Take the device figures again now and re-cost the current run with them: no model call. Without a run, the
    figures are those of the device and dtype the sidebar would run on (`device_choice` may be "auto")."""
    run = current_run()

    def remeasure(admitted: Admitted) -> DeviceProfile:
        if run is not None:  # the figures the current run was costed with
            kind, of_dtype = run.trace.device.kind, run.trace.device.dtype
        else:
            kind, of_dtype = resolve_device(device_choice).type, dtype
        with progress_bar("Measuring the device (best of 5 matmuls, copies and reads)…") as bar:
            return admitted.session.figures.get(kind, of_dtype, fresh=True, progress=bar)

    fresh = on_device(DeviceAsk("device figures", "Re-measuring the device"), remeasure)
    if fresh is None:  # the rate limit, a refusal in line, or a device this server does not have: said on screen
        return
    if run is not None:
        figures = server_session().figures
        RUN.set(replace(run, trace=keep_figures_honest(recost(run.trace, fresh), figures)))
    st.sidebar.caption(f"Device figures taken at {fresh.measured_at}.")
