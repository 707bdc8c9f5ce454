"""One streamed answer as its chunks arrive, held within what the request asked for: output far beyond `max_tokens`
ends the request as the server's fault the moment it arrives (nothing unbounded is kept or tokenized), and usage
figures that contradict the request or what arrived are refused, never turned into a throughput."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from explorer.core.errors import RunFailed
from explorer.remote import server_text
from explorer.remote.records import TokenSource

# An answer past twice max_tokens ignored max_tokens (a stop token, a flushed last chunk, a local tokenizer of another
# model count a little more than max_tokens). The bound an uploaded sweep file's requests are held to, too.
FAR_BEYOND = 2
MAX_CHARS_PER_TOKEN = 64  # the longest tokens of common vocabularies (runs of spaces, of `=`) are a few dozen chars
TEMPLATE_TOKENS = 4096  # what a chat template, or a system prompt the server adds, may put around the prompt's tokens
FINISH_REASON_CHARS = 40


@dataclass(frozen=True)
class AnswerBounds:
    """The most an answer to one request can hold; past them the server ignored `max_tokens` or its usage is false."""

    max_tokens: int  # what the request asked for
    prompt_bytes: int  # the prompt's UTF-8 bytes: every token of it holds at least one

    @property
    def tokens(self) -> int:
        return FAR_BEYOND * self.max_tokens

    @property
    def chars(self) -> int:
        return self.tokens * MAX_CHARS_PER_TOKEN

    @property
    def prompt_tokens(self) -> int:
        return self.prompt_bytes + TEMPLATE_TOKENS

    def check_counted(self, url: str, counted: TokenCount) -> None:
        """Tokens as counted (the server's usage, a local tokenizer): at most max_tokens in one chunk, and the bound
        in all. A local tokenizer of another model past it is refused too: the record would claim a throughput."""
        chunk_tokens, chunk_source, output_tokens, output_source = counted
        most = max(output_tokens, sum(chunk_tokens))
        if most <= self.tokens and max(chunk_tokens, default=0) <= self.max_tokens:
            return
        what = f"{most:,} tokens" if most > self.tokens else f"a chunk of {max(chunk_tokens):,} tokens"
        by = output_source if most == output_tokens and most > self.tokens else chunk_source
        raise RunFailed(
            f"{url} streamed output counted as {what} (by {by}) for max_tokens {self.max_tokens}, far beyond it: the "
            "server ignores max_tokens, or the local tokenizer is another model's. Not counted as a throughput."
        )


class TokenCount(NamedTuple):
    """A request's tokens as `explorer.remote.tokens.count_tokens` counts them, and what counted them."""

    chunk_tokens: list[int]
    chunk_source: TokenSource
    output_tokens: int
    output_source: TokenSource


@dataclass(frozen=True)
class Stream:
    """What came back from one streamed request, before any token counting."""

    arrivals_s: tuple[float, ...]  # each chunk with output text, seconds since the request was sent
    texts: tuple[str, ...]  # control characters stripped (line breaks and tabs kept)
    chunk_usage: tuple[int | None, ...]  # completion_tokens carried by that chunk itself (vLLM's continuous usage)
    completion_tokens: int | None  # the last usage seen
    prompt_tokens: int | None
    finish_reason: str | None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, where the server sends it


@dataclass
class Answer:
    """The chunks of one answer as they arrive, each checked against the request's bounds."""

    api: str
    url: str  # for the messages
    bounds: AnswerBounds
    answered: bool = False  # a 200 with a stream came back: later failures are mid-answer
    done: bool = False  # `data: [DONE]` arrived
    arrivals_s: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    chunk_usage: list[int | None] = field(default_factory=list)
    chars: int = 0  # output characters so far
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    cached_tokens: int | None = None

    def add(self, data: Mapping[str, Any], at_s: float) -> None:
        """One parsed chunk; raises RunFailed (the server's fault) once output or usage passes the bounds."""
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        completion_tokens = _count(usage.get("completion_tokens"))
        self.completion_tokens = self.completion_tokens if completion_tokens is None else completion_tokens
        prompt_tokens = _count(usage.get("prompt_tokens"))
        self.prompt_tokens = self.prompt_tokens if prompt_tokens is None else prompt_tokens
        details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        cached_tokens = _count(details.get("cached_tokens"))  # vLLM sends it with --enable-prompt-tokens-details
        self.cached_tokens = self.cached_tokens if cached_tokens is None else cached_tokens
        text, reason = _chunk_content(data, self.api)
        self.finish_reason = server_text.one_line(reason, FINISH_REASON_CHARS) if reason else self.finish_reason
        text = server_text.output_text(text)
        if text:
            self.arrivals_s.append(at_s)
            self.texts.append(text)
            self.chunk_usage.append(completion_tokens)
            self.chars += len(text)
        self._check_bounds()

    def _check_bounds(self) -> None:
        bounds, max_tokens = self.bounds, self.bounds.max_tokens
        if self.chars > bounds.chars or len(self.texts) > bounds.tokens:
            what = f"over {bounds.chars:,} characters" if self.chars > bounds.chars else f"{len(self.texts)} chunks"
            raise RunFailed(
                f"{self.url} streamed {what} of output for max_tokens {max_tokens}, far beyond what {max_tokens} "
                "tokens hold: the server ignores max_tokens. Its fault: this answer was cut off and is not counted."
            )
        if self.completion_tokens is not None and self.completion_tokens > bounds.tokens:
            self._usage_contradicts(f"completion_tokens {_figure(self.completion_tokens)} for max_tokens {max_tokens}")
        if self.prompt_tokens is not None and self.prompt_tokens > bounds.prompt_tokens:
            self._usage_contradicts(
                f"prompt_tokens {_figure(self.prompt_tokens)} for a prompt of {bounds.prompt_bytes:,} bytes"
            )

    def _usage_contradicts(self, what: str) -> None:
        raise RunFailed(
            f"{self.url} reported {what}: usage that contradicts the request or what arrived is the server's fault, "
            "not a throughput. This answer is not counted."
        )

    def finished(self) -> Stream:
        """The stream, once it is known to be whole: a `[DONE]` or a finish reason before the server closed it, and
        usage that does not claim fewer tokens than the chunks that arrived (each holds at least one)."""
        if not self.done and self.finish_reason is None:
            raise RunFailed(
                f"{self.url}: the stream ended before the answer finished (no finish_reason and no [DONE]): the "
                "server closed it mid-answer."
            )
        if not self.texts:
            reason = f" (finish reason: {self.finish_reason})" if self.finish_reason else ""
            raise RunFailed(f"{self.url} streamed no output text{reason}: raise max tokens or check the prompt.")
        if self.completion_tokens is not None and len(self.texts) > FAR_BEYOND * self.completion_tokens + 2:
            self._usage_contradicts(
                f"completion_tokens {self.completion_tokens} after streaming {len(self.texts)} chunks of text"
            )
        return Stream(
            tuple(self.arrivals_s), tuple(self.texts), tuple(self.chunk_usage), self.completion_tokens,
            self.prompt_tokens, self.finish_reason, self.cached_tokens,
        )  # fmt: skip


def _count(value: object) -> int | None:
    """A token count from a server's usage; anything but a whole number >= 0 counts as not sent."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _figure(count: int) -> str:
    """A server's count as printed: its digits, or how many there are when a server sent an absurd number."""
    digits = str(count)
    return digits if len(digits) <= 15 else f"of {len(digits)} digits"


def _chunk_content(data: Mapping[str, Any], api: str) -> tuple[str, str | None]:
    """(output text, finish reason) of one parsed chunk; the chat API's reasoning text counts as output too."""
    choices = data.get("choices") or []
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", None
    choice = choices[0]
    if api == "chat":
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        text = f"{delta.get('reasoning_content') or ''}{delta.get('content') or ''}"
    else:
        text = str(choice.get("text") or "")
    reason = choice.get("finish_reason")
    return text, reason if isinstance(reason, str) else None
