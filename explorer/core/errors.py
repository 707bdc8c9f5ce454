"""The kinds of failure a user can meet, so the CLI and the app can answer each with one line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ExplorerError(Exception):
    """A failure with a message fit to show a user as it is (one line, says what to do)."""

    exit_code = 1


class BadInput(ExplorerError):
    """The request itself is wrong: empty prompt, too long, unknown model, bad dtype or device."""

    exit_code = 2


class RunFailed(ExplorerError):
    """The request was fine but running it failed: out of memory, a device error."""

    exit_code = 1


class Interrupted(ExplorerError):
    """The user pressed Ctrl-C after some work was kept (written or printed): the shell's 128 + SIGINT."""

    exit_code = 130


def one_line(exc: BaseException) -> str:
    """An unexpected exception as one short line: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


OOM_ADVICE = "use a shorter prompt, fewer new tokens or repeats, a smaller batch or dtype"


def is_out_of_memory(exc: BaseException) -> bool:
    """torch raises OutOfMemoryError on CUDA but a plain RuntimeError (or MemoryError) when host memory runs out."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
    )


@contextmanager
def out_of_memory_as_run_failed(what: str) -> Iterator[None]:
    """The one place out-of-memory becomes a one-line RunFailed that says what to do; loading and running use it."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        if is_out_of_memory(exc):
            raise RunFailed(f"Out of memory while {what}: {OOM_ADVICE}.") from exc
        raise
