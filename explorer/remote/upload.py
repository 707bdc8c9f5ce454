"""An uploaded sweep file is data from anyone: its size, its nesting and every field are checked, with bounds tied to
the file's own settings and to this server's caps, before anything is built or derived from it. A refusal is one
line naming the first bad field, e.g. "levels[0].records[3].ttft_s: must be a finite number ≥ 0, not 'fast'".

Why each bound (the work a file can cause is what it bounds; a file the CLI writes always passes):

- bytes: the server's own upload cap (`server.maxUploadSize`, 64 MB) locally; 40 MiB hosted, just over what the
  biggest sweep a hosted server can measure writes (16 levels x 64 requests x 512 tokens: 34 MiB, ~70 bytes per token
  with full-precision times and the summaries), so parsing a file costs at most about what the largest real one does.
- nesting: a sweep file nests 7 deep; more than MAX_DEPTH is refused by a scan of the brackets before `json.loads`,
  whose recursion a file of 100,000 `[` would otherwise exhaust.
- counts: levels and requests per level as the sweep itself allows them (`explorer.remote.sweep`), hosted as a
  hosted sweep allows them (`explorer.hosting.settings`).
- tokens: a chunk carries at most the file's own `max_tokens`; a request's chunks and its total at most
  TOKEN_SLACK x `max_tokens` (a server's stop token, or a local tokenizer of another model, can count a little more
  than the server generated); the whole file at most `max_total_tokens`, since every token becomes one derived ITL.
- list lengths agree (one token count per chunk arrival), arrivals are in order, times are finite and >= 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from explorer.core.errors import BadInput, one_line
from explorer.hosting.settings import HOSTED_MAX_CONCURRENCY, HOSTED_MAX_REQUESTS, HOSTED_MAX_TOKENS
from explorer.remote import server_text
from explorer.remote.answer import FAR_BEYOND
from explorer.remote.endpoint import APIS
from explorer.remote.records import SCHEMA_VERSION, SweepResult, TokenSource
from explorer.remote.sweep import MAX_CONCURRENCY, MAX_LEVELS, MAX_REQUESTS, MAX_TOKENS_LIMIT

MIB = 1 << 20
MAX_DEPTH = 16  # a sweep file nests 7 deep (sweep > levels > level > records > record > summary > itl_s)
TOKEN_SLACK = FAR_BEYOND  # a request's chunks and its total: at most 2 x the sweep's max_tokens, as `remote` holds them
MAX_LINE_CHARS = 2_000  # one-line fields: a URL, a model name, a date, an error line
MAX_TEXT_CHARS = 1_000_000  # the prompt and a request's answer
MAX_PROMPT_TOKENS = 10_000_000  # a server's usage count: a number to add, bounded only to stay a plain number
TOKEN_SOURCES: tuple[str, ...] = get_args(TokenSource)
NOT_A_SWEEP = "load a file written by `python -m explorer remote --json FILE`"
# A JSON string (skipped whole, so brackets inside it do not count) or one bracket: the only tokens the depth scan
# needs. Unrolled so a long string is one pass of the regex engine.
STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


@dataclass(frozen=True)
class UploadLimits:
    """What an uploaded sweep file may hold on this server."""

    max_bytes: int
    max_levels: int
    max_requests: int  # per level
    max_concurrency: int
    max_total_tokens: int  # over every request of every level (each token is one ITL to derive)
    max_tokens: int = MAX_TOKENS_LIMIT  # the file's own max_tokens, which bounds each of its requests

    @classmethod
    def for_server(cls, hosted: bool) -> UploadLimits:
        return HOSTED_LIMITS if hosted else LOCAL_LIMITS


# Locally: what the CLI can record; 2M tokens is about what a 64 MB file holds at its most compact (~30 bytes a token).
LOCAL_LIMITS = UploadLimits(
    max_bytes=64 * MIB,
    max_levels=MAX_LEVELS,
    max_requests=MAX_REQUESTS,
    max_concurrency=MAX_CONCURRENCY,
    max_total_tokens=2_000_000,
)
# Hosted: what the biggest hosted sweep measures, 16 levels of 64 requests of 512 tokens.
HOSTED_LIMITS = UploadLimits(
    max_bytes=40 * MIB,
    max_levels=MAX_LEVELS,
    max_requests=HOSTED_MAX_REQUESTS,
    max_concurrency=HOSTED_MAX_CONCURRENCY,
    max_total_tokens=MAX_LEVELS * HOSTED_MAX_REQUESTS * HOSTED_MAX_TOKENS,
)


def read_sweep(raw: bytes, limits: UploadLimits) -> SweepResult:
    """An uploaded file's bytes as a sweep, or BadInput with one line: size, then nesting, then JSON, then fields."""
    data = parse_json(raw, limits.max_bytes)
    check_sweep(data, limits)
    try:
        return SweepResult.from_dict(without_server_metrics(data))  # type: ignore[arg-type] - checked: an object
    except (KeyError, TypeError, ValueError) as exc:  # check_sweep should have said it first: never a traceback
        raise BadInput(f"This sweep file is damaged ({one_line(exc)}): {NOT_A_SWEEP}.") from exc


def without_server_metrics(data: dict) -> dict:
    """The sweep without the server's /metrics deltas, which no check here reads field by field yet: an uploaded
    file's server figures are left out (the page says so), never built from unchecked data."""
    levels = [{k: v for k, v in level.items() if k != "server"} for level in data["levels"]]
    note = data.get("metrics_note")
    note = server_text.one_line(note, MAX_LINE_CHARS) if isinstance(note, str) else ""  # why there were none
    if data.get("server_total") or any(level.get("server") for level in data["levels"]):
        note = "the server's metrics in an uploaded file are not read"
    return {**{k: v for k, v in data.items() if k != "server_total"}, "levels": levels, "metrics_note": note}


def parse_json(raw: bytes, max_bytes: int) -> object:
    if len(raw) > max_bytes:
        raise BadInput(
            f"This file is {len(raw) / MIB:.1f} MiB; this server reads sweep files of at most {max_bytes / MIB:.0f} "
            "MiB: record fewer requests or levels."
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"This file is not UTF-8 text ({one_line(exc)}): {NOT_A_SWEEP}.") from exc
    check_depth(text, MAX_DEPTH)
    try:
        return json.loads(text)
    except RecursionError as exc:  # check_depth makes this unreachable; a traceback must stay so
        raise BadInput(f"This file nests too deeply to be a sweep: {NOT_A_SWEEP}.") from exc
    except ValueError as exc:  # JSONDecodeError, and integers over Python's 4,300-digit limit
        raise BadInput(f"This file is not JSON ({one_line(exc)}): {NOT_A_SWEEP}.") from exc


def check_depth(text: str, max_depth: int) -> None:
    """Refuse nesting deeper than `max_depth` by counting brackets outside strings: no recursion, one regex pass."""
    depth = 0
    for match in STRUCTURE.finditer(text):
        mark = text[match.start()]
        if mark in "[{":
            depth += 1
            if depth > max_depth:
                raise BadInput(
                    f"This file nests deeper than {max_depth} levels (a sweep file nests 7): it is not a sweep; "
                    f"{NOT_A_SWEEP}."
                )
        elif mark in "]}":
            depth -= 1


# --- the fields ------------------------------------------------------------------------------------------------------
def shown(value: object) -> str:
    """A bad value as the refusal quotes it: short, on one line (repr escapes newlines), containers by their kind."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def refuse(path: str, must: str, value: object) -> BadInput:
    return BadInput(f"This sweep file is damaged: {path}: must be {must}, not {shown(value)}.")


def is_number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type] - int or float here


def is_whole(value: object) -> bool:
    return type(value) is int  # not bool, not 5.0: the CLI writes counts as integers


class Fields:
    """One JSON object's fields, each read with its check; the first bad one raises BadInput naming its path."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, dict):
            raise refuse(path or "the file", "an object", data)
        self.data: Mapping[str, Any] = data
        self.path = path

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def present(self, key: str) -> bool:
        """Whether an optional field holds a value (absent and null both mean none)."""
        return self.data.get(key) is not None

    def value(self, key: str) -> Any:
        if key not in self.data:
            raise BadInput(f"This sweep file is damaged: {self.at(key)}: is missing; {NOT_A_SWEEP}.")
        return self.data[key]

    def whole(self, key: str, low: int, high: int) -> int:
        value = self.value(key)
        if not is_whole(value) or not low <= value <= high:
            raise refuse(self.at(key), f"a whole number from {low:,} to {high:,}", value)
        return int(value)

    def number(self, key: str, positive: bool = False) -> float:
        value = self.value(key)
        if not is_number(value) or value < 0 or (positive and value == 0):
            raise refuse(self.at(key), "a finite number > 0" if positive else "a finite number ≥ 0", value)
        return float(value)

    def text(self, key: str, max_chars: int = MAX_LINE_CHARS) -> str:
        value = self.value(key)
        if not isinstance(value, str) or len(value) > max_chars:
            raise refuse(self.at(key), f"text of at most {max_chars:,} characters", value)
        return value

    def flag(self, key: str) -> bool:
        value = self.value(key)
        if not isinstance(value, bool):
            raise refuse(self.at(key), "true or false", value)
        return value

    def choice(self, key: str, choices: Iterable[str]) -> str:
        value = self.value(key)
        choices = tuple(choices)
        if value not in choices:
            raise refuse(self.at(key), "one of " + ", ".join(repr(c) for c in choices), value)
        return value

    def items(self, key: str, low: int, high: int) -> list[Any]:
        value = self.value(key)
        if not isinstance(value, list) or not low <= len(value) <= high:
            raise refuse(self.at(key), f"a list of {low:,} to {high:,} items", value)
        return value

    def each(self, key: str, values: list[Any], ok: Callable[[Any], bool], must: str) -> None:
        """Every item of a list; a pass over all of them first, so a good list costs one generator."""
        if all(ok(v) for v in values):
            return
        index, bad = next((i, v) for i, v in enumerate(values) if not ok(v))
        raise refuse(f"{self.at(key)}[{index}]", must, bad)


def check_sweep(data: object, limits: UploadLimits) -> None:
    """Every field `SweepResult.from_dict` reads, in the order a reader meets them; derived `summary` fields are
    ignored (never read). Raises BadInput naming the first bad field."""
    sweep = Fields(data, "")
    if sweep.data.get("schema") != SCHEMA_VERSION:
        raise BadInput(f"This file is not a remote sweep of schema {SCHEMA_VERSION}: {NOT_A_SWEEP}.")
    endpoint = Fields(sweep.value("endpoint"), "endpoint")
    endpoint.text("base_url")
    endpoint.text("model")
    endpoint.choice("api", APIS)
    sweep.text("prompt", MAX_TEXT_CHARS)
    max_tokens = sweep.whole("max_tokens", 1, limits.max_tokens)
    sweep.whole("requests_per_level", 1, limits.max_requests)
    sweep.number("ttft_slo_s", positive=True)
    sweep.number("itl_slo_s", positive=True)
    sweep.text("created_at")
    for key, check in (("itl_rule", sweep.text), ("stopped", sweep.text), ("interrupted", sweep.flag)):
        if sweep.present(key):
            check(key)
    total = 0
    for i, level_data in enumerate(sweep.items("levels", 1, limits.max_levels)):
        total += check_level(Fields(level_data, f"levels[{i}]"), max_tokens, limits)
        if total > limits.max_total_tokens:
            raise BadInput(
                f"This sweep file is too big for this server: levels[{i}] brings its tokens to {total:,}, over the "
                f"{limits.max_total_tokens:,} it reads (each token is one ITL to derive): record a smaller sweep."
            )
    if sweep.data.get("warmup"):  # as from_dict reads it: any empty value means none
        check_record(Fields(sweep.data["warmup"], "warmup"), max_tokens, limits)


def check_level(level: Fields, max_tokens: int, limits: UploadLimits) -> int:
    """One level's fields; returns the tokens its requests hold."""
    level.whole("concurrency", 1, limits.max_concurrency)
    level.number("wall_s")
    records = level.items("records", 1, limits.max_requests)
    return sum(check_record(Fields(r, level.at(f"records[{i}]")), max_tokens, limits) for i, r in enumerate(records))


def check_record(record: Fields, max_tokens: int, limits: UploadLimits) -> int:
    """One request's fields, its chunks bounded by the sweep's max_tokens; returns the tokens its chunks hold."""
    record.whole("index", -1, limits.max_requests)
    record.number("start_s")
    for key in ("ttft_s", "e2e_s"):
        if record.present(key):
            record.number(key)
    most = TOKEN_SLACK * max_tokens
    check_chunks(record, max_tokens, most)
    record.whole("output_tokens", 0, most)
    record.choice("output_tokens_from", TOKEN_SOURCES)
    record.choice("chunk_tokens_from", TOKEN_SOURCES)
    if record.present("prompt_tokens"):
        record.whole("prompt_tokens", 0, MAX_PROMPT_TOKENS)
    for key in ("finish_reason", "error"):
        if record.present(key):
            record.text(key)
    record.text("text", MAX_TEXT_CHARS)
    return sum(record.data["chunk_tokens"])


def check_chunks(record: Fields, max_tokens: int, most: int) -> None:
    """Arrival times in order, one token count per arrival, each at most max_tokens and `most` in all."""
    arrivals = record.items("chunk_arrivals_s", 0, most)
    record.each("chunk_arrivals_s", arrivals, lambda v: is_number(v) and v >= 0, "a finite number ≥ 0")
    if any(later < earlier for earlier, later in zip(arrivals, arrivals[1:])):
        index = next(i for i in range(1, len(arrivals)) if arrivals[i] < arrivals[i - 1])
        raise refuse(record.at(f"chunk_arrivals_s[{index}]"), "no earlier than the chunk before it", arrivals[index])
    tokens = record.items("chunk_tokens", 0, most)
    if len(tokens) != len(arrivals):
        raise refuse(record.at("chunk_tokens"), f"a list of one count per chunk arrival ({len(arrivals)})", tokens)
    whole_tokens = f"a whole number from 0 to {max_tokens:,} (the sweep's max_tokens)"
    record.each("chunk_tokens", tokens, lambda v: is_whole(v) and 0 <= v <= max_tokens, whole_tokens)
    if sum(tokens) > most:
        raise refuse(record.at("chunk_tokens"), f"at most {most:,} tokens in all ({TOKEN_SLACK} x max_tokens)", tokens)
