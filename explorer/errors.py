"""The two kinds of failure a user can meet, so the CLI and the app can answer each with one line."""


class ExplorerError(Exception):
    """A failure with a message fit to show a user as it is (one line, says what to do)."""

    exit_code = 1


class BadInput(ExplorerError):
    """The request itself is wrong: empty prompt, too long, unknown model, bad dtype or device."""

    exit_code = 2


class RunFailed(ExplorerError):
    """The request was fine but running it failed: out of memory, a device error."""

    exit_code = 1


def one_line(exc: BaseException) -> str:
    """An unexpected exception as one short line: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__
