"""What a server says, made safe before it is printed or stored: control characters stripped (a terminal escape in an
error message or a token would set the window's title or clear the screen), and its own error message found in
whichever JSON shape carries it (OpenAI's, vLLM's, FastAPI's, TGI's, plain text)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

MESSAGE_CHARS = 200  # what is kept of a server's error message: one line
# C0 and C1 controls and DEL (ESC, BEL, CSI...), and the bidirectional overrides that reorder what a terminal shows
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TEXT_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # the same, less \t and \n


def output_text(text: str) -> str:
    """A model's output as kept: its line breaks and tabs stay, every other control character goes."""
    return TEXT_CONTROL.sub("", text)


def one_line(text: str, max_chars: int = MESSAGE_CHARS) -> str:
    """Anything a server said, as one printable line of at most `max_chars` characters."""
    line = " ".join(CONTROL.sub(" ", text).split())
    return line[:max_chars] + ("…" if len(line) > max_chars else "")


def error_message(body: bytes) -> str:
    """The server's own words from an error body (any JSON shape `server_error` knows, else its text), one line."""
    return error_in_body(body) or one_line(body.decode("utf-8", "replace")) or "(no message)"


def error_in_body(body: bytes) -> str | None:
    """The message of a body that is a JSON error, or None when it is not one (nor JSON)."""
    try:
        data = json.loads(body.decode("utf-8", "replace"))  # JSON is UTF-8, whatever charset a server claims
    except (ValueError, RecursionError):  # not JSON, a 4,300-digit integer, or nested past the limit
        return None
    return server_error(data) if isinstance(data, dict) else None


def server_error(data: Mapping[str, Any]) -> str | None:
    """The message of a JSON object that reports an error, or None when it is not one. Shapes seen:
    `{"error": {"message": ...}}` (OpenAI), `{"error": "..."}` (TGI), `{"object": "error", "message": ...}` (vLLM),
    `{"detail": ...}` (FastAPI, its validation errors a list of `{"msg": ...}`), `{"message": ...}` (others)."""
    error = data.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return _words(message or error)
    if data.get("object") == "error":
        return _words(data.get("message") or data.get("detail") or dict(data))
    if "choices" in data:  # a chunk
        return None
    message = data.get("detail") or data.get("message")
    return _words(message) if message else None


def _words(value: object) -> str:
    """A message that may be a string, a list of FastAPI's `{"msg": ...}` or any JSON: one printable line."""
    if isinstance(value, list):
        value = "; ".join(str(item.get("msg", item)) if isinstance(item, dict) else str(item) for item in value)
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (RecursionError, ValueError):  # nested as deep as json.loads allows, one level past what dumps does
        text = ""
    return one_line(text) or "(no message)"
