"""Opening a recording: an uploaded `.pdx` is data from anyone, so every member is checked before a page reads it.
A refusal is one line naming what is wrong, e.g. "This recording is damaged: trace.json: repeats.0.3.wall_s: Input
should be a valid number."

What is bounded, and why:
- the file: `MAX_RECORDING_BYTES`, what the writer keeps every recording under;
- the zip: only the three known members, each read to at most its own cap whatever its header claims (a zip bomb
  stops at the cap), so a 5 MB file never becomes more than `MEMBER_CAPS` in memory;
- `meta.json` and `trace.json`: their shape, field by field, by pydantic against the dataclasses the app itself
  reads (strict: "5" is not 5; nesting past pydantic's parser limit is refused, never a RecursionError); then every
  number finite and not negative (NaN slips past every comparison a page makes), and the counts consistent (tokens,
  repeats, passes in order);
- `attention.npz`: loaded without pickles; only the arrays the meta names, float16, the shapes the trace implies,
  probabilities in [0, 1].
"""

from __future__ import annotations

import functools
import io
import math
import re
import zipfile
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

import numpy as np
from pydantic import TypeAdapter, ValidationError

from explorer.core.attention_maps import AttentionMaps
from explorer.core.errors import BadInput, one_line
from explorer.core.recording import (
    ATTENTION,
    FORMAT_VERSION,
    MAX_RECORDING_BYTES,
    META,
    TRACE,
    Recording,
    RecordingMeta,
)
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, MAX_REPEATS
from explorer.core.trace import SCHEMA_VERSION, Trace

MIB = 1 << 20
MEMBER_CAPS = {META: 64 * 1024, TRACE: 32 * MIB, ATTENTION: 64 * MIB}
MAX_PROMPT_TOKENS = 1_000_000
MAX_WHOLE = 2**63  # token ids, counts, bytes: a JSON integer past int64 is no real figure
MAX_LINE_CHARS = 2_000
NOT_A_RECORDING = "open a file written by `python -m explorer run ... --record NAME.pdx`"
PREFILL_KEY = re.compile(r"prefill_L(\d+)")
T = TypeVar("T")


def damaged(what: str) -> BadInput:
    return BadInput(f"This recording is damaged: {what}.")


def read_recording(raw: bytes) -> Recording:
    """A recording's bytes, checked, as the meta, trace and maps a page reads; BadInput with one line otherwise."""
    if len(raw) > MAX_RECORDING_BYTES:
        raise BadInput(
            f"This file is {len(raw) / 1e6:.1f} MB; a recording is at most {MAX_RECORDING_BYTES / 1e6:g} MB: "
            f"{NOT_A_RECORDING}."
        )
    members = read_members(raw)
    meta = check_meta(parse(RecordingMeta, members[META], META))
    trace = check_trace(parse(Trace, members[TRACE], TRACE))
    maps = None
    if ATTENTION in members:
        maps = read_maps(members[ATTENTION], meta, trace)
    elif meta.attention_layers:
        raise damaged(f"meta.json names attention layers but the file holds no {ATTENTION}")
    return Recording(meta, trace, maps)


def read_members(raw: bytes) -> dict[str, bytes]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise BadInput(f"This file is not a recording (not a zip archive): {NOT_A_RECORDING}.") from exc
    with archive:
        names = archive.namelist()
        unknown = sorted(set(names) - set(MEMBER_CAPS))
        if unknown or len(names) != len(set(names)):
            raise damaged(f"unexpected member {unknown[0] if unknown else 'repeated'!r} in the archive")
        for needed in (META, TRACE):
            if needed not in names:
                raise BadInput(f"This file is not a recording (no {needed}): {NOT_A_RECORDING}.")
        return {name: read_capped(archive, name) for name in names}


def read_capped(archive: zipfile.ZipFile, name: str) -> bytes:
    """A member's bytes, never more than its cap: reading stops there, whatever the zip's header says."""
    cap = MEMBER_CAPS[name]
    try:
        with archive.open(name) as member:
            data = member.read(cap + 1)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise damaged(f"{name} cannot be read ({one_line(exc)})") from exc
    if len(data) > cap:
        raise damaged(f"{name} unpacks to more than {cap / MIB:g} MiB")
    return data


@functools.cache
def adapter(kind: type[T]) -> TypeAdapter[T]:
    return TypeAdapter(kind)  # building one takes a fraction of a second: once per process


def parse(kind: type[T], raw: bytes, member: str) -> T:
    """One JSON member as the dataclass `kind`, strictly: its first wrong field is named."""
    try:
        return adapter(kind).validate_json(raw, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "the file"
        raise damaged(f"{member}: {where}: {error['msg']}") from exc


def numbers_of(value: object, path: str = "") -> list[tuple[str, object]]:
    """Every number inside a dataclass (nested dataclasses, tuples of them), with its path."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [(path, value)]
    if isinstance(value, tuple):
        return [found for i, item in enumerate(value) for found in numbers_of(item, f"{path}.{i}")]
    if is_dataclass(value):
        return [
            found
            for f in fields(value)
            for found in numbers_of(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
        ]
    return []


def check_numbers(record: object, member: str) -> None:
    """Every figure finite and not negative: times, bytes, FLOPs, counts, token ids and probabilities all are."""
    for path, value in numbers_of(record):
        bad = value < 0 or (math.isinf(value) or math.isnan(value) if isinstance(value, float) else value > MAX_WHOLE)
        if bad:
            raise damaged(f"{member}: {path}: must be a finite number ≥ 0, not {value!r}")


def check_meta(meta: RecordingMeta) -> RecordingMeta:
    if meta.format_version != FORMAT_VERSION:
        raise BadInput(f"This recording is format {meta.format_version}; this explorer reads format {FORMAT_VERSION}.")
    for f in fields(meta):
        value = getattr(meta, f.name)
        if isinstance(value, str) and len(value) > MAX_LINE_CHARS:
            raise damaged(f"{META}: {f.name}: longer than {MAX_LINE_CHARS:,} characters")
    check_numbers(meta, META)
    return meta


def check_trace(trace: Trace) -> Trace:
    """The counts a page relies on: tokens match their texts, every repeat is one prefill then decodes in order."""
    if trace.schema != SCHEMA_VERSION:
        raise BadInput(f"This recording's trace is schema {trace.schema}; this explorer reads {SCHEMA_VERSION}.")
    check_numbers(trace, TRACE)
    prompt = len(trace.prompt_token_ids)
    if not 1 <= prompt <= MAX_PROMPT_TOKENS or len(trace.prompt_tokens_text) != prompt:
        raise damaged(f"{TRACE}: prompt_token_ids and prompt_tokens_text must be 1 to {MAX_PROMPT_TOKENS:,} alike")
    if not 1 <= len(trace.repeats) <= MAX_REPEATS or trace.shown_repeat >= len(trace.repeats):
        raise damaged(f"{TRACE}: repeats must be 1 to {MAX_REPEATS} and shown_repeat one of them")
    for r, passes in enumerate(trace.repeats):
        if not 1 <= len(passes) <= MAX_NEW_TOKENS_LIMIT:
            raise damaged(f"{TRACE}: repeats.{r}: must hold 1 to {MAX_NEW_TOKENS_LIMIT:,} passes")
        for i, p in enumerate(passes):
            if p.index != i or p.phase != ("prefill" if i == 0 else "decode"):
                raise damaged(f"{TRACE}: repeats.{r}.{i}: must be pass {i}, a {'prefill' if i == 0 else 'decode'}")
    if trace.model.layers < 1 or trace.model.heads < 1:
        raise damaged(f"{TRACE}: model: must have at least one layer and one head")
    check_layers_and_experts(trace)
    return trace


def check_layers_and_experts(trace: Trace) -> None:
    """Per-layer windows one per layer (or none: an older trace); each pass's experts at most one entry per layer,
    each a set of distinct expert ids the model has."""
    m = trace.model
    if len(m.layer_windows) not in (0, m.layers):
        raise damaged(f"{TRACE}: model.layer_windows: must hold one window per layer")
    e = m.experts
    if e is not None and not (1 <= e.experts_per_token <= e.n_experts and 1 <= e.moe_layers <= m.layers):
        raise damaged(f"{TRACE}: model.experts: k must be 1 to n_experts, and MoE layers 1 to the layer count")
    n_experts, moe_layers = (0, 0) if e is None else (e.n_experts, e.moe_layers)
    for r, passes in enumerate(trace.repeats):
        for i, p in enumerate(passes):
            chosen = p.experts_chosen
            ok = len(p.experts_touched) in (0, moe_layers) and len(chosen) == len(p.experts_touched)
            ok = ok and all(
                len(ids) == n == len(set(ids)) and all(x < n_experts for x in ids)
                for ids, n in zip(chosen, p.experts_touched)
            )
            if not ok:
                raise damaged(
                    f"{TRACE}: repeats.{r}.{i}: experts must be distinct ids of this model, one set per MoE layer"
                )


def load_npz(raw: bytes) -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files}
    except Exception as exc:  # noqa: BLE001 - numpy's readers raise many kinds on a bad file: all mean "damaged"
        raise damaged(f"{ATTENTION} cannot be read ({one_line(exc)})") from exc


def read_maps(raw: bytes, meta: RecordingMeta, trace: Trace) -> AttentionMaps:
    """The maps, as many layers as the meta names, in the shapes the trace implies."""
    arrays = load_npz(raw)
    layers = tuple(sorted(int(m.group(1)) for name in arrays if (m := PREFILL_KEY.fullmatch(name))))
    if layers != tuple(sorted(meta.attention_layers)) or not layers or layers[-1] >= trace.model.layers:
        raise damaged(f"{ATTENTION}: its layers {list(layers)} are not the layers meta.json names")
    heads, prompt_len = trace.model.heads, trace.prompt_len
    decode_lens = [p.cache_len_after for p in trace.decodes]
    expected = {f"prefill_L{i}": (heads, prompt_len, prompt_len) for i in layers}
    expected |= {f"decode_L{i}": (heads, sum(decode_lens)) for i in layers}
    for name, shape in expected.items():
        check_probabilities(name, arrays.get(name), shape)
    tokens_text = arrays.get("tokens_text")
    replay_ids = arrays.get("replay_token_ids")
    if tokens_text is None or tokens_text.dtype.kind != "U" or tokens_text.shape != (prompt_len + trace.new_tokens,):
        raise damaged(f"{ATTENTION}: tokens_text must hold one text per prompt and generated token")
    if replay_ids is None or replay_ids.dtype.kind not in "iu" or replay_ids.shape != (trace.new_tokens,):
        raise damaged(f"{ATTENTION}: replay_token_ids must hold one id per pass")
    offsets = np.cumsum([0, *decode_lens])
    return AttentionMaps(
        layers=layers,
        tokens_text=tuple(str(t) for t in tokens_text),
        prompt_len=prompt_len,
        prefill={i: arrays[f"prefill_L{i}"] for i in layers},
        decode={i: tuple(arrays[f"decode_L{i}"][:, a:b] for a, b in zip(offsets[:-1], offsets[1:])) for i in layers},
        replay_token_ids=tuple(int(t) for t in replay_ids),
    )


def check_probabilities(name: str, array: Any, shape: tuple[int, ...]) -> None:
    if array is None or array.dtype != np.float16 or array.shape != shape:
        found = "missing" if array is None else f"{array.dtype} {array.shape}"
        raise damaged(f"{ATTENTION}: {name} must be float16 of shape {shape}, not {found}")
    if array.size and not (np.isfinite(array).all() and array.min() >= 0 and array.max() <= 1.001):
        raise damaged(f"{ATTENTION}: {name} must hold probabilities between 0 and 1")
