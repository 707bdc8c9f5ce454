"""A recording's trace.json bounded by what it describes before it is parsed: a 48 KB file can unpack to 32 MiB of
`0,0,0,…`, which pydantic would build into 16 million integers (3 GB once, then pages drawn from them).

A scan of the bytes (regular expressions and counts in C, nothing built per value) reads the counts the file declares
(its model's layers, its prompt's tokens, its passes) and then, before any parser sees the text:
- every flat list of numbers is bounded by the count it belongs to (`kv_layer_bytes` by the layers, the token ids by
  the prompt, the device's samples by `MAX_SAMPLES`), so a forged list is refused after one pass over its bytes;
- the whole file's values (its commas outside strings) are bounded by a small multiple (`SLACK`) of what a trace of
  those counts holds, so no shape of JSON (lists of empty lists, of empty objects) can cost more than a real one.
The exact checks (each list equal to its count, the counts agreeing) follow on the parsed trace
(`explorer.recording.checks.check_trace`); these bounds only make parsing cost what the real file would.
"""

from __future__ import annotations

import re

from explorer.core.errors import BadInput
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, MAX_REPEATS

TRACE = "trace.json"
MAX_LAYERS = 1024  # the largest published decoders have ~130; a page draws one bar per layer
MAX_PROMPT_TOKENS = 1_000_000
MAX_TOP_TOKENS = 20  # the engine keeps 5 (`explorer.core.engine.TOP_K_SHOWN`); every pass holds the same k
MAX_SAMPLES = 100  # a device figure's timed repeats (5 in practice)
MAX_BATCH_IDS = 1  # a recording is one request: batch_token_ids is () or (token_id,)
PASS_ITEMS = 40  # a pass's own scalars and its cost's, with room to spare
BASE_ITEMS = 400 + 3 * MAX_SAMPLES  # the model, the device (its samples), the sampling, the summary
SLACK = 2  # a file may hold twice what a real trace of its declared counts holds, no more
# A key opening a list. Its body is taken up to the next `]`: exactly a list of numbers' body, and for anything else an
# upper bound that pydantic refuses anyway (a string or an object where a number belongs).
LIST_START = re.compile(rb'"(\w{1,40})"\s*:\s*\[')
LAYERS = re.compile(rb'"layers"\s*:\s*(-?\d{1,30})')
STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
NON_BLANK = re.compile(rb"\S")


def damaged(what: str) -> BadInput:
    return BadInput(f"This recording is damaged: {TRACE}: {what}.")


def list_items(raw: bytes, start: int, end: int) -> int:
    """How many values the list body raw[start:end] holds, counted without building it."""
    commas = raw.count(b",", start, end)
    return commas + 1 if commas or NON_BLANK.search(raw, start, end) else 0


def list_end(raw: bytes, start: int) -> int:
    end = raw.find(b"]", start)
    return len(raw) if end < 0 else end


def declared_layers(raw: bytes) -> int:
    """The model's layer count as the file declares it (the largest, if it says it twice): 1 to MAX_LAYERS."""
    found = [int(m.group(1)) for m in LAYERS.finditer(raw)]
    if not found:
        raise damaged("model.layers: Field required")
    layers = max(found)
    if not 1 <= min(found) <= layers <= MAX_LAYERS:
        raise damaged(f"model.layers: must be 1 to {MAX_LAYERS:,}, not {layers if layers > MAX_LAYERS else min(found)}")
    return layers


def list_bounds(raw: bytes, layers: int) -> int:
    """Every flat list of numbers against the count it belongs to; returns the prompt's declared token count."""
    lists = [(m.group(1), list_items(raw, m.end(), list_end(raw, m.end()))) for m in LIST_START.finditer(raw)]
    prompt = max((n for key, n in lists if key == b"prompt_token_ids"), default=0)
    bounds = {
        b"prompt_token_ids": (MAX_PROMPT_TOKENS, "the largest prompt a recording holds"),
        b"kv_layer_bytes": (layers, "the model's layers"),
        b"input_token_ids": (prompt, "the prompt's tokens"),
        b"batch_token_ids": (MAX_BATCH_IDS, "one request's"),
        b"flops_samples": (MAX_SAMPLES, "a device figure's repeats"),
        b"bandwidth_samples": (MAX_SAMPLES, "a device figure's repeats"),
        b"read_bandwidth_samples": (MAX_SAMPLES, "a device figure's repeats"),
    }
    for key, items in lists:
        bound, what = bounds.get(key, (None, ""))
        if bound is not None and items > bound:
            raise damaged(f"{key.decode()}: a list of {items:,} values, more than {what} ({bound:,})")
    return prompt


def check_trace_size(raw: bytes) -> None:
    """Refuse trace.json's bytes, before any parser reads them, where a list or the whole passes its declared counts."""
    layers = declared_layers(raw)
    prompt = list_bounds(raw, layers)
    passes = raw.count(b'"phase"')
    prefills = raw.count(b'"prefill"')
    if passes > MAX_REPEATS * MAX_NEW_TOKENS_LIMIT:
        raise damaged(f"repeats: {passes:,} passes, more than {MAX_REPEATS} repeats of {MAX_NEW_TOKENS_LIMIT:,}")
    need = BASE_ITEMS + 2 * prompt + min(prefills, MAX_REPEATS) * prompt + passes * (PASS_ITEMS + layers)
    need += passes * 3 * MAX_TOP_TOKENS
    items = raw.count(b",") + 1  # an upper bound: commas inside strings are text, not values
    if items > SLACK * need:
        items = STRING.sub(b'""', raw).count(b",") + 1  # the exact count, strings emptied (a copy: only when needed)
    if items > SLACK * need:
        raise damaged(
            f"it holds {items:,} values, over {SLACK} x the {need:,} a trace of {passes:,} passes, {layers} layers "
            f"and {prompt:,} prompt tokens holds"
        )
