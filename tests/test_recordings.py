"""Recordings: the `.pdx` format round-trips a run with its maps, stays under 5 MB, and refuses a bad file in one line;
`run --record` writes one; the bundled ones open on every "One request" page with no model loaded, under a banner."""

from __future__ import annotations

import io
import json
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from explorer.core.attention import capture_attention
from explorer.core.attention_maps import AttentionMaps
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.request import Request
from explorer.core.trace import Trace
from explorer.recording.checks import read_recording
from explorer.recording.pdx import (
    ATTENTION,
    MAX_RECORDING_BYTES,
    META,
    TRACE,
    RecordingMeta,
    bundled,
    recording_bytes,
    spread_layers,
)
from tests.cli_support import run_cli
from tests.recording_support import BOUNDARY, REFUSED, forged_kv_recording


@pytest.fixture(scope="module")
def tiny_run(tiny_lm: LoadedModel) -> tuple[Trace, AttentionMaps]:
    trace = measure(tiny_lm, Request(prompt="hello there, tiny model", max_new_tokens=6, use_chat_template=False))
    return trace, capture_attention(tiny_lm, trace)


def meta_for(trace: Trace, name: str = "tiny") -> RecordingMeta:
    return RecordingMeta.of(trace, name, "test")


# --- the format ------------------------------------------------------------------------------------------------------
def test_a_recording_round_trips_the_trace_and_every_map(tiny_run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = tiny_run
    opened = read_recording(recording_bytes(meta_for(trace), trace, maps))
    assert opened.trace == trace
    assert opened.meta.attention_layers == maps.layers and opened.meta.attention_note == ""
    assert opened.attention is not None
    assert opened.attention.tokens_text == maps.tokens_text
    assert opened.attention.replay_token_ids == maps.replay_token_ids
    for layer in maps.layers:
        np.testing.assert_array_equal(opened.attention.prefill[layer], maps.prefill[layer])
        assert len(opened.attention.decode[layer]) == len(maps.decode[layer])
        for got, want in zip(opened.attention.decode[layer], maps.decode[layer]):
            np.testing.assert_array_equal(got, want)


def test_over_the_budget_a_recording_keeps_evenly_spread_layers_then_none(
    tiny_run: tuple[Trace, AttentionMaps],
) -> None:
    trace, maps = tiny_run
    whole = len(recording_bytes(meta_for(trace), trace, maps))
    without = len(recording_bytes(meta_for(trace), trace, None))
    some = read_recording(recording_bytes(meta_for(trace), trace, maps, limit=whole - 1))
    assert 0 < len(some.meta.attention_layers) < len(maps.layers)
    assert "evenly spread" in some.meta.attention_note
    none = read_recording(recording_bytes(meta_for(trace), trace, maps, limit=without + 10))
    assert (
        none.attention is None and none.meta.attention_layers == () and "no attention maps" in none.meta.attention_note
    )
    assert spread_layers(tuple(range(30)), 1) == (15,)
    assert spread_layers(tuple(range(30)), 4) == (0, 10, 19, 29)


def pdx(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    return out.getvalue()


def good_members(trace: Trace, maps: AttentionMaps) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(recording_bytes(meta_for(trace), trace, maps))) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def edit_trace(change: Callable[[dict], object]) -> Callable[[dict[str, bytes]], None]:
    def edit(members: dict[str, bytes]) -> None:
        data = json.loads(members[TRACE])
        change(data)
        members[TRACE] = json.dumps(data).encode()

    return edit


def first_pass(data: dict) -> dict:
    return data["repeats"][0][0]


def npz_with(**changes: Callable[[dict[str, np.ndarray]], np.ndarray]) -> Callable[[dict[str, bytes]], None]:
    """An edit of the maps: each named array made anew from the arrays the good file holds."""

    def edit(members: dict[str, bytes]) -> None:
        with np.load(io.BytesIO(members[ATTENTION])) as arrays:
            kept = {name: arrays[name] for name in arrays.files}
        out = io.BytesIO()
        np.savez(out, **(kept | {name: make(kept) for name, make in changes.items()}))
        members[ATTENTION] = out.getvalue()

    return edit


BAD_EDITS: list[tuple[str, Callable[[dict[str, bytes]], None], str]] = [
    ("a time as text", edit_trace(lambda d: first_pass(d).update(wall_s="fast")), "wall_s: Input should be"),
    ("a negative time", edit_trace(lambda d: first_pass(d).update(wall_s=-1.0)), "wall_s: must be a finite number"),
    ("infinity", edit_trace(lambda d: first_pass(d).update(wall_s=1e999)), "must be a finite number"),
    ("a missing field", edit_trace(lambda d: d.pop("prompt_text")), "prompt_text: Field required"),
    ("tokens and texts disagree", edit_trace(lambda d: d["prompt_tokens_text"].pop()), "prompt_tokens_text"),
    ("passes out of order", edit_trace(lambda d: d["repeats"][0].reverse()), "must be pass 0, a prefill"),
    ("no passes", edit_trace(lambda d: d.update(repeats=[[]])), "must hold 1 to"),
    ("shown repeat missing", edit_trace(lambda d: d.update(shown_repeat=3)), "shown_repeat"),
    ("another schema", edit_trace(lambda d: d.update(schema=1)), "schema 1"),
    (
        "experts on a dense model",
        edit_trace(lambda d: first_pass(d).update(experts_touched=[1] * 99, experts_chosen=[[0]] * 99)),
        "experts must be distinct ids",
    ),
    ("a window per layer", edit_trace(lambda d: d["model"].update(layer_windows=[0] * 99)), "layer_windows"),
    ("an unknown member", lambda m: m.update({"evil.py": b"print(1)"}), "unexpected member 'evil.py'"),
    ("no trace", lambda m: m.pop(TRACE), "no trace.json"),
    ("meta not JSON", lambda m: m.update({META: b"{not json"}), "meta.json"),
    ("a trace bomb", lambda m: m.update({TRACE: b" " * (33 << 20)}), "unpacks to more than 32 MiB"),
    ("a deep trace", lambda m: m.update({TRACE: b"[" * 100_000}), "trace.json"),
    (
        "maps in float32",
        npz_with(prefill_L0=lambda a: a["prefill_L0"].astype(np.float32)),
        "prefill_L0 must be float16",
    ),
    ("maps of a wrong shape", npz_with(decode_L1=lambda a: a["decode_L1"][:, 1:]), "decode_L1 must be float16"),
    ("maps not probabilities", npz_with(prefill_L0=lambda a: a["prefill_L0"] * 7), "between 0 and 1"),
    ("a pickled array", npz_with(tokens_text=lambda a: np.array([object()], dtype=object)), "cannot be read"),
    ("an extra layer", npz_with(prefill_L9=lambda a: a["prefill_L0"]), "'prefill_L9' is not one of the arrays"),
]


@pytest.mark.parametrize(("name", "edit", "words"), BAD_EDITS, ids=[case[0] for case in BAD_EDITS])
def test_a_bad_recording_is_refused_in_one_line_naming_what_is_wrong(
    tiny_run: tuple[Trace, AttentionMaps], name: str, edit: Callable[[dict[str, bytes]], None], words: str
) -> None:
    trace, maps = tiny_run
    members = good_members(trace, maps)
    edit(members)
    with pytest.raises(BadInput) as refused:
        read_recording(pdx(members))
    line = str(refused.value)
    assert "\n" not in line and words in line, line


@pytest.mark.parametrize(("name", "make", "words"), REFUSED, ids=[case[0] for case in REFUSED])
def test_what_would_break_a_page_is_refused_in_one_line_naming_the_field(
    name: str, make: Callable[[], bytes], words: str
) -> None:
    """Divisors of 0, kinds no page knows, shapes past any model, counts that contradict: each a line, never a page's
    ZeroDivisionError, KeyError, IndexError or a dataframe of 10**12 rows."""
    with pytest.raises(BadInput) as refused:
        read_recording(make())
    line = str(refused.value)
    assert line.startswith("This recording is damaged: ") and words in line and "\n" not in line, line


@pytest.mark.parametrize(("name", "make"), BOUNDARY, ids=[case[0] for case in BOUNDARY])
def test_a_recording_at_the_edge_of_every_bound_opens(name: str, make: Callable[[], bytes]) -> None:
    assert read_recording(make()).trace.new_tokens >= 1


def test_a_30_mib_list_in_a_40_kb_file_is_refused_by_its_count_in_under_a_second_and_100_mb() -> None:
    """The issue's 48 KB file cost 3 GB and 100 s: its one list is now refused against the model's 30 layers before
    any parser builds it."""
    raw = forged_kv_recording()
    assert len(raw) < 100_000
    started = time.process_time()
    with pytest.raises(BadInput, match="kv_layer_bytes: a list of 15,728,640 values, more than the model's layers"):
        read_recording(raw)
    cpu_s = time.process_time() - started
    tracemalloc.start()
    try:
        with pytest.raises(BadInput):
            read_recording(raw)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"refused in {cpu_s:.2f} s of CPU, {peak_bytes / 1e6:.0f} MB at most")
    assert cpu_s < 1.0 and peak_bytes < 100e6, (cpu_s, peak_bytes)


def test_a_forged_list_under_a_key_spelled_with_escapes_is_refused_by_the_files_total() -> None:
    """`"kv_layer_by\\u0074es"` is the same key to a parser but not to a scan for the name: the whole file's values,
    bounded by its declared counts, still refuse it before pydantic builds it."""
    raw = forged_kv_recording(key=rb'"kv_layer_by\u0074es"')
    started = time.process_time()
    with pytest.raises(BadInput, match=r"trace\.json: it holds 15,7\d\d,\d{3} values, over 2 x the"):
        read_recording(raw)
    assert time.process_time() - started < 1.0


def test_size_and_zip_are_checked_before_anything_is_read() -> None:
    with pytest.raises(BadInput, match="a recording is at most 5 MB"):
        read_recording(b"x" * (MAX_RECORDING_BYTES + 1))
    with pytest.raises(BadInput, match="not a zip archive"):
        read_recording(b"just some text")


# --- the CLI ---------------------------------------------------------------------------------------------------------
def test_run_record_writes_a_recording_that_opens(tiny_llama_dir: Path, tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("a prompt read from a file", encoding="utf-8")
    out = tmp_path / "tiny-run.pdx"
    args = ["run", "--model", str(tiny_llama_dir), "--prompt-file", str(prompt), "--no-chat-template"]
    result = run_cli(*args, "--max-new-tokens", "4", "--record", str(out), "--record-title", "Tiny")
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    opened = read_recording(out.read_bytes())
    assert opened.meta.name == "tiny-run" and opened.meta.title == "Tiny"
    assert opened.meta.command.startswith("python -m explorer run --model") and "--record" in opened.meta.command
    assert opened.trace.prompt_text == "a prompt read from a file" and opened.attention is not None


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--prompt", "hi", "--record", "out.json"], "--record writes a .pdx file: name it e.g. out.pdx"),
        (["--prompt-file", "no/such/prompt.txt"], "Cannot read the prompt from no/such/prompt.txt"),
    ],
)
def test_run_record_refuses_bad_paths_in_one_line_before_loading(args: list[str], words: str) -> None:
    result = run_cli("run", *args)
    assert result.returncode != 0
    assert words in result.stderr and result.stderr.count("\n") == 1, result.stderr


# --- the bundled recordings ------------------------------------------------------------------------------------------
BUNDLED_NAMES = ("short-chat", "long-prompt-512", "bfloat16", "five-repeats")


def test_the_four_bundled_recordings_are_there_under_5_mb_and_open() -> None:
    found = bundled()
    assert set(BUNDLED_NAMES) <= set(found), sorted(found)
    for name, path in found.items():
        size = path.stat().st_size
        assert size < MAX_RECORDING_BYTES, f"{name}: {size:,} bytes"
        opened = read_recording(path.read_bytes())
        assert opened.meta.name == name and opened.meta.device and opened.meta.recorded_at
    shapes = {name: read_recording(found[name].read_bytes()) for name in BUNDLED_NAMES}
    assert shapes["long-prompt-512"].trace.prompt_len == 512
    assert shapes["bfloat16"].trace.model.dtype == "bfloat16"
    assert shapes["five-repeats"].trace.repeat_count == 5
    assert shapes["short-chat"].meta.attention_layers == tuple(range(30))  # a short prompt keeps every layer
    assert replace(shapes["short-chat"].meta).banner.startswith("Recorded run, not live")


def test_the_recordings_readme_quotes_its_recordings() -> None:
    """The README's sentences on the bfloat16 recording are that recording's own figures, beside short-chat's, and it
    says nothing about "this CPU" that a run did not measure."""
    text = (bundled()["bfloat16"].parent / "README.md").read_text(encoding="utf-8")
    bf16, fp32 = (read_recording(bundled()[name].read_bytes()).trace for name in ("bfloat16", "short-chat"))

    def median_decode_ms(trace: Trace) -> float:
        return float(np.median([p.wall_s for p in trace.decodes])) * 1e3

    assert bf16.model.dtype == "bfloat16" and fp32.model.dtype == "float32"
    assert median_decode_ms(bf16) < median_decode_ms(fp32)  # decode ran faster, so the README may not say slower
    assert f"median {median_decode_ms(bf16):.1f} ms against {median_decode_ms(fp32):.1f} ms" in text
    assert f"prefill slower ({bf16.prefill.wall_s * 1e3:.1f} ms against {fp32.prefill.wall_s * 1e3:.1f} ms" in text
    assert f"reached {bf16.device.measured_flops / 1e9:.2f} GFLOP/s" in text
    assert f"against {fp32.device.peak_flops / 1e9:.1f} GFLOP/s in float32" in text
    assert "this CPU" not in text and "nothing else running" not in text
