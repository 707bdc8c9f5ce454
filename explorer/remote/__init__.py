"""A real serving engine measured over its OpenAI-compatible streaming API: per request TTFT, per-token ITL, E2E
and tokens/s; over a concurrency sweep, TTFT and ITL percentiles, total tokens/s and goodput against two SLOs.

How the figures are defined (the same words as vLLM's `bench serve`, SGLang's `bench_serving` and NVIDIA AIPerf):

- TTFT: from just before the connection is opened (so it counts connecting, queueing on the server, prefill and
  the network) to the arrival of the first streamed chunk that carries output text. Chunks without text (the chat
  API's opening `role` chunk, a trailing usage chunk) are not tokens, as in AIPerf.
- ITL, per token: a chunk can carry several tokens (speculative decoding, servers that batch their stream). A chunk
  that brings n >= 1 new tokens g seconds after the previous token-bearing chunk contributes n inter-token latencies
  of g / n each (SGLang `bench_serving`'s rule, and vLLM's pull request #42661; vLLM's released `bench serve` records
  one gap per chunk, which is the same thing whenever a chunk holds one token). Extra tokens in the first chunk
  arrive with the first token and add no gap; a chunk counted as 0 tokens adds no gap and its wait rolls into the
  next. So a request's mean ITL equals AIPerf's per-request ITL and vLLM's TPOT, (E2E - TTFT) / (tokens - 1),
  whenever the first chunk carries one token.
- E2E: to the last token-bearing chunk. Output tokens/s of a request: output tokens / E2E.
- Tokens are counted from the server's `usage` (asked for with `stream_options: {"include_usage": true}`) when it
  sends one; otherwise with a local tokenizer when one is given; otherwise one token per text chunk. Each record says
  which source counted its total and which its chunks.
- Per concurrency level, TTFT and ITL percentiles (linear interpolation, numpy's default, over every request's TTFT
  and every token's ITL), total output tokens/s (every output token of the level / the level's wall time, vLLM's
  "output token throughput") and goodput: requests with TTFT < the TTFT SLO and p99 of their ITLs < the ITL SLO
  (the Latency page's strict check, applied per request).

Requests go over the standard library's `http.client`, one connection per request, from a thread pool that keeps at
most `concurrency` requests in flight. Every count and wait is bounded: requests per level, levels, a connect
timeout, a read timeout, and a time limit for the whole sweep after which no request starts and running ones stop.
"""

from __future__ import annotations

import argparse
import bisect
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from explorer.core.errors import BadInput, ExplorerError, RunFailed, one_line
from explorer.core.trace import ItlPercentiles, JsonRecord, percentile
from explorer.core.units import ms_value
from explorer.hosting.settings import EndpointPolicy, api_key_from_env
from explorer.remote.endpoint import API_PATHS, APIS, Endpoint, ParsedUrl, parse_base_url
from explorer.remote.endpoint import make_endpoint as make_endpoint  # until the remote package is split

TokenSource = Literal["usage", "tokenizer", "chunks"]
SCHEMA_VERSION = 1

# The Latency page's defaults (explorer.charts.latency.DEFAULT_*), repeated so the CLI need not import altair; a test
# keeps them equal.
DEFAULT_TTFT_SLO_S = 1.0
DEFAULT_ITL_SLO_S = 0.050
DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."
DEFAULT_MAX_TOKENS = 32
DEFAULT_LEVELS = (1, 4)
DEFAULT_REQUESTS = 8
CONNECT_TIMEOUT_S = 3.0  # a refused or unreachable host fails in seconds, whatever the read timeout
DEFAULT_TIMEOUT_S = 60.0  # the longest silence accepted from a server: before its answer or between two chunks
DEFAULT_TIME_LIMIT_S = 600.0  # the whole sweep
WARMUP_MAX_TOKENS = 4
MAX_REQUESTS = 1000
MAX_CONCURRENCY = 256
MAX_LEVELS = 16
MAX_TOKENS_LIMIT = 4096
PERCENTILES = (50, 90, 99)
ERROR_BODY_CHARS = 200

ITL_RULE = (
    "ITL is per token: a chunk bringing n tokens g ms after the previous token-bearing chunk counts as n gaps of "
    "g/n ms (SGLang bench_serving's rule; vLLM bench serve's one gap per chunk when n = 1). TTFT runs from opening "
    "the connection to the first chunk with text, so it holds connecting, queueing, prefill and the network."
)

Progress = Callable[[float, str], None]  # (fraction done 0..1, what is happening)
ChunkCounter = Callable[[Sequence[str]], list[int]]  # texts of a request's chunks -> tokens in each


# --- one request's measurements ----------------------------------------------------------------------------------
def per_token_itls(arrivals_s: Sequence[float], tokens: Sequence[int]) -> tuple[float, ...]:
    """The ITL rule (module docstring): chunk k with n_k tokens, g after the last token-bearing chunk, gives n_k
    gaps of g / n_k; the first token-bearing chunk gives none; a chunk of 0 tokens gives none and keeps the clock."""
    gaps: list[float] = []
    previous_s: float | None = None
    for arrival_s, n in zip(arrivals_s, tokens):
        if n <= 0:
            continue
        if previous_s is not None:
            gaps.extend([(arrival_s - previous_s) / n] * n)
        previous_s = arrival_s
    return tuple(gaps)


@dataclass(frozen=True)
class RequestRecord(ItlPercentiles):
    """One streamed request: when each token-bearing chunk arrived and how many tokens it held, or why it failed."""

    index: int  # submission order within its level (-1: the warm-up request)
    start_s: float  # when it was sent, seconds since its level started
    ttft_s: float | None  # None when it failed before any text
    e2e_s: float | None
    chunk_arrivals_s: tuple[float, ...]  # every chunk with output text, seconds since the request was sent
    chunk_tokens: tuple[int, ...]  # tokens in each of those chunks
    output_tokens: int
    output_tokens_from: TokenSource  # what counted output_tokens
    chunk_tokens_from: TokenSource  # what counted chunk_tokens
    prompt_tokens: int | None  # from the server's usage, when sent
    finish_reason: str | None
    text: str
    error: str = ""  # one line; empty when the request succeeded

    @property
    def ok(self) -> bool:
        return not self.error and self.ttft_s is not None

    @property
    def itl_s(self) -> tuple[float, ...]:
        return per_token_itls(self.chunk_arrivals_s, self.chunk_tokens)

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (tokens - 1): AIPerf's per-request ITL, vLLM's TPOT."""
        if not self.ok or self.output_tokens < 2 or self.e2e_s is None or self.ttft_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.e2e_s if self.ok and self.e2e_s else None

    def meets_slos(self, ttft_slo_s: float, itl_slo_s: float) -> bool:
        """Strictly under both: TTFT, and the p99 of this request's ITLs (a one-token request has no ITL to miss)."""
        if not self.ok or self.ttft_s is None or not self.ttft_s < ttft_slo_s:
            return False
        itl_p99_s = self.itl_p99_s
        return itl_p99_s is None or itl_p99_s < itl_slo_s

    @property
    def chunk_tokens_total(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def unstreamed_tokens_allowed(self) -> int:
        """A request that stopped on its end-of-sequence token has that token in the server's usage but no text in
        any chunk (seen on transformers serve; vLLM counts it the same way): one token the chunks cannot show."""
        return 1 if self.finish_reason == "stop" else 0

    @property
    def tokens_disagree(self) -> bool:
        """The chunks' token counts do not add up to the server's own total (beyond an unstreamed stop token): the
        ITLs are spread over the wrong number of tokens (one token per chunk assumed, or another tokenizer)."""
        unexplained = self.output_tokens - self.chunk_tokens_total
        return self.ok and self.output_tokens_from == "usage" and unexplained not in (0, self.unstreamed_tokens_allowed)

    def summary(self) -> dict[str, Any]:
        return {
            "itl_s": list(self.itl_s),
            "tpot_s": self.tpot_s,
            "tokens_per_s": self.tokens_per_s,
            "chunk_tokens_total": self.chunk_tokens_total,
            "tokens_disagree": self.tokens_disagree,
        }


@dataclass(frozen=True)
class LevelResult:
    """Every request sent with at most `concurrency` in flight."""

    concurrency: int
    wall_s: float  # from the first send to the last answer of this level
    records: tuple[RequestRecord, ...]

    @property
    def succeeded(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if r.ok)

    @property
    def failed(self) -> int:
        return len(self.records) - len(self.succeeded)

    @property
    def ttfts_s(self) -> tuple[float, ...]:
        return tuple(r.ttft_s for r in self.succeeded if r.ttft_s is not None)

    @property
    def itls_s(self) -> tuple[float, ...]:
        return tuple(gap for r in self.succeeded for gap in r.itl_s)

    def ttft_percentile_s(self, q: float) -> float | None:
        return percentile(self.ttfts_s, q)

    def itl_percentile_s(self, q: float) -> float | None:
        return percentile(self.itls_s, q)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.succeeded)

    @property
    def total_output_tokens_per_s(self) -> float | None:
        return self.output_tokens / self.wall_s if self.wall_s > 0 and self.succeeded else None

    @property
    def total_tokens_per_s(self) -> float | None:
        """Prompt and output tokens per second (vLLM's "total token throughput"); None without prompt counts."""
        if not self.succeeded or self.wall_s <= 0 or any(r.prompt_tokens is None for r in self.succeeded):
            return None
        return sum((r.prompt_tokens or 0) + r.output_tokens for r in self.succeeded) / self.wall_s

    @property
    def requests_per_s(self) -> float | None:
        return len(self.succeeded) / self.wall_s if self.wall_s > 0 else None

    def goodput(self, ttft_slo_s: float, itl_slo_s: float) -> int:
        return sum(r.meets_slos(ttft_slo_s, itl_slo_s) for r in self.records)

    def summary(self, ttft_slo_s: float, itl_slo_s: float) -> dict[str, Any]:
        good = self.goodput(ttft_slo_s, itl_slo_s)
        return {
            "concurrency": self.concurrency,
            "requests": len(self.records),
            "succeeded": len(self.succeeded),
            "failed": self.failed,
            **{f"ttft_p{q}_s": self.ttft_percentile_s(q) for q in PERCENTILES},
            **{f"itl_p{q}_s": self.itl_percentile_s(q) for q in PERCENTILES},
            "output_tokens": self.output_tokens,
            "total_output_tokens_per_s": self.total_output_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "goodput_requests": good,
            "goodput_fraction": good / len(self.records) if self.records else None,
            "goodput_requests_per_s": good / self.wall_s if self.wall_s > 0 else None,
        }


@dataclass(frozen=True)
class SweepResult(JsonRecord):
    """A concurrency sweep against one endpoint, as the CLI writes it and the Endpoint page reads it."""

    endpoint: Endpoint
    prompt: str
    max_tokens: int
    requests_per_level: int
    ttft_slo_s: float  # the SLOs given when measuring; the page can re-read the records against others
    itl_slo_s: float
    levels: tuple[LevelResult, ...]
    warmup: RequestRecord | None  # sent first, left out of every statistic
    created_at: str
    itl_rule: str = ITL_RULE
    schema: int = SCHEMA_VERSION

    @property
    def token_sources(self) -> str:
        """'usage (totals), chunks (per chunk)' over every successful request, for a caption."""
        records = [r for level in self.levels for r in level.succeeded]
        totals = sorted({r.output_tokens_from for r in records})
        chunks = sorted({r.chunk_tokens_from for r in records})
        return f"{'/'.join(totals) or 'n/a'} (totals), {'/'.join(chunks) or 'n/a'} (per chunk)"

    def level(self, concurrency: int) -> LevelResult:
        return next(level for level in self.levels if level.concurrency == concurrency)

    @property
    def disagreeing_records(self) -> tuple[RequestRecord, ...]:
        """Requests whose per-chunk token counts do not sum to the server's usage total."""
        return tuple(r for level in self.levels for r in level.records if r.tokens_disagree)

    @property
    def tokens_note(self) -> str:
        """One line when some per-chunk counts disagree with the server's totals; empty when none do."""
        bad = self.disagreeing_records
        if not bad:
            return ""
        first = bad[0]
        return (
            f"{len(bad)} of {sum(len(level.records) for level in self.levels)} requests: the tokens counted per chunk "
            f"(by {first.chunk_tokens_from}) sum to {first.chunk_tokens_total}, but the server's usage says "
            f"{first.output_tokens} (request {first.index}): their ITLs are spread over the wrong number of tokens. "
            "Count chunks with a tokenizer (on the Endpoint page its 'Count chunk tokens with the embedded tokenizer' "
            "switch, on the command line --tokenizer FOLDER) or use a server that reports usage per chunk."
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for level, level_data in zip(self.levels, data["levels"]):
            # Derived, written for readers of the file (percentiles, tokens/s, goodput); ignored on load.
            level_data["summary"] = level.summary(self.ttft_slo_s, self.itl_slo_s)
            for record, record_data in zip(level.records, level_data["records"]):
                record_data["summary"] = record.summary()
        data["tokens_disagree_requests"] = len(self.disagreeing_records)
        data["tokens_note"] = self.tokens_note
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        if data.get("schema") != SCHEMA_VERSION:
            raise BadInput(
                f"This file is not a remote sweep of schema {SCHEMA_VERSION}: write one with "
                "`python -m explorer remote --json FILE`."
            )
        try:
            return cls(
                endpoint=Endpoint(**data["endpoint"]),
                prompt=data["prompt"],
                max_tokens=int(data["max_tokens"]),
                requests_per_level=int(data["requests_per_level"]),
                ttft_slo_s=float(data["ttft_slo_s"]),
                itl_slo_s=float(data["itl_slo_s"]),
                levels=tuple(
                    LevelResult(
                        concurrency=int(level["concurrency"]),
                        wall_s=float(level["wall_s"]),
                        records=tuple(_record_from_dict(r) for r in level["records"]),
                    )
                    for level in data["levels"]
                ),
                warmup=_record_from_dict(data["warmup"]) if data.get("warmup") else None,
                created_at=str(data["created_at"]),
                itl_rule=str(data.get("itl_rule", ITL_RULE)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"This remote sweep file is incomplete or damaged ({one_line(exc)}).") from exc

    @classmethod
    def from_json(cls, text: str) -> SweepResult:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"This file is not JSON ({one_line(exc)}): load a file written by --json.") from exc
        if not isinstance(data, dict):
            raise BadInput("This file is not a remote sweep: load a file written by `python -m explorer remote`.")
        return cls.from_dict(data)


def _record_from_dict(data: Mapping[str, Any]) -> RequestRecord:
    names = {f for f in RequestRecord.__dataclass_fields__}
    values = {k: v for k, v in data.items() if k in names}
    values["chunk_arrivals_s"] = tuple(float(x) for x in values["chunk_arrivals_s"])
    values["chunk_tokens"] = tuple(int(x) for x in values["chunk_tokens"])
    return RequestRecord(**values)


# --- the wire: one streamed request ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    """What came back from one streamed request, before any token counting."""

    arrivals_s: tuple[float, ...]  # each chunk with output text, seconds since the request was sent
    texts: tuple[str, ...]
    chunk_usage: tuple[int | None, ...]  # completion_tokens carried by that chunk itself (vLLM's continuous usage)
    completion_tokens: int | None  # the last usage seen
    prompt_tokens: int | None
    finish_reason: str | None


@dataclass(frozen=True)
class StreamRequest:
    endpoint: Endpoint
    prompt: str
    max_tokens: int
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    temperature: float = 0.0  # greedy: the same prompt asks for the same work at every level

    def body(self) -> bytes:
        payload: dict[str, Any] = {
            "model": self.endpoint.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},  # the final chunk then carries the token counts
        }
        if self.endpoint.api == "chat":
            payload["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            payload["prompt"] = self.prompt
        return json.dumps(payload).encode()

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


class Deadline:
    """The sweep's time limit, shared by every thread: no request starts after it, and running ones stop at it."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.at = time.monotonic() + limit_s

    def passed(self) -> bool:
        return time.monotonic() > self.at


def _connect_failure(exc: OSError, url: ParsedUrl) -> str:
    """What a failed connect means for the user, most specific first (each of these is an OSError)."""
    where = f"{url.host}:{url.port}"
    if isinstance(exc, ConnectionRefusedError):
        return f"Nothing is listening at {where} (connection refused): start the server or fix the URL."
    if isinstance(exc, socket.gaierror):
        return f"Cannot resolve host '{url.host}': check the base URL."
    if isinstance(exc, TimeoutError):
        return f"No connection to {where} within {CONNECT_TIMEOUT_S:g} s: the host is unreachable or drops packets."
    if isinstance(exc, ssl.SSLError):
        return f"TLS with {where} failed ({one_line(exc)}): check http vs https in the base URL."
    return f"Cannot connect to {where}: {one_line(exc)}."


def _connect(url: ParsedUrl, timeout_s: float) -> http.client.HTTPConnection:
    """Open the connection with a short timeout of its own, then wait up to `timeout_s` for each read."""
    if url.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            url.host, url.port, timeout=CONNECT_TIMEOUT_S, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(url.host, url.port, timeout=CONNECT_TIMEOUT_S)
    try:
        conn.connect()
    except OSError as exc:
        raise BadInput(_connect_failure(exc, url)) from exc
    assert conn.sock is not None
    conn.sock.settimeout(timeout_s)
    return conn


def _error_message(body: bytes) -> str:
    """The server's own words from an error body: OpenAI's error.message, FastAPI's detail, or the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        for candidate in (
            error.get("message") if isinstance(error, dict) else error,
            data.get("detail"),
            data.get("message"),
        ):
            if candidate:
                text = candidate if isinstance(candidate, str) else json.dumps(candidate)
                break
    line = " ".join(text.split())
    return line[:ERROR_BODY_CHARS] + ("…" if len(line) > ERROR_BODY_CHARS else "") or "(no message)"


def _status_error(request: StreamRequest, status: int, reason: str, body: bytes) -> ExplorerError:
    message = _error_message(body)
    endpoint = request.endpoint
    if status in (401, 403):
        return BadInput(f"{endpoint.url} refused the API key (HTTP {status}): {message}")
    if "model" in message.lower() and status in (400, 404, 422):
        return BadInput(f"The server does not serve model '{endpoint.model}' (HTTP {status}): {message}")
    if status in (404, 405):
        return BadInput(
            f"{endpoint.url} is not an OpenAI-compatible {endpoint.api} API (HTTP {status} {reason}): the base URL "
            "usually ends in /v1."
        )
    if 400 <= status < 500:
        return BadInput(f"{endpoint.url} rejected the request (HTTP {status}): {message}")
    return RunFailed(f"{endpoint.url} failed (HTTP {status} {reason}): {message}")


def _chunk_content(data: Mapping[str, Any], api: str) -> tuple[str, str | None]:
    """(output text, finish reason) of one parsed chunk; the chat API's reasoning text counts as output too."""
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return "", None
    choice = choices[0]
    if api == "chat":
        delta = choice.get("delta") or {}
        text = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
    else:
        text = choice.get("text") or ""
    return text, choice.get("finish_reason")


def stream_once(request: StreamRequest, deadline: Deadline | None = None) -> Stream:
    """Send one streaming request and time every chunk; raises BadInput or RunFailed with one line."""
    url = parse_base_url(request.endpoint.base_url)
    path = url.path + API_PATHS[request.endpoint.api]
    started = time.perf_counter()  # TTFT counts connecting, as a client's user waits for it too
    conn = _connect(url, request.timeout_s)
    try:
        try:
            conn.request("POST", path, body=request.body(), headers=request.headers())
            response = conn.getresponse()
        except TimeoutError as exc:
            raise RunFailed(
                f"No answer from {request.endpoint.url} within {request.timeout_s:g} s: the server is stuck or "
                "overloaded; raise the timeout or lower the concurrency."
            ) from exc
        if response.status != 200:
            raise _status_error(request, response.status, response.reason, response.read(64 * 1024))
        content_type = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "text/event-stream":
            raise BadInput(
                f"{request.endpoint.url} answered with {content_type or 'no content type'}, not a stream of "
                "server-sent events: the server does not stream this API (stream=true was sent)."
            )
        return _read_events(request, response, started, deadline)
    except (http.client.HTTPException, ConnectionError) as exc:
        raise RunFailed(f"{request.endpoint.url} closed the connection mid-answer ({one_line(exc)}).") from exc
    finally:
        conn.close()


def _read_events(
    request: StreamRequest, response: http.client.HTTPResponse, started: float, deadline: Deadline | None
) -> Stream:
    """Server-sent events: `data:` lines, a blank line ends an event, `:` lines are comments, `[DONE]` ends all."""
    arrivals: list[float] = []
    texts: list[str] = []
    chunk_usage: list[int | None] = []
    completion_tokens = prompt_tokens = None
    finish_reason = None
    data_lines: list[str] = []

    def dispatch(at_s: float) -> bool:
        """Handle one event; False at [DONE]."""
        nonlocal completion_tokens, prompt_tokens, finish_reason
        payload = "\n".join(data_lines).strip()
        data_lines.clear()
        if not payload:
            return True
        if payload == "[DONE]":
            return False
        try:
            data = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise BadInput(
                f"{request.endpoint.url} streamed an event that is not JSON: is it an OpenAI-compatible API?"
            ) from exc
        if not isinstance(data, dict):
            raise BadInput(f"{request.endpoint.url} streamed an event that is not a JSON object.")
        if data.get("error"):
            raise RunFailed(f"{request.endpoint.url} reported an error mid-stream: {_error_message(payload.encode())}")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        if usage:
            completion_tokens = usage.get("completion_tokens", completion_tokens)
            prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
        text, reason = _chunk_content(data, request.endpoint.api)
        finish_reason = reason or finish_reason
        if text:
            arrivals.append(at_s)
            texts.append(text)
            chunk_usage.append(usage.get("completion_tokens") if usage else None)
        return True

    while True:
        if deadline is not None and deadline.passed():
            raise RunFailed(f"Stopped at the sweep's time limit of {deadline.limit_s:g} s.")
        try:
            raw = response.readline(1 << 20)
        except TimeoutError as exc:
            raise RunFailed(
                f"{request.endpoint.url} sent nothing for {request.timeout_s:g} s mid-stream: raise the timeout "
                "or lower the concurrency."
            ) from exc
        now_s = time.perf_counter() - started
        if not raw:  # the server closed the stream (transformers serve sends no [DONE])
            if data_lines:
                dispatch(now_s)
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if not dispatch(now_s):
                break
        elif line.startswith(":"):
            continue
        elif line.startswith("data:"):
            data_lines.append(line[5:].removeprefix(" "))
            # An event is complete at its blank line; dispatching as soon as its data is whole JSON (as vLLM's
            # client does) times it at its own line, and copes with servers that leave the blank line out.
            if _is_complete("\n".join(data_lines)) and not dispatch(now_s):
                break
        # other fields (event:, id:, retry:) carry nothing measured here
    if not texts:
        raise RunFailed(
            f"{request.endpoint.url} streamed no output text"
            + (f" (finish reason: {finish_reason})" if finish_reason else "")
            + ": raise max tokens or check the prompt."
        )
    return Stream(tuple(arrivals), tuple(texts), tuple(chunk_usage), completion_tokens, prompt_tokens, finish_reason)


def _is_complete(payload: str) -> bool:
    text = payload.strip()
    if text == "[DONE]":
        return True
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


# --- counting tokens ---------------------------------------------------------------------------------------------
def tokenizer_chunk_counter(tokenizer: Any) -> ChunkCounter:
    """Per-chunk token counts from one tokenization of the whole output: each token belongs to the chunk its last
    character arrived in (tokenizing chunks one by one would split tokens at chunk borders)."""

    lock = threading.Lock()  # one tokenizer for every request thread of a level: a fast tokenizer is not re-entrant

    def count(texts: Sequence[str]) -> list[int]:
        ends: list[int] = []
        total = 0
        for text in texts:
            total += len(text)
            ends.append(total)
        counts = [0] * len(texts)
        with lock:
            encoded = tokenizer("".join(texts), add_special_tokens=False, return_offsets_mapping=True)
        for _start, end in encoded["offset_mapping"]:
            counts[min(bisect.bisect_left(ends, end), len(texts) - 1)] += 1
        return counts

    return count


def load_chunk_counter(name: str) -> ChunkCounter:
    """'embedded' (the SmolLM2 tokenizer of the local model) or a local folder holding a fast tokenizer."""
    from transformers import AutoTokenizer

    if name == "embedded":
        from explorer.core.loading import ensure_embedded_converted

        folder: str | Path = ensure_embedded_converted()
    else:
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise BadInput(f"Tokenizer folder '{name}' does not exist: pass 'embedded' or a local folder.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise BadInput(f"No tokenizer could be loaded from '{name}': {one_line(exc)}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise BadInput(f"The tokenizer in '{name}' is not a fast tokenizer: chunk offsets need one.")
    return tokenizer_chunk_counter(tokenizer)


def count_tokens(stream: Stream, counter: ChunkCounter | None) -> tuple[list[int], TokenSource, int, TokenSource]:
    """(tokens per chunk, what counted them, output tokens, what counted those): the server's usage first, then a
    local tokenizer, then one token per chunk."""
    per_chunk_usage = [u for u in stream.chunk_usage if isinstance(u, int)]
    if len(per_chunk_usage) == len(stream.chunk_usage) and per_chunk_usage:
        chunk_tokens, chunk_source = [], "usage"
        previous = 0
        for seen in per_chunk_usage:
            chunk_tokens.append(max(0, seen - previous))
            previous = max(previous, seen)
    elif counter is not None:
        chunk_tokens, chunk_source = counter(stream.texts), "tokenizer"
    else:
        chunk_tokens, chunk_source = [1] * len(stream.texts), "chunks"
    if isinstance(stream.completion_tokens, int):
        return chunk_tokens, chunk_source, stream.completion_tokens, "usage"  # type: ignore[return-value]
    return chunk_tokens, chunk_source, sum(chunk_tokens), chunk_source  # type: ignore[return-value]


def measure_request(
    request: StreamRequest,
    index: int,
    level_started: float,
    counter: ChunkCounter | None,
    deadline: Deadline | None = None,
) -> RequestRecord:
    """One request as a record; a failure is kept as its one-line message, so one bad request never ends a sweep."""
    start_s = time.perf_counter() - level_started
    try:
        if deadline is not None and deadline.passed():
            raise RunFailed(f"Not sent: the sweep's time limit of {deadline.limit_s:g} s was reached.")
        record = measure_from_stream(stream_once(request, deadline), counter, index, start_s)
    except ExplorerError as exc:
        return _failed(index, start_s, str(exc))
    except Exception as exc:  # noqa: BLE001 - one odd server reply must not end the sweep
        return _failed(index, start_s, f"Unexpected failure: {one_line(exc)}")
    return record


def _failed(index: int, start_s: float, error: str) -> RequestRecord:
    return RequestRecord(index, start_s, None, None, (), (), 0, "chunks", "chunks", None, None, "", error or "failed")


# --- the sweep ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepConfig:
    endpoint: Endpoint
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = DEFAULT_MAX_TOKENS
    concurrency_levels: tuple[int, ...] = DEFAULT_LEVELS
    requests_per_level: int = DEFAULT_REQUESTS
    ttft_slo_s: float = DEFAULT_TTFT_SLO_S
    itl_slo_s: float = DEFAULT_ITL_SLO_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    warmup: bool = True  # one request first, left out of the statistics: engines pay one-off costs on the first

    def validate(self) -> None:
        if not self.prompt.strip():
            raise BadInput("The prompt is empty: type some text to send.")
        if not 1 <= self.max_tokens <= MAX_TOKENS_LIMIT:
            raise BadInput(f"max tokens must be between 1 and {MAX_TOKENS_LIMIT}, not {self.max_tokens}.")
        if not 1 <= self.requests_per_level <= MAX_REQUESTS:
            raise BadInput(f"requests per level must be between 1 and {MAX_REQUESTS}, not {self.requests_per_level}.")
        if not self.concurrency_levels or len(self.concurrency_levels) > MAX_LEVELS:
            raise BadInput(f"Give between 1 and {MAX_LEVELS} concurrency levels.")
        if any(not 1 <= c <= MAX_CONCURRENCY for c in self.concurrency_levels):
            raise BadInput(f"Concurrency levels must be between 1 and {MAX_CONCURRENCY}.")
        if self.ttft_slo_s <= 0 or self.itl_slo_s <= 0:
            raise BadInput("SLOs must be positive.")
        if not 0 < self.timeout_s <= 3600 or not 0 < self.time_limit_s <= 24 * 3600:
            raise BadInput("The timeout must be within (0, 3600] s and the time limit within (0, 86400] s.")


# What a SweepResult keeps of the SweepConfig it ran (same names on both).
SWEEP_SETTINGS = ("endpoint", "prompt", "max_tokens", "requests_per_level", "ttft_slo_s", "itl_slo_s")


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,4' -> (1, 4): sorted, without repeats."""
    try:
        levels = sorted({int(part) for part in str(text).split(",") if part.strip()})
    except ValueError as exc:
        raise BadInput(f"Concurrency takes comma-separated whole numbers such as 1,4 — not '{text}'.") from exc
    if not levels:
        raise BadInput("Give at least one concurrency level, e.g. 1,4.")
    return tuple(levels)


def run_level(
    config: SweepConfig,
    concurrency: int,
    api_key: str | None,
    counter: ChunkCounter | None,
    deadline: Deadline,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> LevelResult:
    """`requests_per_level` requests, at most `concurrency` in flight; `on_done` runs in the calling thread."""
    request = StreamRequest(config.endpoint, config.prompt, config.max_tokens, api_key, config.timeout_s)
    started = time.perf_counter()
    records: list[RequestRecord] = []
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"remote-c{concurrency}") as pool:
        futures = [
            pool.submit(measure_request, request, i, started, counter, deadline)
            for i in range(config.requests_per_level)
        ]
        for future in as_completed(futures):
            record = future.result()  # measure_request never raises
            records.append(record)
            if on_done:
                on_done(record)
    wall_s = time.perf_counter() - started
    return LevelResult(concurrency, wall_s, tuple(sorted(records, key=lambda r: r.index)))


def run_sweep(
    config: SweepConfig,
    api_key: str | None = None,
    counter: ChunkCounter | None = None,
    on_progress: Progress | None = None,
    policy: EndpointPolicy | None = None,
) -> SweepResult:
    """Check, warm up with one request (whose failure ends the sweep with its one line), then run every level."""
    config.validate()
    policy = policy or EndpointPolicy.from_env()
    policy.check(config.endpoint.base_url)
    policy.check_limits(config.concurrency_levels, config.requests_per_level, config.max_tokens)
    deadline = Deadline(config.time_limit_s)
    total = config.requests_per_level * len(config.concurrency_levels) + (1 if config.warmup else 0)
    done = 0

    def progress(text: str) -> None:
        if on_progress:
            on_progress(min(1.0, done / total), text)

    warmup = None
    if config.warmup:
        probe = StreamRequest(
            config.endpoint, config.prompt, min(WARMUP_MAX_TOKENS, config.max_tokens), api_key, config.timeout_s
        )
        stream = stream_once(probe, deadline)  # a bad URL, model or server fails here, once, with its own line
        warmup = measure_from_stream(stream, counter)
        done += 1
        progress("Warm-up request answered (not counted)")
    levels = []
    for concurrency in config.concurrency_levels:
        failures: list[str] = []

        def on_done(record: RequestRecord, c: int = concurrency, failures: list[str] = failures) -> None:
            nonlocal done
            done += 1
            if record.error:
                failures.append(record.error)
            progress(f"Concurrency {c}: {done} of {total} requests answered")

        progress(f"Concurrency {concurrency}: sending {config.requests_per_level} requests…")
        level = run_level(config, concurrency, api_key, counter, deadline, on_done)
        if not level.succeeded:
            raise RunFailed(
                f"All {len(level.records)} requests at concurrency {concurrency} failed; the first: {failures[0]}"
            )
        levels.append(level)
    settings = {name: getattr(config, name) for name in SWEEP_SETTINGS}
    return SweepResult(
        **settings, levels=tuple(levels), warmup=warmup, created_at=datetime.now(UTC).isoformat(timespec="seconds")
    )


def measure_from_stream(
    stream: Stream, counter: ChunkCounter | None, index: int = -1, start_s: float = 0.0
) -> RequestRecord:
    chunk_tokens, chunk_source, output_tokens, output_source = count_tokens(stream, counter)
    return RequestRecord(
        index=index,
        start_s=start_s,
        ttft_s=stream.arrivals_s[0],
        e2e_s=stream.arrivals_s[-1],
        chunk_arrivals_s=stream.arrivals_s,
        chunk_tokens=tuple(chunk_tokens),
        output_tokens=output_tokens,
        output_tokens_from=output_source,
        chunk_tokens_from=chunk_source,
        prompt_tokens=stream.prompt_tokens if isinstance(stream.prompt_tokens, int) else None,
        finish_reason=stream.finish_reason,
        text="".join(stream.texts),
    )


# --- text report and the CLI -------------------------------------------------------------------------------------
def format_sweep(result: SweepResult, ttft_slo_s: float | None = None, itl_slo_s: float | None = None) -> str:
    ttft_slo_s = result.ttft_slo_s if ttft_slo_s is None else ttft_slo_s
    itl_slo_s = result.itl_slo_s if itl_slo_s is None else itl_slo_s
    endpoint = result.endpoint
    lines = [
        f"endpoint {endpoint.base_url} · model {endpoint.model} · {endpoint.api} API · {result.requests_per_level} "
        f"requests per level · up to {result.max_tokens} tokens each (all figures measured)",
    ]
    if result.warmup is not None:
        lines.append(f"warm-up request, not counted: TTFT {ms_value(result.warmup.ttft_s)} ms")
    header = (
        f"{'conc':>4} {'ok':>7} {'TTFT p50/p90/p99 ms':>24} {'ITL p50/p90/p99 ms':>22} {'out tok/s':>9} "
        f"{'req/s':>6} {'goodput':>9}"
    )
    lines.append(header)
    for level in result.levels:
        s = level.summary(ttft_slo_s, itl_slo_s)
        ttft = "/".join(ms_value(s[f"ttft_p{q}_s"]) for q in PERCENTILES)
        itl = "/".join(ms_value(s[f"itl_p{q}_s"]) for q in PERCENTILES)
        rate = s["total_output_tokens_per_s"]
        lines.append(
            f"{level.concurrency:>4} {s['succeeded']:>3}/{s['requests']:<3} {ttft:>24} {itl:>22} "
            f"{'n/a' if rate is None else f'{rate:.1f}':>9} {s['requests_per_s'] or 0:>6.2f} "
            f"{s['goodput_requests']:>4}/{s['requests']:<4}"
        )
        for record in level.records:
            if record.error:
                lines.append(f"     request {record.index} failed: {record.error}")
    lines.append(
        f"goodput: requests with TTFT < {ttft_slo_s * 1e3:g} ms and their p99 ITL < {itl_slo_s * 1e3:g} ms; "
        f"tokens counted by {result.token_sources}"
    )
    if result.tokens_note:
        lines.append(f"warning: {result.tokens_note}")
    lines.append(ITL_RULE)
    return "\n".join(lines)


def register(commands: argparse._SubParsersAction) -> None:
    """`python -m explorer remote`: the concurrency sweep against an OpenAI-compatible streaming endpoint."""
    remote = commands.add_parser(
        "remote", help="measure an OpenAI-compatible streaming endpoint (TTFT, ITL, tokens/s) over a concurrency sweep"
    )
    remote.add_argument("--base-url", required=True, help="the server's OpenAI root, e.g. http://127.0.0.1:8000/v1")
    remote.add_argument("--model", required=True, help="the model name the server serves")
    remote.add_argument("--api", choices=APIS, default="chat", help="chat (default) or completions")
    remote.add_argument("--api-key-env", default=None, help="name of the environment variable holding the API key")
    remote.add_argument("--prompt", default=DEFAULT_PROMPT)
    remote.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    remote.add_argument("--concurrency", default=",".join(map(str, DEFAULT_LEVELS)), help="levels, e.g. 1,4")
    remote.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="requests per concurrency level")
    remote.add_argument("--ttft-slo-ms", type=float, default=DEFAULT_TTFT_SLO_S * 1e3)
    remote.add_argument("--itl-slo-ms", type=float, default=DEFAULT_ITL_SLO_S * 1e3)
    remote.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="longest silence from the server")
    remote.add_argument("--time-limit-s", type=float, default=DEFAULT_TIME_LIMIT_S, help="limit for the whole sweep")
    remote.add_argument(
        "--tokenizer", default=None, help="'embedded' or a local folder: count each chunk's tokens locally"
    )
    remote.add_argument("--no-warmup", action="store_true", help="skip the uncounted first request")
    remote.add_argument("--json", type=Path, default=None, help="write levels, percentiles and every request")
    remote.set_defaults(func=cmd_remote, loads_models=False)  # cli.main may skip importing transformers


def cmd_remote(args: argparse.Namespace) -> None:
    from explorer.cli import quiet_libraries, stderr_progress

    config = SweepConfig(
        endpoint=make_endpoint(args.base_url, args.model, args.api),
        prompt=args.prompt,
        max_tokens=args.max_tokens,
        concurrency_levels=parse_levels(args.concurrency),
        requests_per_level=args.requests,
        ttft_slo_s=args.ttft_slo_ms / 1e3,
        itl_slo_s=args.itl_slo_ms / 1e3,
        timeout_s=args.timeout_s,
        time_limit_s=args.time_limit_s,
        warmup=not args.no_warmup,
    )
    config.validate()  # before a tokenizer loads: bad input fails in a blink
    api_key = api_key_from_env(args.api_key_env)
    counter = None
    if args.tokenizer:
        quiet_libraries()  # only this option loads transformers in this command
        counter = load_chunk_counter(args.tokenizer)
    result = run_sweep(config, api_key=api_key, counter=counter, on_progress=stderr_progress)
    print(format_sweep(result))
    if args.json:
        args.json.write_text(result.to_json(), encoding="utf-8")
        print(f"wrote {args.json}")
