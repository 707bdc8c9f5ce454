"""The remote client against servers that misbehave on purpose (tests/fake_servers.py, on 127.0.0.1): a server that
drips its headers or body cannot hold a request past its deadline nor a sweep past its time limit; a stream cut short
is a failure, in both HTTP body framings and with or without blank lines between events; a sweep keeps the levels that
finished, marked partial (also on Ctrl-C, which closes open streams at once); a 429 or 503 is the server's failure,
retried once its Retry-After fits the limits; a huge line is too large, deeply nested JSON one line, negative usage
ignored; output paths are checked before any send."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.cli.main import main
from explorer.core.errors import RunFailed
from explorer.remote import sweep
from explorer.remote.endpoint import make_endpoint
from tests import fake_servers as fake

ROOT = Path(__file__).resolve().parents[1]
DRIP_S = 0.25  # a dripping server's pause between two bytes: each read returns well within any timeout
SLACK_S = 2.0  # how late past a deadline a request may end on a busy 2-core machine


def config(base_url: str, **kw: object) -> sweep.SweepConfig:
    values: dict[str, object] = dict(concurrency_levels=(1,), requests_per_level=1, warmup=False, max_tokens=4)
    values.update(kw)
    return sweep.SweepConfig(make_endpoint(base_url, "m"), **values)  # type: ignore[arg-type]


def drip(prefix: bytes, byte: bytes = b"x", count: int = 400) -> list[fake.Step]:
    """`prefix`, then one byte every DRIP_S: never a newline, never an end (bounded by count and the server's life)."""
    steps: list[fake.Step] = [prefix]
    for _ in range(count):
        steps += [DRIP_S, byte]
    return steps


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line on stderr, after progress lines only."""
    return error_line(capsys.readouterr().err)


def error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert [line for line in lines if not line.startswith("[")] == lines[-1:], lines
    assert lines[-1].startswith("error: ")
    return lines[-1]


# --- 1. one deadline per request, one per sweep ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("steps", "words"),
    [
        (drip(fake.head() + b"data: {", b"x"), "did not finish its answer within 1 s"),  # a body without a newline
        (drip(b"HTTP/1.1 200 OK\r\n", b"X-Drip: a\r\n"), "No answer from"),  # header lines, one at a time
    ],
)
def test_a_dripping_server_cannot_hold_a_request_past_its_timeout(steps: list[fake.Step], words: str) -> None:
    with fake.scripted_server(lambda n: steps) as server:
        started = time.monotonic()
        with pytest.raises(RunFailed, match=words):
            sweep.run_sweep(config(server.base_url, timeout_s=1.0))
        elapsed_s = time.monotonic() - started
    assert elapsed_s < 1.0 + SLACK_S, f"the request ended {elapsed_s:.1f} s after it was sent"


def test_a_dripping_server_cannot_hold_the_sweep_past_its_time_limit() -> None:
    steps = drip(fake.head() + fake.chunk("a"), b": still here\n")  # comment lines: events that carry nothing
    with fake.scripted_server(lambda n: steps) as server:
        started = time.monotonic()
        with pytest.raises(RunFailed, match="time limit of 1.5 s"):
            sweep.run_sweep(config(server.base_url, timeout_s=60.0, time_limit_s=1.5, concurrency_levels=(2,)))
        elapsed_s = time.monotonic() - started
    assert elapsed_s < 1.5 + SLACK_S, f"the sweep ended {elapsed_s:.1f} s after it started"


# --- 2. a stream cut short is not an answer ----------------------------------------------------------------------
def test_a_stream_without_finish_reason_or_done_is_a_failure() -> None:
    cut = [fake.head(), fake.chunk("Hel"), fake.chunk("lo")]  # then the server closes
    with fake.scripted_server(lambda n: cut) as server, pytest.raises(RunFailed) as failed:
        sweep.run_sweep(config(server.base_url))
    assert "stream ended before the answer finished" in str(failed.value) and "\n" not in str(failed.value)
    # transformers serve sends a finish reason and no [DONE]: that is a whole answer
    with fake.scripted_server(lambda n: fake.answer("Hel", "lo", done=False)) as server:
        result = sweep.run_sweep(config(server.base_url))
    assert result.levels[0].records[0].ok and result.levels[0].records[0].text == "Hello"


# --- 3. a sweep keeps what finished -------------------------------------------------------------------------------
def data_line(text: str) -> bytes:
    """A chunk as one `data:` line with no blank line after it: a framing some servers use (their events merge)."""
    return fake.chunk(text).removesuffix(b"\n")


def http_chunked(*pieces: bytes, end: bool) -> list[fake.Step]:
    """The other HTTP body framing: Transfer-Encoding chunked, each piece one HTTP chunk; `end`: the last, empty,
    chunk that says the body is whole (left out, the server hung up mid-body)."""
    head = fake.head(extra="Transfer-Encoding: chunked\r\n")
    return [head, *(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces), *([b"0\r\n\r\n"] if end else [])]


NESTED = b"[" * 100_000 + b"]" * 100_000  # 200 KB, under the 1 MiB line limit, past Python's recursion limit
BAD_ANSWERS: dict[str, tuple[list[fake.Step], str]] = {  # what the server sends -> words of the one line said
    "HTTP 500": ([fake.head("500 Internal Server Error", "text/plain"), b"boom"], "(HTTP 500 Internal Server Error)"),
    "a 5 MB data line": ([fake.head(), b"data: " + b"x" * (5 << 20) + b"\n\n"], "a line of over 1 MiB"),
    "deeply nested JSON": ([fake.head(), b'data: {"choices": ' + NESTED + b"}\n\n"], "nested too deeply"),
    "choices as a dict": (
        [fake.head(), fake.event({"choices": {"0": {"delta": {"content": "a"}}}}), fake.event("[DONE]")],
        "streamed no output text",
    ),
    "cut: SSE events": ([fake.head(), fake.chunk("Hel"), fake.chunk("lo")], "stream ended before the answer finished"),
    "cut: data lines, no blank lines": (
        [fake.head(), data_line("Hel"), data_line("lo")],
        "stream ended before the answer finished",
    ),
    "cut: HTTP chunked, body unfinished": (
        http_chunked(fake.chunk("Hel"), fake.chunk("lo"), end=False),
        "closed the connection mid-answer",
    ),
    "cut: HTTP chunked, body whole": (
        http_chunked(fake.chunk("Hel"), fake.chunk("lo"), end=True),
        "stream ended before the answer finished",
    ),
}
TIMEOUT_S = 5.0  # each CLI sweep's request deadline: every test below ends within it plus SLACK_S


def remote_cli(server: fake.FakeServer, path: Path, *args: str) -> tuple[int, float]:
    """`python -m explorer remote` in-process against the fake server: (exit code, seconds it took)."""
    argv = ["remote", "--base-url", server.base_url, "--model", "m", "--timeout-s", f"{TIMEOUT_S:g}", *args]
    started = time.monotonic()
    code = main([*argv, "--json", str(path)])
    return code, time.monotonic() - started


@pytest.mark.parametrize("bad", list(BAD_ANSWERS))
def test_a_later_level_that_fails_keeps_the_first_marked_partial(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps, words = BAD_ANSWERS[bad]

    def script(n: int) -> list[fake.Step]:  # the warm-up and level 1's two requests answer; level 2 gets `bad`
        return fake.answer("a", "b") if n < 3 else steps

    path = tmp_path / "sweep.json"
    with fake.scripted_server(script) as server:
        code, elapsed_s = remote_cli(server, path, "--concurrency", "1,2", "--requests", "2")
    captured = capsys.readouterr()
    out, error = captured.out, error_line(captured.err)
    assert code == 1 and elapsed_s < TIMEOUT_S + SLACK_S
    assert "All 2 requests at concurrency 2 failed" in error and words in error and f"kept 1 level in {path}" in error
    data = json.loads(path.read_text())
    assert [level["concurrency"] for level in data["levels"]] == [1] and data["partial"] is True
    assert words in data["stopped"]
    assert "   1   2/2" in out and "partial: the sweep stopped early" in out  # the table says so too


@pytest.mark.parametrize("bad", list(BAD_ANSWERS))
def test_a_bad_first_answer_is_one_line_and_nothing_is_written(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps, words = BAD_ANSWERS[bad]
    path = tmp_path / "sweep.json"
    with fake.scripted_server(lambda n: steps) as server:
        code, elapsed_s = remote_cli(server, path)
    assert code == 1 and elapsed_s < TIMEOUT_S + SLACK_S
    assert words in one_line(capsys)
    assert not path.exists()  # the warm-up failed: nothing was measured, so no file claims otherwise


def test_the_time_limit_keeps_the_levels_that_finished(capsys: pytest.CaptureFixture[str]) -> None:
    def script(n: int) -> list[fake.Step]:  # level 1 answers at once; level 2 never finishes
        return fake.answer("a", "b") if n < 2 else drip(fake.head() + fake.chunk("a"), b": .\n")

    with fake.scripted_server(script) as server:
        result = sweep.run_sweep(config(server.base_url, concurrency_levels=(1, 2), warmup=True, time_limit_s=2.0))
    assert [level.concurrency for level in result.levels] == [1] and "time limit of 2 s" in result.stopped
    assert not result.interrupted and result.partial and json.loads(result.to_json())["partial"] is True


@pytest.mark.parametrize(("where", "words"), [("folder", "is a folder"), ("/proc/sweep.json", "Cannot write")])
def test_output_paths_are_checked_before_anything_is_sent(
    where: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path if where == "folder" else Path(where)
    with fake.scripted_server(lambda n: fake.answer("a")) as server:
        assert main(["remote", "--base-url", server.base_url, "--model", "m", "--json", str(path)]) == 2
        assert server.count() == 0
    assert words in one_line(capsys)


# --- 4. Ctrl-C ----------------------------------------------------------------------------------------------------
def ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "parent_ignores_ctrl_c",
    # A parent that ignores SIGINT (nohup, `cmd &`, a test worker) hands its child SIG_IGN across exec: the command
    # must still end on Ctrl-C (it hung for ever before it set its own handler).
    [False, True],
    ids=["parent-default", "parent-ignores-sigint"],
)
def test_ctrl_c_closes_open_streams_at_once_and_keeps_what_finished(
    tmp_path: Path, parent_ignores_ctrl_c: bool
) -> None:
    def script(n: int) -> list[fake.Step]:  # the warm-up and level 1's four answer; level 2's streams run on and on
        return fake.answer("a", "b") if n < 5 else drip(fake.head() + fake.chunk("a"), b": .\n")

    path = tmp_path / "sweep.json"
    with fake.scripted_server(script) as server:
        argv = ["--base-url", server.base_url, "--model", "m", "--concurrency", "1,2", "--requests", "4"]
        cmd = [sys.executable, "-m", "explorer", "remote", *argv, "--json", str(path)]
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ignore_ctrl_c if parent_ignores_ctrl_c else None,  # as the child of such a parent starts
        )
        try:
            deadline = time.monotonic() + 30
            while server.count() < 1 + 4 + 2 and time.monotonic() < deadline:  # level 2's first two are streaming
                time.sleep(0.05)
            time.sleep(0.3)
            interrupted_at = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
        ended_s = time.monotonic() - interrupted_at
        connections = server.count()
    assert proc.returncode == 130, err
    assert ended_s < SLACK_S, f"exited {ended_s:.1f} s after Ctrl-C"
    assert connections == 1 + 4 + 2  # nothing more was sent after Ctrl-C
    assert err.strip().splitlines()[-1].startswith("error: Interrupted (Ctrl-C)")
    assert "   1   4/4" in out  # the table, with level 1
    assert [level["concurrency"] for level in json.loads(path.read_text())["levels"]] == [1]


def test_ctrl_c_in_the_calling_thread_ends_a_level_at_once() -> None:
    """The same path in-process: KeyboardInterrupt raised in the thread that waits for the level's requests, as the
    signal handler raises it, once the first request has answered and while another streams on."""

    def script(n: int) -> list[fake.Step]:
        return fake.answer("a", "b") if n == 0 else drip(fake.head() + fake.chunk("a"), b": .\n")

    def progress(_fraction: float, text: str) -> None:
        if "answered" in text:
            raise KeyboardInterrupt

    with fake.scripted_server(script) as server:
        started = time.monotonic()
        two_at_a_time = config(server.base_url, concurrency_levels=(2,), requests_per_level=6)
        result = sweep.run_sweep(two_at_a_time, on_progress=progress)
        elapsed_s = time.monotonic() - started
        connections = server.count()
    assert elapsed_s < SLACK_S and connections <= 3  # the open stream closed at once; the queued ones never sent
    assert result.interrupted and result.stopped.startswith("Interrupted")
    level = result.levels[0]
    assert len(level.succeeded) == 1 and len(level.records) == 6
    assert all("interrupted" in r.error for r in level.records if not r.ok)


# --- 5. what a server says, read right ---------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["429 Too Many Requests", "503 Service Unavailable"])
def test_a_429_or_503_is_the_servers_failure_and_its_retry_after_is_honoured(
    status: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def busy(retry_after: str) -> list[fake.Step]:
        extra = f"Retry-After: {retry_after}\r\n" if retry_after else ""
        return [fake.head(status, "application/json", extra), b'{"error": {"message": "busy"}}']

    with fake.scripted_server(lambda n: busy("0.3") if n == 0 else fake.answer("a", "b")) as server:
        record = sweep.run_sweep(config(server.base_url)).levels[0].records[0]
    assert record.ok and record.ttft_s is not None and record.ttft_s >= 0.3  # TTFT counts from the first send
    code = status.split()[0]
    for retry_after, words in (("100", "retry after 100 s, past this request's deadline"), ("", "no Retry-After")):
        with fake.scripted_server(lambda n, r=retry_after: busy(r)) as server:
            started = time.monotonic()
            assert main(["remote", "--base-url", server.base_url, "--model", "m", "--timeout-s", "5"]) == 1
            assert time.monotonic() - started < SLACK_S  # refused at once: no wait past the deadline
            assert server.count() == 1  # refused once, not retried: the wait it asked for is past the deadline
        error = one_line(capsys)
        assert f"(HTTP {code})" in error and words in error and "busy" in error


def test_a_retry_after_past_the_sweeps_time_limit_is_refused_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Retry-After is honoured within the time limit, never past it: a wait that would outlast the sweep's limit
    (though not the request's own timeout) is not started."""
    busy = [fake.head("503 Service Unavailable", "application/json", "Retry-After: 3\r\n"), b'{"detail": "loading"}']
    with fake.scripted_server(lambda n: busy) as server:
        started = time.monotonic()
        argv = ["remote", "--base-url", server.base_url, "--model", "m", "--timeout-s", "30", "--time-limit-s", "1"]
        assert main(argv) == 1
        elapsed_s = time.monotonic() - started
        assert server.count() == 1
    error = one_line(capsys)
    assert elapsed_s < SLACK_S and "(HTTP 503)" in error and "retry after 3 s" in error and "loading" in error


def test_a_line_over_1_mib_is_too_large_not_json() -> None:
    huge = [fake.head(), b"data: " + b"x" * (2 << 20)]
    with fake.scripted_server(lambda n: huge) as server, pytest.raises(RunFailed, match="a line of over 1 MiB"):
        sweep.run_sweep(config(server.base_url))


def test_negative_usage_counts_are_treated_as_missing() -> None:
    usage = {"completion_tokens": -5, "prompt_tokens": -3}
    steps = [fake.head(), fake.chunk("a"), fake.chunk("b"), fake.chunk(finish="length", usage=usage)]
    with fake.scripted_server(lambda n: steps) as server:
        record = sweep.run_sweep(config(server.base_url)).levels[0].records[0]
    assert record.ok and (record.output_tokens, record.output_tokens_from) == (2, "chunks")
    assert record.prompt_tokens is None and record.tokens_per_s is not None and record.tokens_per_s > 0
