"""Tiny misbehaving HTTP servers on 127.0.0.1 for the remote client's tests: each connection gets a scripted list of
byte writes and pauses, so a test can drip headers, cut a stream, shed load or send garbage exactly.

Bounded: at most `max_connections` connections are answered, every pause ends when the server stops, and the server
stops when its `with` block ends (or after `max_s`), closing every connection and joining its threads.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"
Step = bytes | float  # bytes to send, or seconds to wait before the next step
Script = Callable[[int], Sequence[Step]]  # connection number (0, 1, ...) -> what to answer it with


def head(status: str = "200 OK", content_type: str = "text/event-stream", extra: str = "") -> bytes:
    """A response head with no length: the body runs until the server closes the connection."""
    return f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}Connection: close\r\n\r\n".encode()


def event(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def chunk(text: str = "", finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    """One chat-API chunk as vLLM streams it."""
    data: dict[str, Any] = {"choices": [{"delta": {"content": text} if text else {}, "finish_reason": finish}]}
    if usage is not None:
        data["usage"] = usage
    return event(data)


def answer(*texts: str, finish: str | None = "length", done: bool = True) -> list[Step]:
    """A whole streamed answer: one chunk per text, a finish reason, `[DONE]`."""
    steps: list[Step] = [head(), *(chunk(text) for text in texts)]
    if finish:
        steps.append(chunk(finish=finish))
    if done:
        steps.append(event("[DONE]"))
    return steps


def flood(chunks: int, chunk_chars: int) -> list[Step]:
    """A stream of `chunks` chat chunks of `chunk_chars` characters each (one line each, under the 1 MiB line limit),
    then a normal finish: output far beyond any max_tokens, from a server that ignores it. One bytes object reused."""
    big = chunk("x" * chunk_chars)
    return [head(), *([big] * chunks), chunk(finish="length"), event("[DONE]")]


def json_body(status: str, data: dict[str, Any] | bytes, content_type: str = "application/json") -> list[Step]:
    """A whole non-streamed answer: `status`, then `data` as its JSON body (bytes as they are)."""
    return [head(status, content_type), data if isinstance(data, bytes) else json.dumps(data).encode()]


@dataclass
class FakeServer:
    base_url: str
    connections: int = 0  # connections accepted so far
    closed_by_client_s: list[float] = field(default_factory=list)  # when a client hung up mid-script (monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return self.connections


def _read_request(conn: socket.socket) -> bytes:
    """The request head and its Content-Length body, so the client is never left writing into a closed socket; returns
    the head."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return data
        data += piece
    header, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            return header
        body += piece
    return header


def _serve_one(server: FakeServer, conn: socket.socket, script: Script, stop: threading.Event) -> None:
    """One connection: a GET of /metrics (the sweep reads a server's own metrics around each level) gets a 404 and
    takes no number; any other request is answered with the script of the next connection number."""
    with conn:
        try:
            conn.settimeout(10)
            if _read_request(conn).startswith(b"GET /metrics"):
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            with server.lock:
                number = server.connections
                server.connections += 1
            for step in script(number):
                if stop.is_set():
                    return
                if isinstance(step, bytes):
                    conn.sendall(step)
                elif stop.wait(step):
                    return
        except OSError:  # the client hung up: what a stopped or timed-out request does
            with server.lock:
                server.closed_by_client_s.append(time.monotonic())


@contextlib.contextmanager
def scripted_server(script: Script, max_connections: int = 16, max_s: float = 60.0) -> Iterator[FakeServer]:
    """Yield a server whose /v1 base URL answers connection n with `script(n)` (GETs of /metrics not counted)."""
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(32)
    listener.settimeout(0.05)
    server = FakeServer(f"http://{HOST}:{listener.getsockname()[1]}/v1")
    stop = threading.Event()
    handlers: list[threading.Thread] = []
    started = time.monotonic()

    def accept() -> None:
        while not stop.is_set() and server.count() < max_connections and time.monotonic() - started < max_s:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            handler = threading.Thread(target=_serve_one, args=(server, conn, script, stop), daemon=True)
            handlers.append(handler)
            handler.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield server
    finally:
        stop.set()
        acceptor.join(5)
        listener.close()
        for handler in handlers:
            handler.join(5)
