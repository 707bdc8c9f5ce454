"""One streamed request on the wire: `httpx` owns the connection, its framing and its timeouts, `httpx-sse` the
server-sent events; this module owns only the clock (each text chunk stamped as it arrives) and the reading of each
OpenAI-compatible chunk, and turns every way a server can fail into one line that says what to do."""

from __future__ import annotations

import email.utils
import json
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from httpx_sse import EventSource, connect_sse

from explorer.core.errors import BadInput, ExplorerError, RunFailed
from explorer.core.errors import one_line as exception_line
from explorer.remote.answer import Answer, AnswerBounds, Stream
from explorer.remote.deadlines import Call, CallEnded
from explorer.remote.endpoint import Endpoint, parse_base_url
from explorer.remote.server_text import error_in_body, error_message, one_line, server_error

CONNECT_TIMEOUT_S = 3.0  # a refused or unreachable host fails in seconds, whatever the request's timeout
MAX_LINE_BYTES = 1 << 20  # one SSE line (one chunk's JSON) is a few hundred bytes: 1 MiB is a broken server
MAX_BODY_BYTES = 64 << 20  # a whole answer of 4,096 tokens is a few MB of chunks
ERROR_BODY_BYTES = 64 << 10  # what is read of an error answer, for its message
MAX_RETRIES = 3  # 429/503 answers retried per request, each after the server's Retry-After, within the deadline
BUSY_STATUSES = {429: "overloaded", 503: "unavailable"}  # the server's refusal, not the user's bad input: retried


@dataclass(frozen=True)
class StreamRequest:
    endpoint: Endpoint
    prompt: str
    max_tokens: int
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0  # the request's deadline, from sending to the end of the stream
    temperature: float = 0.0  # greedy: the same prompt asks for the same work at every level
    # Exactly max_tokens tokens each, as vLLM's `bench serve` and SGLang's `bench_serving` ask: min_tokens and
    # ignore_eos, which both servers take (OpenAI's own API refuses them: HTTP 400, one line from status_error).
    fixed_length: bool = False
    system: str = ""  # a system prompt before the prompt (the prefix-reuse experiment's shared prefix)

    def body(self) -> bytes:
        payload: dict[str, Any] = {
            "model": self.endpoint.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},  # the final chunk then carries the token counts
        }
        if self.fixed_length:  # every request then does the same decode work, whatever the model would say
            payload.update(min_tokens=self.max_tokens, ignore_eos=True)
        if self.endpoint.api == "chat":
            system = [{"role": "system", "content": self.system}] if self.system else []
            payload["messages"] = [*system, {"role": "user", "content": self.prompt}]
        else:
            payload["prompt"] = f"{self.system}\n\n{self.prompt}" if self.system else self.prompt
        return json.dumps(payload).encode()

    def bounds(self) -> AnswerBounds:
        return AnswerBounds(self.max_tokens, len(f"{self.system}{self.prompt}".encode("utf-8", "replace")))

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def open_client(max_in_flight: int, timeout_s: float) -> httpx.Client:
    """One client for a sweep's threads. No keep-alive: each request opens its own connection, so its TTFT counts
    connecting as a new client's would. No proxy from the environment: the URL measured is the one connected to."""
    return httpx.Client(
        timeout=httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)),
        limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=0),
        trust_env=False,
        follow_redirects=False,
    )


# --- one request ------------------------------------------------------------------------------------------------
class ServerBusy(Exception):
    """HTTP 429 or 503: the server shed this request; `stream_once` waits its Retry-After when the deadline allows."""

    def __init__(self, status: int, retry_after_s: float | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.message = message


def stream_once(request: StreamRequest, client: httpx.Client, call: Call) -> Stream:
    """Send one streaming request and time every chunk, retrying a 429/503 within the deadline; raises BadInput (the
    URL, model or key is wrong) or RunFailed (the server failed) with one line. TTFT counts from the first send."""
    started = time.perf_counter()
    for retries_left in range(MAX_RETRIES, -1, -1):
        try:
            return _attempt(request, client, call, started)
        except ServerBusy as busy:
            wait_s = busy.retry_after_s
            if wait_s is None or wait_s >= call.left_s() or retries_left == 0:
                raise RunFailed(_busy_message(request, busy, retries_left)) from None
            if not call.sleep(wait_s):
                raise RunFailed(ended_message(request, call, answered=False)) from None
    raise AssertionError("unreachable: the last try returns or raises")


def _busy_message(request: StreamRequest, busy: ServerBusy, retries_left: int) -> str:
    if busy.retry_after_s is None:
        why = "gave no Retry-After"
    elif retries_left == 0:
        why = f"still refused it after {MAX_RETRIES} retries"
    else:
        why = f"asked to retry after {busy.retry_after_s:g} s, past this request's deadline"
    return (
        f"{request.endpoint.url} is {BUSY_STATUSES[busy.status]} (HTTP {busy.status}) and {why}: lower the "
        "concurrency or raise the timeout. "
        f"It said: {busy.message}"
    )


def _attempt(request: StreamRequest, client: httpx.Client, call: Call, started: float) -> Stream:
    answer = Answer(request.endpoint.api, request.endpoint.url, request.bounds())
    try:
        call.check()
        with connect_sse(
            client, "POST", request.endpoint.url, content=request.body(), headers=request.headers(),
            extensions={"trace": call.trace},  # hands the socket to the watchdog, which can end a dripping server
        ) as source:  # fmt: skip
            _check_response(request, source.response, call)
            answer.answered = True
            _read_events(request, source.response, answer, call, started)
    except CallEnded:
        raise RunFailed(ended_message(request, call, answer.answered)) from None
    except httpx.HTTPError as exc:
        if call.reason is not None:  # the watchdog shut the socket: say why, not what the socket said
            raise RunFailed(ended_message(request, call, answer.answered)) from exc
        raise _transport_failure(request, exc, answer.answered) from exc
    except UnicodeError as exc:  # a charset no decoder reads, or bytes it cannot: never the user's fault
        raise RunFailed(
            f"{request.endpoint.url} sent text that cannot be decoded ({one_line(exception_line(exc))}): an "
            "OpenAI-compatible server streams UTF-8."
        ) from None
    return answer.finished()


def _read_events(request: StreamRequest, response: httpx.Response, answer: Answer, call: Call, started: float) -> None:
    checked = httpx.Response(
        response.status_code,
        # Server-sent events are UTF-8 whatever charset the server names (the SSE standard): utf-16 would not decode
        headers={"content-type": "text/event-stream; charset=utf-8"},
        content=_checked_body(request, response, call, start := bytearray()),
    )
    for event in EventSource(checked).iter_sse():
        call.check()
        at_s = time.perf_counter() - started
        for payload in _payloads(event.data):
            if payload == "[DONE]":
                answer.done = True
                return
            answer.add(_parse(request, payload, event.event == "error"), at_s)
    call.check()  # a stream cut by the watchdog ends like a closed one: say why it ended
    if not answer.texts and answer.finish_reason is None and (message := error_in_body(bytes(start))):
        # a JSON error where the events should be: the server's words, not "the stream ended"
        raise RunFailed(f"{request.endpoint.url} answered HTTP 200 with an error instead of a stream: {message}")
    if not answer.texts and b"data:" not in start:  # nothing in UTF-8 `data:` lines (UTF-16, say): not a stream cut
        raise BadInput(
            f"{request.endpoint.url} sent no server-sent event (UTF-8 `data:` lines): is it an OpenAI-compatible "
            "streaming API?"
        )


def _checked_body(request: StreamRequest, response: httpx.Response, call: Call, start: bytearray) -> Iterator[bytes]:
    """The body as httpx decodes it, each piece checked first: the deadline, the longest line, the whole size. Its
    first ERROR_BODY_BYTES are kept in `start`, for a JSON error sent where the events should be."""
    line_bytes = total_bytes = 0
    for piece in response.iter_bytes():
        call.check()
        start += piece[: ERROR_BODY_BYTES - len(start)]
        total_bytes += len(piece)
        cut = max(piece.rfind(b"\n"), piece.rfind(b"\r"))
        line_bytes = len(piece) - cut - 1 if cut >= 0 else line_bytes + len(piece)
        if line_bytes > MAX_LINE_BYTES or total_bytes > MAX_BODY_BYTES:
            what = "a line of over 1 MiB" if line_bytes > MAX_LINE_BYTES else "over 64 MiB"
            raise RunFailed(
                f"{request.endpoint.url} streamed {what}: too large for a stream of token chunks. Is it an "
                "OpenAI-compatible streaming API?"
            )
        yield piece


def _payloads(data: str) -> list[str]:
    """An event's data as one payload; line by line when a server left out the blank line between two events, whose
    data lines then arrive as one event (each line a whole JSON object: vLLM's own client copes with it too)."""
    text = data.strip()
    if "\n" not in text:
        return [text] if text else []
    try:
        json.loads(text)
        return [text]
    except (json.JSONDecodeError, RecursionError):  # each line then parsed, and refused, on its own
        return [line.strip() for line in text.split("\n") if line.strip()]


def _parse(request: StreamRequest, payload: str, error_event: bool = False) -> dict[str, Any]:
    """One event's JSON; a server's error (any JSON shape, or an `event: error`) raises its own message."""
    if error_event:
        raise RunFailed(f"{request.endpoint.url} reported an error mid-stream: {error_message(payload.encode())}")
    try:
        data = json.loads(payload)
    except ValueError as exc:  # not JSON, or an integer of over 4,300 digits
        raise BadInput(
            f"{request.endpoint.url} streamed an event that is not JSON: is it an OpenAI-compatible API?"
        ) from exc
    except RecursionError:  # JSON nested past Python's recursion limit: no token chunk is, a broken server's may be
        raise RunFailed(
            f"{request.endpoint.url} streamed an event nested too deeply to read (a token chunk is a few levels deep): "
            "the server is broken."
        ) from None
    if not isinstance(data, dict):
        raise BadInput(f"{request.endpoint.url} streamed an event that is not a JSON object.")
    if (message := server_error(data)) is not None:
        raise RunFailed(f"{request.endpoint.url} reported an error mid-stream: {message}")
    return data


# --- failures, each one line ------------------------------------------------------------------------------------
def _check_response(request: StreamRequest, response: httpx.Response, call: Call) -> None:
    if response.status_code in BUSY_STATUSES:
        retry_after = retry_after_s(response.headers.get("retry-after"))
        raise ServerBusy(response.status_code, retry_after, error_message(_body_start(response, call)))
    if response.status_code != 200:
        reason = one_line(response.reason_phrase, 60)
        raise status_error(request, response.status_code, reason, error_message(_body_start(response, call)))
    content_type = one_line(response.headers.get("content-type", "").split(";")[0].strip().lower(), 60)
    if content_type != "text/event-stream":
        if message := error_in_body(_body_start(response, call)):  # a 200 whose JSON says it failed
            raise RunFailed(f"{request.endpoint.url} answered HTTP 200 with an error instead of a stream: {message}")
        raise BadInput(
            f"{request.endpoint.url} answered with {content_type or 'no content type'}, not a stream of "
            "server-sent events: the server does not stream this API (stream=true was sent)."
        )


def _body_start(response: httpx.Response, call: Call) -> bytes:
    """The first ERROR_BODY_BYTES of a body that is not a stream (an error's), for the server's message."""
    body = b""
    for piece in response.iter_bytes():
        call.check()
        body += piece
        if len(body) >= ERROR_BODY_BYTES:
            break
    return body[:ERROR_BODY_BYTES]


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header: seconds, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def status_error(request: StreamRequest, status: int, reason: str, message: str) -> ExplorerError:
    """A refused request: BadInput when what was typed is wrong (URL, model, key), RunFailed when the server failed."""
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


def _transport_failure(request: StreamRequest, exc: httpx.HTTPError, answered: bool) -> ExplorerError:
    url = parse_base_url(request.endpoint.base_url)
    where = f"{url.host}:{url.port}"
    if isinstance(exc, httpx.ConnectTimeout):
        return BadInput(
            f"No connection to {where} within {CONNECT_TIMEOUT_S:g} s: the host is unreachable or drops packets."
        )
    if isinstance(exc, httpx.ConnectError):
        return BadInput(_connect_failure(exc, url.host, where))
    if isinstance(exc, httpx.TimeoutException):
        return RunFailed(_timeout_message(request, answered))
    said = one_line(exception_line(exc))  # httpcore's words may quote the server's bytes
    if isinstance(exc, httpx.DecodingError):  # a Content-Encoding (gzip, br...) whose bytes do not decode
        return RunFailed(f"{request.endpoint.url} sent a body that cannot be decoded ({said}).")
    return RunFailed(f"{request.endpoint.url} closed the connection mid-answer ({said}).")


def _connect_failure(exc: BaseException, host: str, where: str) -> str:
    """What a failed connect means for the user, from the OSError under httpx's ConnectError."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ConnectionRefusedError):
        return f"Nothing is listening at {where} (connection refused): start the server or fix the URL."
    if isinstance(cause, socket.gaierror):
        return f"Cannot resolve host '{host}': check the base URL."
    if isinstance(cause, ssl.SSLError):
        return f"TLS with {where} failed ({one_line(exception_line(cause))}): check http vs https in the base URL."
    return f"Cannot connect to {where}: {one_line(exception_line(cause or exc))}."


def _timeout_message(request: StreamRequest, answered: bool) -> str:
    url, timeout_s = request.endpoint.url, request.timeout_s
    if not answered:
        return (
            f"No answer from {url} within {timeout_s:g} s: the server is stuck or overloaded; raise the timeout or "
            "lower the concurrency."
        )
    return (
        f"{url} did not finish its answer within {timeout_s:g} s (the request's timeout): raise the timeout, or "
        "lower max tokens or the concurrency."
    )


def ended_message(request: StreamRequest, call: Call, answered: bool) -> str:
    if call.reason == "time limit":
        return f"Stopped at the sweep's time limit of {call.limit_s:g} s."
    if call.reason == "interrupted":
        return "Stopped: the sweep was interrupted before this answer finished."
    return _timeout_message(request, answered)
