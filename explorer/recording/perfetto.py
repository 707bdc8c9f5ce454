"""A run as a Chrome trace-event JSON file, which ui.perfetto.dev and chrome://tracing open as a timeline.

Each repeat of the request is one process with three tracks: the request (its whole span, tokenizing and set-up,
and each sampling step), the passes (one complete "X" slice per forward, at its measured start and duration), and the
tokens (one instant "i" event when each token was sampled); a counter shows the KV cache's bytes after every pass.
Times in the format are microseconds from the request's start, the trace's own clock (seconds) times 10^6.
Format: "Trace Event Format", Google, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from explorer.core.trace import PassRecord, Trace

US_PER_S = 1_000_000
REQUEST_TID, PASSES_TID, TOKENS_TID = 1, 2, 3
TRACK_NAMES = {REQUEST_TID: "request", PASSES_TID: "passes", TOKENS_TID: "tokens"}
KV_COUNTER = "KV cache (bytes, measured)"

Event = dict[str, Any]


class Track(NamedTuple):
    """Where an event is drawn: a process (one repeat) and a thread (one of its tracks)."""

    pid: int
    tid: int


def us(seconds: float) -> float:
    """The trace's seconds as the format's microseconds (fractions kept: a decode pass lasts tens of thousands)."""
    return seconds * US_PER_S


def metadata(pid: int, process_name: str, sort_index: int) -> list[Event]:
    """Names and order of the process and its tracks ("M" events carry no time)."""
    events: list[Event] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process_name}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": sort_index}},
    ]
    for tid, name in TRACK_NAMES.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    return events


def pass_args(p: PassRecord) -> dict[str, Any]:
    """What Perfetto shows for a selected pass: its shape, its cache, its measured and modelled times."""
    cost = p.cost
    return {
        "pass": p.index,
        "tokens_in": p.tokens_in,
        "cache_len_before": p.cache_len_before,
        "cache_len_after": p.cache_len_after,
        "kv_cache_bytes (measured)": p.kv_cache_bytes,
        "wall_ms (measured)": p.wall_s * 1e3,
        "flops (modelled)": cost.flops,
        "weight_bytes_read (modelled)": cost.weight_bytes_read,
        "kv_bytes_read (modelled)": cost.kv_bytes_read,
        "kv_bytes_written (modelled)": cost.kv_bytes_written,
        "weight_read_ms (modelled)": cost.t_weight_read_s * 1e3,
        "kv_ms (modelled)": cost.t_kv_s * 1e3,
        "compute_ms (modelled)": cost.t_compute_s * 1e3,
        "roofline_ms (modelled)": cost.roofline_time_s * 1e3,
        "bound (modelled)": cost.bound,
        "overhead_ms (measured - modelled)": p.overhead_s * 1e3,
        "token_id": p.token_id,
        "token": p.token_text,
    }


def complete(track: Track, name: str, cat: str, start_s: float, dur_s: float, args: dict[str, Any]) -> Event:
    """A slice with its start and duration ("X": one event, no begin/end pair to match)."""
    return {
        "pid": track.pid,
        "tid": track.tid,
        "ph": "X",
        "name": name,
        "cat": cat,
        "ts": us(start_s),
        "dur": us(dur_s),
        "args": args,
    }


def instant(track: Track, name: str, cat: str, at_s: float, args: dict[str, Any]) -> Event:
    """A point in time on one track ("i" with scope "t": drawn on that thread only)."""
    return {
        "pid": track.pid,
        "tid": track.tid,
        "ph": "i",
        "s": "t",
        "name": name,
        "cat": cat,
        "ts": us(at_s),
        "args": args,
    }


def counter(pid: int, at_s: float, kv_bytes: int) -> Event:
    """A sample of the KV cache counter: Perfetto draws a step chart per process and counter name."""
    return {"pid": pid, "tid": 0, "ph": "C", "name": KV_COUNTER, "ts": us(at_s), "args": {"bytes": kv_bytes}}


def repeat_events(passes: tuple[PassRecord, ...], pid: int) -> list[Event]:
    """One repeat's slices, instants and counter samples, all on its own clock."""
    end_s = passes[-1].token_s
    request, passes_track, tokens = Track(pid, REQUEST_TID), Track(pid, PASSES_TID), Track(pid, TOKENS_TID)
    events = [
        complete(request, "request", "request", 0.0, end_s, {"new_tokens": len(passes)}),
        complete(request, "tokenize and set up", "request", 0.0, passes[0].start_s, {}),
        counter(pid, 0.0, 0),  # the cache starts empty
    ]
    previous_token_s = 0.0
    for p in passes:
        forward_end_s = p.start_s + p.wall_s
        gap = {("ttft_ms" if p.is_prefill else "itl_ms"): (p.token_s - previous_token_s) * 1e3}
        events += [
            complete(passes_track, p.phase, p.phase, p.start_s, p.wall_s, pass_args(p)),
            # Between the forward's end and the token: sampling and the top-5, on the request's track.
            complete(request, "sample", "request", forward_end_s, p.token_s - forward_end_s, {"pass": p.index}),
            # From this moment a streaming client could show the token.
            instant(
                tokens,
                repr(p.token_text),
                "token",
                p.token_s,
                {"pass": p.index, "token_id": p.token_id, **gap},
            ),
            counter(pid, forward_end_s, p.kv_cache_bytes),
        ]
        previous_token_s = p.token_s
    return events


def trace_events(trace: Trace) -> list[Event]:
    """Every repeat as a process (pid = repeat + 1); the repeat the pages show is listed first."""
    events: list[Event] = []
    for r, passes in enumerate(trace.repeats):
        pid = r + 1
        shown = r == trace.shown_repeat
        name = "request" if trace.repeat_count == 1 else f"repeat {r + 1} of {trace.repeat_count}"
        if shown and trace.repeat_count > 1:
            name += " (shown on the pages: median end-to-end time)"
        events += metadata(pid, name, 0 if shown else pid)
        events += repeat_events(passes, pid)
    return events


def perfetto_dict(trace: Trace) -> dict[str, Any]:
    m = trace.model
    return {
        "traceEvents": trace_events(trace),
        "displayTimeUnit": "ms",
        "otherData": {  # shown by Perfetto under the trace's metadata
            "model": m.display_name,
            "dtype": m.dtype,
            "device": trace.device.name,
            "prompt_tokens": trace.prompt_len,
            "new_tokens": trace.new_tokens,
            "repeats": trace.repeat_count,
            "created_at": trace.created_at,
            "clock": "microseconds since each repeat's request started (before tokenizing)",
        },
    }


def perfetto_json(trace: Trace) -> str:
    return json.dumps(perfetto_dict(trace), ensure_ascii=False)


def write_perfetto(trace: Trace, path: Path) -> None:
    path.write_text(perfetto_json(trace), encoding="utf-8")
