"""A Run from the sidebar's inputs, sent to the device owner (`explorer.owner.server`, the "run" job): each token
drawn with its gap as its pass ends, the run kept as soon as its trace arrives, then its attention maps from the owner's
untimed replay; a capture again for a run whose capture a click cut short; re-measuring the device figures. Nothing
here runs the model: the owner does, in its own process, and takes turns there (`explorer.ui.device_link`). Changing a
view sends no job: it only reads the session's stored run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import streamlit as st

from explorer.charts.step_mode import disturbed_sentence
from explorer.core.attention_maps import maps_from_wire
from explorer.core.request import Request
from explorer.core.trace import PassRecord, Trace, pass_from_dict
from explorer.hosting.client import Event
from explorer.ui.admission import DeviceAsk, ask_owner
from explorer.ui.device_link import Keep
from explorer.ui.state import LAST_INPUTS, RUN, OwedCapture, RunInputs, RunResult, current_run, remember

ATTENTION_OFF = "Attention capture was off for this run: switch it on in the sidebar and run again."
REPLAYING = "Replaying the same tokens with eager attention"


# --- the run -------------------------------------------------------------------------------------------------------
def _stream_text(passes: list[PassRecord], itl_s: list[float]) -> str:
    parts = [
        f"{p.token_text!r} (TTFT)" if p.is_prefill else f"{p.token_text!r} {gap * 1e3:.0f} ms"
        for p, gap in zip(passes, [0.0, *itl_s])
    ]
    return "  ".join(parts)


class LiveTokens:
    """The run's tokens as their passes end, each with its gap (measured by the owner: the stream's own delay is in
    none of them)."""

    def __init__(self) -> None:
        live = st.container(border=True)
        live.caption("Live: each token appears as its pass finishes, with its inter-token latency (measured).")
        self.stream = live.empty()
        self.passes: list[PassRecord] = []

    def on_pass(self, data: dict[str, Any]) -> None:
        self.passes.append(pass_from_dict(data))
        times = [p.token_s for p in self.passes]  # the trace's own definition of when a token arrived
        self.stream.text(_stream_text(self.passes, [b - a for a, b in zip(times, times[1:])]))  # text: user's tokens

    def final(self, trace: Trace) -> None:
        self.stream.text(_stream_text(list(trace.passes), list(trace.itl_s)))


def with_attention(result: RunResult, done: dict[str, Any] | None) -> RunResult:
    """The run with the maps the owner's replay made, or the line saying why there are none."""
    if done is None:
        return result
    if done.get("maps"):
        return replace(result, attention=maps_from_wire(done["maps"]), attention_note="", capture_owed=None)
    if done.get("attention_note"):
        return replace(result, attention_note=done["attention_note"], capture_owed=None)  # said, not replayed again
    return result


def owed_end(owed: OwedCapture) -> Any:
    """What the job's reader does with its last event when a click stopped the script after the trace arrived (no
    Streamlit call: `OwedCapture`): the maps kept for the next page, or none."""

    def end(event: Event) -> None:
        maps = event.data.get("maps") if event.name == "done" and isinstance(event.data, dict) else None
        owed.end(maps_from_wire(maps) if maps else None)

    return end


def execute_run(inputs: RunInputs) -> RunResult | None:
    """Check the server's limits, send the run to the device owner, draw its tokens as they come, keep the run the
    moment its trace arrives (a click after that loses nothing), then take its attention maps in."""
    request = Request(
        prompt=inputs.prompt,
        max_new_tokens=inputs.max_new_tokens,
        use_chat_template=inputs.use_chat_template,
        sampling=inputs.sampling,
        repeats=inputs.repeats,
        decode_path=inputs.decode_path,
    )
    passes = request.max_new_tokens * request.repeats
    ask = DeviceAsk("run", "The run", inputs, request, passes=passes)
    live: list[LiveTokens] = []
    kept: list[RunResult] = []  # the run, once its trace has arrived: its capture (`OwedCapture`) is owed from then

    def on_pass(data: dict[str, Any]) -> None:
        if not live:
            live.append(LiveTokens())
        live[0].on_pass(data)

    def on_trace(data: dict[str, Any]) -> None:
        trace = Trace.from_dict(data)
        LAST_INPUTS.set(inputs)  # a model that loaded: the labs run on the sidebar's last one
        capture = inputs if inputs.capture_attention else None
        result = replace(remember(trace, inputs.prompt, capture), contention_note=disturbed_sentence(trace.passes))
        if result.capture_owed is None:
            result = replace(result, attention_note=ATTENTION_OFF)
        else:
            result.capture_owed.start()  # the owner replays it now: a page a click opens waits for its maps
        RUN.set(result)
        kept.append(result)
        if live:
            live[0].final(trace)
        if result.contention_note:
            st.warning(result.contention_note)

    def home(event: Event) -> None:  # the job's last event, after a click stopped this page (no Streamlit call)
        if kept and kept[0].capture_owed is not None:
            owed_end(kept[0].capture_owed)(event)

    body = {"capture": inputs.capture_attention}
    done = ask_owner(ask, "run", body, {"pass": on_pass, "trace": on_trace}, keep=Keep("trace", home))
    if not kept:
        return None
    owed = kept[0].capture_owed
    if owed is not None:  # the maps into the run's capture first, with no Streamlit call: a click may have stopped
        # this script (its next session-state access raises) while a page it opened waits for them (`OwedCapture`)
        owed.end(maps_from_wire(done["maps"]) if done is not None and done.get("maps") else None)
    result = with_attention(kept[0], done)
    RUN.set(result)
    return result


def capture_again(result: RunResult) -> RunResult | None:
    """A capture that was cut short, replayed now by the owner on the run's own tokens (the trace holds every one, so
    the replay is the same untimed one); None when it was refused or failed (one line on screen says why)."""
    if result.capture_owed is None:
        return result
    ask = DeviceAsk("attention", "The attention capture", result.capture_owed.inputs, counts=False)
    done = ask_owner(ask, "capture", {"trace": result.trace.to_dict()})
    if done is None:
        return None
    again = with_attention(result, done)
    RUN.set(again)
    return again


def remeasure_device(device_choice: str, dtype: str) -> None:
    """Take the device figures again now and re-cost the current run with them: no model call. Without a run, the
    figures are those of the device and dtype the sidebar would run on (`device_choice` may be "auto")."""
    run = current_run()
    body: dict[str, Any] = {"device": device_choice, "dtype": dtype}
    if run is not None:  # the figures the current run was costed with
        body["trace"] = run.trace.to_dict()
    done = ask_owner(DeviceAsk("device figures", "Re-measuring the device"), "figures", body)
    if done is None:  # the rate limit, a refusal in line, or a device the owner does not have: said on screen
        return
    if run is not None and done.get("trace"):
        RUN.set(replace(run, trace=Trace.from_dict(done["trace"])))
    st.sidebar.caption(f"Device figures taken at {done['measured_at']}.")
