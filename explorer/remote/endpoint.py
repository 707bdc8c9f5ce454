"""Where a sweep sends its requests: an OpenAI-compatible server's base URL, checked and normalized before anything
is sent, the model it serves and which of its two text APIs to call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from explorer.core.errors import BadInput

Api = Literal["chat", "completions"]
APIS: tuple[Api, ...] = ("chat", "completions")
API_PATHS: dict[str, str] = {"chat": "/chat/completions", "completions": "/completions"}


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server, the model it serves and which of its two text APIs to call. No API key here:
    a key is passed to `run_sweep` alone, so it never reaches a JSON file."""

    base_url: str  # normalized: scheme://host[:port]/path without a trailing slash, e.g. http://127.0.0.1:8000/v1
    model: str
    api: Api = "chat"

    @property
    def url(self) -> str:
        return self.base_url + API_PATHS[self.api]


@dataclass(frozen=True)
class ParsedUrl:
    scheme: str  # "http" | "https"
    host: str
    port: int
    path: str  # without a trailing slash; "" for the server root

    @property
    def normalized(self) -> str:
        default = 443 if self.scheme == "https" else 80
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{netloc}{'' if self.port == default else f':{self.port}'}{self.path}"


def parse_base_url(base_url: str) -> ParsedUrl:
    """Check a base URL's shape before anything is sent; every refusal says what a good one looks like."""
    text = (base_url or "").strip()
    example = "e.g. http://127.0.0.1:8000/v1"
    if not text:
        raise BadInput(f"The base URL is empty: give the server's OpenAI-compatible root, {example}.")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise BadInput(f"'{text}' is not a valid URL ({exc}): {example}.") from exc
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise BadInput(f"'{text}' is not an http(s) URL with a host: {example}.")
    if parts.username or parts.password:
        raise BadInput("Put no credentials in the base URL: pass the key with --api-key-env (or the API key box).")
    if parts.query or parts.fragment:
        raise BadInput(f"The base URL takes no query or fragment: {example}.")
    path = parts.path.rstrip("/")
    for suffix in API_PATHS.values():
        if path.endswith(suffix):
            raise BadInput(
                f"Give the base URL without '{suffix}' (it is added from the API choice): "
                f"'{text[: text.rfind(suffix)]}'."
            )
    scheme = parts.scheme.lower()
    return ParsedUrl(scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80), path)


def make_endpoint(base_url: str, model: str, api: str = "chat") -> Endpoint:
    if api not in APIS:
        raise BadInput(f"Unknown API '{api}': use one of {', '.join(APIS)}.")
    if not (model or "").strip():
        raise BadInput("The model name is empty: give the name the server serves (GET <base URL>/models lists them).")
    return Endpoint(parse_base_url(base_url).normalized, model.strip(), api)  # type: ignore[arg-type]
