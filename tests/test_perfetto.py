"""The Perfetto export of a real tiny-model run: valid trace-event JSON whose slices are the trace's own times."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, Trace
from explorer.recording import perfetto

NEW_TOKENS = 8
# The phases the format defines that this export uses, and the keys each must carry (Trace Event Format).
REQUIRED = {
    "X": {"name", "ph", "pid", "tid", "ts", "dur"},
    "i": {"name", "ph", "pid", "tid", "ts", "s"},
    "C": {"name", "ph", "pid", "ts", "args"},
    "M": {"name", "ph", "pid", "args"},
}
METADATA = {
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
}


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> Trace:
    return generate(tiny_lm, check_request(tiny_lm, Request("Hi", max_new_tokens=NEW_TOKENS)), cpu_figures)


@pytest.fixture(scope="module")
def repeated(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> Trace:
    return generate(tiny_lm, check_request(tiny_lm, Request("Hi", max_new_tokens=4, repeats=3)), cpu_figures)


def check_format(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Object Format: a traceEvents list of events with the keys and types their phase requires."""
    assert set(document) >= {"traceEvents"} and document["displayTimeUnit"] in ("ms", "ns")
    events = document["traceEvents"]
    assert isinstance(events, list) and events
    for event in events:
        assert event["ph"] in REQUIRED, event
        assert REQUIRED[event["ph"]] <= set(event), event
        assert isinstance(event["name"], str) and isinstance(event["pid"], int)
        assert isinstance(event.get("tid", 0), int) and isinstance(event.get("args", {}), dict)
        if event["ph"] == "M":
            assert event["args"].keys() == {METADATA[event["name"]]}
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0  # microseconds since the request began
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
        if event["ph"] == "i":
            assert event["s"] in ("g", "p", "t")
        if event["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in event["args"].values())
    return events


def of(events: list[dict[str, Any]], ph: str, pid: int, tid: int | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["ph"] == ph and e["pid"] == pid and (tid is None or e.get("tid") == tid)]


def test_the_file_is_trace_event_json(trace: Trace, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    perfetto.write_perfetto(trace, path)
    document = json.loads(path.read_text(encoding="utf-8"))
    check_format(document)
    assert document["otherData"]["new_tokens"] == trace.new_tokens == NEW_TOKENS


def test_one_complete_event_per_pass_at_the_traces_times_in_microseconds(trace: Trace) -> None:
    events = check_format(perfetto.perfetto_dict(trace))
    slices = of(events, "X", pid=1, tid=perfetto.PASSES_TID)
    assert len(slices) == trace.new_tokens  # one per pass, nothing else on the passes track
    for event, p in zip(slices, trace.passes, strict=True):
        assert event["name"] == event["cat"] == p.phase
        assert event["ts"] == p.start_s * 1e6 and event["dur"] == p.wall_s * 1e6
        args = event["args"]
        assert (args["pass"], args["tokens_in"]) == (p.index, p.tokens_in)
        assert (args["cache_len_before"], args["cache_len_after"]) == (p.cache_len_before, p.cache_len_after)
        assert args["kv_cache_bytes (measured)"] == p.kv_cache_bytes
        assert args["kv_bytes_read (modelled)"] == p.cost.kv_bytes_read
        assert args["weight_read_ms (modelled)"] == p.cost.t_weight_read_s * 1e3
        assert args["kv_ms (modelled)"] == p.cost.t_kv_s * 1e3
        assert args["compute_ms (modelled)"] == p.cost.t_compute_s * 1e3
        assert args["bound (modelled)"] == p.cost.bound
    # Passes follow one another on one track: no slice starts before the previous one ended.
    assert all(b["ts"] >= a["ts"] + a["dur"] for a, b in zip(slices, slices[1:]))
    assert slices[0]["args"]["tokens_in"] == trace.prompt_len and {s["args"]["tokens_in"] for s in slices[1:]} == {1}


def test_one_instant_per_token_when_it_was_sampled(trace: Trace) -> None:
    events = perfetto.trace_events(trace)
    tokens = of(events, "i", pid=1, tid=perfetto.TOKENS_TID)
    assert [e["ts"] for e in tokens] == [p.token_s * 1e6 for p in trace.passes]
    assert [e["args"]["token_id"] for e in tokens] == list(trace.generated_token_ids)
    assert tokens[0]["args"]["ttft_ms"] == pytest.approx(trace.ttft_s * 1e3)
    assert [e["args"]["itl_ms"] for e in tokens[1:]] == pytest.approx([gap * 1e3 for gap in trace.itl_s])
    assert all(e["name"] == repr(p.token_text) for e, p in zip(tokens, trace.passes))


def test_request_track_and_kv_counter(trace: Trace) -> None:
    events = perfetto.trace_events(trace)
    request, tokenize, *samples = of(events, "X", pid=1, tid=perfetto.REQUEST_TID)
    assert request["ts"] == 0 and request["dur"] == pytest.approx(trace.e2e_s * 1e6)
    assert tokenize["dur"] == trace.prefill.start_s * 1e6
    assert len(samples) == trace.new_tokens
    for s in (tokenize, *samples):  # nested inside the request's span, so Perfetto stacks them under it
        assert s["ts"] >= request["ts"] and s["ts"] + s["dur"] <= request["ts"] + request["dur"] + 1e-6
    counter = of(events, "C", pid=1)
    assert [c["args"]["bytes"] for c in counter] == [0] + [p.kv_cache_bytes for p in trace.passes]
    steps = [b["args"]["bytes"] - a["args"]["bytes"] for a, b in zip(counter[1:], counter[2:])]
    assert set(steps) == {trace.model.kv_bytes_per_token}  # one position per decode pass


def test_names_of_process_and_tracks(trace: Trace) -> None:
    names = {(e["name"], e.get("tid")): e["args"] for e in perfetto.trace_events(trace) if e["ph"] == "M"}
    assert names[("process_name", 0)] == {"name": "request"}
    assert {names[("thread_name", tid)]["name"] for tid in perfetto.TRACK_NAMES} == {"request", "passes", "tokens"}


def test_each_repeat_is_a_process_with_the_shown_one_first(repeated: Trace) -> None:
    events = check_format(perfetto.perfetto_dict(repeated))
    for r, passes in enumerate(repeated.repeats):
        slices = of(events, "X", pid=r + 1, tid=perfetto.PASSES_TID)
        assert [e["ts"] for e in slices] == [p.start_s * 1e6 for p in passes]
        assert [e["dur"] for e in slices] == [p.wall_s * 1e6 for p in passes]
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert min(order, key=order.get) == repeated.shown_repeat + 1
    shown_name = next(
        e["args"]["name"] for e in events if e["name"] == "process_name" and e["pid"] == repeated.shown_repeat + 1
    )
    assert shown_name.startswith(f"repeat {repeated.shown_repeat + 1} of 3 (shown")


def test_token_text_survives_as_json(trace: Trace) -> None:
    odd = replace(trace.passes[0], token_text='</script>"\n\x00')
    document = json.loads(perfetto.perfetto_json(replace(trace, repeats=((odd,),), shown_repeat=0)))
    (token,) = of(document["traceEvents"], "i", pid=1)
    assert token["name"] == repr('</script>"\n\x00')
    assert of(document["traceEvents"], "X", pid=1, tid=perfetto.PASSES_TID)[0]["args"]["token"] == '</script>"\n\x00'
