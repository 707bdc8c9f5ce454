"""Opening a recording: an uploaded `.pdx` is data from anyone, so every member is checked before a page reads it.
A refusal is one line naming what is wrong, e.g. "This recording is damaged: trace.json: repeats.0.3.wall_s: Input
should be a valid number."

What is bounded, and why:
- the file: `MAX_RECORDING_BYTES`, what the writer keeps every recording under;
- the zip: only the three known members, each read to at most its own cap whatever its header claims (a zip bomb
  stops at the cap), so a 5 MB file never becomes more than `MEMBER_CAPS` in memory;
- `trace.json`'s bytes, before any parser reads them: every list against the count it belongs to, and the whole
  against what a trace of its declared counts holds (`explorer.recording.bounds`);
- `meta.json` and `trace.json`: their shape, field by field, by pydantic against the dataclasses the app itself
  reads (strict: "5" is not 5; nesting past pydantic's parser limit is refused, never a RecursionError); then every
  number finite and not negative (NaN slips past every comparison a page makes), the figures a page divides by
  positive, the device a kind the pages know, and the counts consistent (the model's shapes within bounds, tokens,
  repeats, passes in order, each pass's tokens and cache lengths, each list exactly its count);
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
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, MAX_REPEATS
from explorer.core.trace import SCHEMA_VERSION, PassRecord, Trace
from explorer.recording.bounds import MAX_LAYERS, MAX_PROMPT_TOKENS, MAX_TOP_TOKENS, check_trace_size
from explorer.recording.pdx import (
    ATTENTION,
    FORMAT_VERSION,
    MAX_COMMAND_CHARS,
    MAX_RECORDING_BYTES,
    META,
    TRACE,
    Recording,
    RecordingMeta,
)

MIB = 1 << 20
MEMBER_CAPS = {META: 64 * 1024, TRACE: 32 * MIB, ATTENTION: 64 * MIB}
READ_CHUNK = MIB
SMALL_MEMBER = MIB  # members this small are handed on as bytes; larger ones stay the buffer they were read into
DEVICE_KINDS = ("cpu", "cuda")  # what the pages have words and figures for
STOP_REASONS = ("eos", "max_new_tokens")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The model's shapes: at least 1 (a page divides by each), at most past any published decoder's.
MODEL_BOUNDS = {
    "heads": 1024,
    "kv_heads": 1024,
    "head_dim": 4096,
    "hidden_size": 1 << 17,
    "vocab_size": 1 << 24,
    "max_context": 1 << 24,
}
MAX_FIGURE = 1e21  # FLOP/s or bytes/s: a zettaFLOP/s is past any device; a page divides and multiplies by these
MAX_TEXT_CHARS = 4_000_000  # the prompt and the generated text
MAX_TOKEN_CHARS = 1_000  # one token's text
MAX_WHOLE = 2**63  # token ids, counts, bytes: a JSON integer past int64 is no real figure
MAX_LINE_CHARS = MAX_COMMAND_CHARS  # every one-line field of meta.json
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
    check_trace_size(members[TRACE])  # the counts it declares bound its lists before pydantic builds any of them
    trace = check_trace(parse(Trace, members[TRACE], TRACE)).recosted()  # modelled afresh: today's conventions
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
    """A member's bytes, never more than its cap: reading stops there, whatever the zip's header says. Read in chunks
    into one buffer, so a member at its cap costs its size once in memory, not twice (chunks, then their join)."""
    cap = MEMBER_CAPS[name]
    data = bytearray()
    try:
        with archive.open(name) as member:
            while len(data) <= cap and (chunk := member.read(min(READ_CHUNK, cap + 1 - len(data)))):
                data += chunk
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise damaged(f"{name} cannot be read ({one_line(exc)})") from exc
    if len(data) > cap:
        raise damaged(f"{name} unpacks to more than {cap / MIB:g} MiB")
    return bytes(data) if len(data) < SMALL_MEMBER else data  # type: ignore[return-value] - bytes-like, never copied


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
    if meta.device_kind not in DEVICE_KINDS:
        raise damaged(f"{META}: device_kind: must be one of {', '.join(DEVICE_KINDS)}, not {meta.device_kind[:40]!r}")
    if len(meta.attention_layers) > MAX_LAYERS:
        raise damaged(f"{META}: attention_layers: more than {MAX_LAYERS:,} layers")
    return meta


def check_trace(trace: Trace) -> Trace:
    """The counts a page relies on, declared counts first: the model's shapes, the device's figures, the prompt and the
    repeats; then every pass against them (its tokens, its cache lengths, each of its lists exactly its count)."""
    if trace.schema != SCHEMA_VERSION:
        raise BadInput(f"This recording's trace is schema {trace.schema}; this explorer reads {SCHEMA_VERSION}.")
    check_numbers(trace, TRACE)
    check_model(trace)
    check_device(trace)
    prompt = len(trace.prompt_token_ids)
    if not 1 <= prompt <= MAX_PROMPT_TOKENS or len(trace.prompt_tokens_text) != prompt:
        raise damaged(f"{TRACE}: prompt_token_ids and prompt_tokens_text must be 1 to {MAX_PROMPT_TOKENS:,} alike")
    texts = {"prompt_text": trace.prompt_text, "generated_text": trace.generated_text}
    for name, text in texts.items():
        if len(text) > MAX_TEXT_CHARS:
            raise damaged(f"{TRACE}: {name}: longer than {MAX_TEXT_CHARS:,} characters")
    if any(len(text) > MAX_TOKEN_CHARS for text in trace.prompt_tokens_text):
        raise damaged(f"{TRACE}: prompt_tokens_text: a token longer than {MAX_TOKEN_CHARS:,} characters")
    if not 1 <= len(trace.repeats) <= MAX_REPEATS or trace.shown_repeat >= len(trace.repeats):
        raise damaged(f"{TRACE}: repeats must be 1 to {MAX_REPEATS} and shown_repeat one of them")
    if trace.stop_reason not in STOP_REASONS:
        raise damaged(f"{TRACE}: stop_reason: must be one of {', '.join(STOP_REASONS)}, not {trace.stop_reason[:40]!r}")
    if not 1 <= trace.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
        raise damaged(f"{TRACE}: max_new_tokens: must be 1 to {MAX_NEW_TOKENS_LIMIT:,}, not {trace.max_new_tokens}")
    top_k = len(trace.repeats[0][0].top_tokens) if trace.repeats[0] else 0  # the first pass states k
    for r, passes in enumerate(trace.repeats):
        if not 1 <= len(passes) <= trace.max_new_tokens:
            raise damaged(f"{TRACE}: repeats.{r}: must hold 1 to max_new_tokens ({trace.max_new_tokens:,}) passes")
        for i, p in enumerate(passes):
            check_pass(trace, p, f"repeats.{r}.{i}", passes[i - 1] if i else None, top_k)
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


def check_model(trace: Trace) -> None:
    """The model's shapes: the pages divide by them and draw one bar per layer, so each is 1 to a bound."""
    model = trace.model
    bounds = {"layers": MAX_LAYERS, **MODEL_BOUNDS}
    for name, bound in bounds.items():
        value = getattr(model, name)
        if not 1 <= value <= bound:
            raise damaged(f"{TRACE}: model.{name}: must be 1 to {bound:,}, not {value:,}")
    cache_shape = {  # 0 where the cache holds per-head K and V (every model but MLA, and older traces)
        "kv_cache_key_width": MODEL_BOUNDS["kv_heads"] * MODEL_BOUNDS["head_dim"],
        "kv_cache_value_width": MODEL_BOUNDS["kv_heads"] * MODEL_BOUNDS["head_dim"],
        "v_head_dim": MODEL_BOUNDS["head_dim"],
        "kv_expand_params": MAX_WHOLE,
    }
    for name, bound in cache_shape.items():
        if not 0 <= getattr(model, name) <= bound:
            raise damaged(f"{TRACE}: model.{name}: must be 0 to {bound:,}, not {getattr(model, name):,}")
    if (model.kv_cache_key_width == 0) != (model.kv_cache_value_width == 0):
        raise damaged(f"{TRACE}: model.kv_cache_key_width and kv_cache_value_width: both 0 or both set")
    for name in ("params", "weight_bytes", "matmul_params"):  # the KV cache page and the quiz divide by these
        if getattr(model, name) < 1:
            raise damaged(f"{TRACE}: model.{name}: must be at least 1, not {getattr(model, name)}")
    if model.heads % model.kv_heads:
        raise damaged(f"{TRACE}: model.kv_heads: {model.kv_heads} does not divide the {model.heads} query heads")
    if DTYPE_BYTES.get(model.dtype) != model.bytes_per_element:
        raise damaged(f"{TRACE}: model.dtype: {model.dtype[:20]!r} with {model.bytes_per_element} bytes per element")


def check_device(trace: Trace) -> None:
    """The figures the roofline divides by: positive and finite, on a kind of device the pages know."""
    device = trace.device
    if device.kind not in DEVICE_KINDS:
        raise damaged(f"{TRACE}: device.kind: must be one of {', '.join(DEVICE_KINDS)}, not {device.kind[:40]!r}")
    figures = {
        "peak_flops": device.peak_flops,
        "bandwidth_bytes_per_s": device.bandwidth_bytes_per_s,
        "read_bandwidth_bytes_per_s": device.read_bandwidth_bytes_per_s,
    }
    for name, value in figures.items():
        if value is not None and not 1 <= value <= MAX_FIGURE:
            raise damaged(f"{TRACE}: device.{name}: must be 1 to {MAX_FIGURE:g}, not {value!r}")


def check_pass(trace: Trace, p: PassRecord, where: str, before: PassRecord | None, top_k: int) -> None:
    """One pass against the counts: a prefill computes the prompt into an empty cache, a decode one token onto the
    previous pass's cache; its lists are exactly as long as the layers, its tokens and the first pass's top tokens."""
    i = 0 if before is None else before.index + 1
    if p.index != i or p.phase != ("prefill" if i == 0 else "decode"):
        raise damaged(f"{TRACE}: {where}: must be pass {i}, a {'prefill' if i == 0 else 'decode'}")
    tokens_in = trace.prompt_len if before is None else 1
    cache_before = 0 if before is None else before.cache_len_after
    expected = {
        "tokens_in": (p.tokens_in, tokens_in),
        "cache_len_before": (p.cache_len_before, cache_before),
        "cache_len_after": (p.cache_len_after, cache_before + tokens_in),
        "input_token_ids": (len(p.input_token_ids), tokens_in),
        "kv_layer_bytes": (len(p.kv_layer_bytes), trace.model.layers),
        "top_tokens": (len(p.top_tokens), top_k),
    }
    for name, (found, wanted) in expected.items():
        if found != wanted:
            raise damaged(f"{TRACE}: {where}.{name}: {found:,} where the counts say {wanted:,}")
    positive = {
        "wall_s": p.wall_s,
        "token_s": p.token_s,
        "cost.flops": p.cost.flops,
        "cost.weight_bytes_read": p.cost.weight_bytes_read,
        "cost.t_weight_read_s": p.cost.t_weight_read_s,
        "cost.t_compute_s": p.cost.t_compute_s,
    }
    for name, value in positive.items():  # a real pass takes time and does work; the pages divide by each
        if not value > 0:
            raise damaged(f"{TRACE}: {where}.{name}: must be more than 0, not {value!r}")
    if not top_k <= MAX_TOP_TOKENS or len(p.batch_token_ids) > 1:
        raise damaged(f"{TRACE}: {where}: at most {MAX_TOP_TOKENS} top_tokens and 1 batch_token_ids")
    if p.cache_len_after > trace.model.max_context:
        raise damaged(f"{TRACE}: {where}.cache_len_after: past the model's context ({trace.model.max_context:,})")
    longest = max([len(p.token_text), *(len(t.text) for t in p.top_tokens)])
    if longest > MAX_TOKEN_CHARS or any(t.prob > 1 for t in p.top_tokens):
        raise damaged(f"{TRACE}: {where}: token texts of at most {MAX_TOKEN_CHARS:,} characters, probabilities ≤ 1")


def load_npz(raw: bytes, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The arrays named in `shapes`, each read only once its header says that shape: a small compressed member
    cannot unpack to more than the maps the trace implies."""
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as npz:
            for info in npz.infolist():
                name = info.filename.removesuffix(".npy")
                with npz.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else None
                    shape, _, dtype = (read_header or np.lib.format.read_array_header_2_0)(member)
                if name not in shapes:
                    raise damaged(f"{ATTENTION}: {name[:40]!r} is not one of the arrays meta.json and the trace imply")
                if dtype.hasobject:
                    raise damaged(f"{ATTENTION} cannot be read ({name} holds Python objects: pickles are refused)")
                if shape != shapes[name] or dtype.itemsize > 4 * MAX_TOKEN_CHARS:
                    kind = "float16 " if PREFILL_KEY.fullmatch(name) or name.startswith("decode_L") else ""
                    raise damaged(f"{ATTENTION}: {name} must be {kind}of shape {shapes[name]}, not {dtype} {shape}")
                with npz.open(info) as member:
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's readers raise many kinds on a bad file: all mean "damaged"
        raise damaged(f"{ATTENTION} cannot be read ({one_line(exc)})") from exc
    return arrays


def read_maps(raw: bytes, meta: RecordingMeta, trace: Trace) -> AttentionMaps:
    """The maps, as many layers as the meta names, in the shapes the trace implies."""
    layers = tuple(sorted(set(meta.attention_layers)))
    if not layers or layers[-1] >= trace.model.layers or len(layers) != len(meta.attention_layers):
        raise damaged(f"{META}: attention_layers must be layers of the model, each once")
    heads, prompt_len = trace.model.heads, trace.prompt_len
    decode_lens = [p.cache_len_after for p in trace.decodes]
    expected = {f"prefill_L{i}": (heads, prompt_len, prompt_len) for i in layers}
    expected |= {f"decode_L{i}": (heads, sum(decode_lens)) for i in layers}
    texts = {"tokens_text": (prompt_len + trace.new_tokens,), "replay_token_ids": (trace.new_tokens,)}
    arrays = load_npz(raw, expected | texts)
    found = tuple(sorted(int(m.group(1)) for name in arrays if (m := PREFILL_KEY.fullmatch(name))))
    if found != layers:
        raise damaged(f"{ATTENTION}: its layers {list(found)} are not the layers meta.json names")
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
