"""The command line run inside the test process: `main(argv)` with what it prints captured, for every case that needs
no fresh interpreter. A child process costs a torch import and its own device measurement (seconds each) per call;
the few tests that are about a fresh process (bad input refused before torch loads, a real pipe, the whole life of a
refused connection) still start one."""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from explorer.cli.main import main


@dataclass(frozen=True)
class CliResult:
    """What a user at a terminal would see: the exit status and the two streams (the fields a CompletedProcess has)."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def environment(changes: Mapping[str, str]) -> Iterator[None]:
    """`changes` set in os.environ for the block, the previous values put back after it."""
    before = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> CliResult:
    """`python -m explorer ARGS` in this process, offline as the subprocess tests ran it. Warnings that a fresh
    interpreter would print go to stderr here too, so "one line on stderr" still means one line."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        environment({"HF_HUB_OFFLINE": "1", **(env or {})}),
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        warnings.simplefilter("default")  # what `python -m` shows, less the categories it hides by default:
        for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", hidden)
        returncode = main(list(args))
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    return CliResult(returncode, stdout.getvalue(), shown + stderr.getvalue())
