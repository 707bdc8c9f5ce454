"""`remote` against servers that send what no honest one would (issue 24), each on 127.0.0.1 (tests/fake_servers.py):
output far beyond max_tokens ends the request as the server's fault within the time limit and bounded memory, a
tokenizer included; usage that contradicts the request or what arrived is never a throughput; terminal escapes in
anything a server says never reach the terminal nor the JSON; the server's own error message is passed on in every
JSON shape (a 200 error body, an error event mid-stream); any charset or decoding error is one line."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from explorer.cli.main import main
from explorer.core.errors import ExplorerError, RunFailed
from explorer.models.loading import ensure_embedded_converted
from explorer.remote import answer, sweep, tokens, upload
from explorer.remote.endpoint import make_endpoint
from tests import fake_servers as fake
from tests.tiny import byte_tokenizer

ROOT = Path(__file__).resolve().parents[1]
ESCAPES = "\x1b]0;pwned title\x07\x1b[2J\x1b[31m\x9b2J\u202e"  # window title, clear screen, colour, C1 CSI, bidi
ESCAPE_CHARS = ("\x1b", "\x07", "\x9b", "\u202e")


def config(base_url: str, **kw: object) -> sweep.SweepConfig:
    values: dict[str, object] = dict(concurrency_levels=(1,), requests_per_level=1, warmup=False, max_tokens=4)
    values.update(kw)
    return sweep.SweepConfig(make_endpoint(base_url, "m"), **values)  # type: ignore[arg-type]


def cli(server: fake.FakeServer, *args: str) -> int:
    return main(["remote", "--base-url", server.base_url, "--model", "m", "--timeout-s", "10", *args])


def error_line(err: str) -> str:
    """The one error line on stderr, after progress lines only (no traceback, no 'unexpected failure')."""
    lines = err.strip().splitlines()
    assert [line for line in lines if not line.startswith("[")] == lines[-1:], lines
    assert lines[-1].startswith("error: ") and "nexpected failure" not in lines[-1]
    return lines[-1]


# --- 1. output far beyond max_tokens: the time limit and memory hold, a tokenizer included -----------------------
# The child's own peak is VmHWM, its address space's high-water mark: getrusage's ru_maxrss would also count the
# parent's resident memory at the fork (Linux keeps the larger across exec), and a test worker that has loaded real
# models holds well over 500 MB (1,734 MB was read that way in a full run, for a child that peaked near 110 MB).
RSS_SCRIPT = """
import sys
from explorer.cli.main import main
try:
    code = main(sys.argv[2:])
finally:
    with open("/proc/self/status") as status:
        peak_kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    open(sys.argv[1], "w").write(peak_kb)
sys.exit(code)
"""


@pytest.mark.slow  # two CLI processes, each loading the tokenizer (a few seconds apiece on a busy machine)
@pytest.mark.parametrize("warmup", [True, False])
def test_a_server_streaming_60_chunks_of_900_kb_is_flagged_within_the_time_limit_and_500_mb(
    warmup: bool, tmp_path: Path
) -> None:
    """The probe's server: 54 MB of output for max_tokens 32, then a normal finish. It kept `remote --tokenizer
    embedded --time-limit-s 15` running 71 s at 9.8 GB; the answer is now cut at its first chunk, as the server's
    fault, and nothing of it is tokenized."""
    ensure_embedded_converted()  # once per cache: the first conversion (torch, ~1 GB) is not what is measured here
    rss_path = tmp_path / "maxrss_kb"
    with fake.scripted_server(lambda n: fake.flood(60, 900_000)) as server:
        argv = ["remote", "--base-url", server.base_url, "--model", "m", "--tokenizer", "embedded"]
        argv += ["--time-limit-s", "15", "--max-tokens", "32", "--requests", "2", "--concurrency", "1,2"]
        argv += [] if warmup else ["--no-warmup"]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", RSS_SCRIPT, str(rss_path), *argv],
            cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        elapsed_s = time.monotonic() - started
    peak_mb = int(rss_path.read_text()) / 1024
    error = error_line(done.stderr)
    assert done.returncode == 1, done.stderr
    assert elapsed_s < 20, f"remote ran {elapsed_s:.1f} s against a time limit of 15 s"
    assert peak_mb < 500, f"remote peaked at {peak_mb:.0f} MB"
    max_tokens = 4 if warmup else 32  # the warm-up asks for 4
    assert f"of output for max_tokens {max_tokens}, far beyond what {max_tokens} tokens hold" in error
    assert "ignores max_tokens" in error and "tok/s" not in done.stdout


def test_many_small_chunks_beyond_max_tokens_are_cut_where_they_pass_the_bound() -> None:
    flood = [fake.head(), *(fake.chunk("a") for _ in range(500)), fake.chunk(finish="length")]
    with fake.scripted_server(lambda n: flood) as server, pytest.raises(RunFailed) as failed:
        sweep.run_sweep(config(server.base_url, max_tokens=4))
    bound = answer.AnswerBounds(4, 0).tokens
    assert f"streamed {bound + 1} chunks of output for max_tokens 4" in str(failed.value)


def test_an_answer_within_its_bounds_is_measured() -> None:
    """Twice max_tokens is the bound, not max_tokens: a server counting a token or two differently is not refused."""
    steps = fake.answer(*["word "] * 8)  # 8 chunks for max_tokens 4: within 2 x 4
    with fake.scripted_server(lambda n: steps) as server:
        result = sweep.run_sweep(config(server.base_url))
    record = result.levels[0].records[0]
    assert record.ok and record.output_tokens == 8
    # what remote keeps is what an uploaded sweep may hold: the file it writes at the bound opens on the page
    assert upload.read_sweep(result.to_json().encode(), upload.UploadLimits.for_server(hosted=True)) == result


def test_a_local_tokenizer_counting_far_beyond_max_tokens_is_refused() -> None:
    """Within the characters' bound, but the byte tokenizer counts 12 tokens for max_tokens 4: no throughput."""
    counter = tokens.tokenizer_chunk_counter(byte_tokenizer(None).backend_tokenizer)
    with fake.scripted_server(lambda n: fake.answer("abcdef", "ghijkl")) as server, pytest.raises(RunFailed) as failed:
        sweep.run_sweep(config(server.base_url), counter=counter)
    assert "counted as 12 tokens (by tokenizer) for max_tokens 4, far beyond it" in str(failed.value)


def test_a_tokenizer_is_not_waited_for_past_the_time_limit() -> None:
    """The tokenizer is shared by a level's threads: one that waited for it past the deadline counts nothing."""
    counted: list[int] = []

    def slow_counter(texts: object, check: object) -> list[int]:  # another thread holds the tokenizer for 1.5 s
        time.sleep(1.5)
        check()  # type: ignore[operator]
        counted.append(1)
        return [1]

    with fake.scripted_server(lambda n: fake.answer("a")) as server:
        with pytest.raises(RunFailed, match="time limit of 1 s"):
            sweep.run_sweep(config(server.base_url, time_limit_s=1.0), counter=slow_counter)
    assert counted == []


def test_the_tokenizer_counter_checks_the_deadline_before_it_tokenizes() -> None:
    tokenizer = byte_tokenizer(None).backend_tokenizer
    counter = tokens.tokenizer_chunk_counter(tokenizer)
    assert counter(["ab", "c"], lambda: None) == [2, 1]

    def ended() -> None:
        raise RunFailed("the deadline passed")

    with mock.patch.object(type(tokenizer), "encode") as encode, pytest.raises(RunFailed, match="deadline passed"):
        counter(["ab"], ended)
    encode.assert_not_called()


# --- 2. usage that contradicts the request or what arrived --------------------------------------------------------
@pytest.mark.parametrize(
    ("usage", "words"),
    [
        ({"completion_tokens": 10**30}, "completion_tokens of 31 digits for max_tokens 4"),
        ({"completion_tokens": 9}, "completion_tokens 9 for max_tokens 4"),  # past 2 x 4
        ({"completion_tokens": 0}, "completion_tokens 0 after streaming 3 chunks of text"),
        ({"completion_tokens": 2, "prompt_tokens": 10**30}, "prompt_tokens of 31 digits for a prompt of"),
    ],
)
def test_usage_that_contradicts_the_request_or_what_arrived_is_never_a_throughput(
    usage: dict[str, int], words: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    steps = [fake.head(), *(fake.chunk(t) for t in ("a", "b", "c")), fake.chunk(finish="length", usage=usage)]
    path = tmp_path / "sweep.json"
    with fake.scripted_server(lambda n: steps) as server:
        assert cli(server, "--max-tokens", "4", "--json", str(path)) == 1
    captured = capfd.readouterr()
    error = error_line(captured.err)
    assert words in error and "the server's fault, not a throughput" in error
    assert "e+" not in captured.out and "e32" not in captured.out  # no 2.3e32 tok/s anywhere
    assert not path.exists()  # the warm-up failed: nothing measured


def test_a_contradicting_request_in_a_level_is_a_failed_request_not_a_rate() -> None:
    def script(n: int) -> list[fake.Step]:  # the second request's usage says 10**30
        usage = {"completion_tokens": 10**30 if n == 1 else 2}
        return [fake.head(), fake.chunk("a"), fake.chunk("b"), fake.chunk(finish="length", usage=usage)]

    with fake.scripted_server(script) as server:
        level = sweep.run_sweep(config(server.base_url, requests_per_level=2)).levels[0]
    assert [r.ok for r in level.records] == [True, False] and "31 digits" in level.records[1].error
    assert level.output_tokens == 2 and level.total_output_tokens_per_s is not None
    assert level.total_output_tokens_per_s < 1e6


# --- 3. terminal escapes ----------------------------------------------------------------------------------------
def escaping_stream() -> list[fake.Step]:
    usage = {"completion_tokens": 2, "prompt_tokens": 5}
    return [
        fake.head(),
        fake.chunk(f"a{ESCAPES}\n"),
        fake.chunk(f"b{ESCAPES}"),
        fake.event({"choices": [{"delta": {}, "finish_reason": f"length{ESCAPES}"}], "usage": usage}),
        fake.event("[DONE]"),
    ]


ESCAPING_ANSWERS: dict[str, list[fake.Step]] = {
    "HTTP 400 error message": fake.json_body("400 Bad Request", {"error": {"message": f"no {ESCAPES} way"}}),
    "HTTP 500 text body": fake.json_body("500 Internal Server Error", f"boom {ESCAPES}".encode(), "text/plain"),
    "vLLM error mid-stream": [fake.head(), fake.chunk("a"), fake.event({"object": "error", "message": ESCAPES})],
    "content type": fake.json_body("200 OK", {"choices": []}, f"text/html{ESCAPES}"),
    "no text, finish reason": [fake.head(), fake.chunk(finish=f"stop{ESCAPES}"), fake.event("[DONE]")],
    "a whole answer": escaping_stream(),
}


@pytest.mark.parametrize("where", list(ESCAPING_ANSWERS))
def test_terminal_escapes_from_a_server_never_reach_the_terminal_nor_the_json(
    where: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sweep.json"
    with fake.scripted_server(lambda n: ESCAPING_ANSWERS[where]) as server:
        code = cli(server, "--concurrency", "1", "--requests", "1", "--json", str(path))
    captured = capfd.readouterr()
    said = (captured.out + captured.err).encode()
    assert all(char.encode() not in said for char in ESCAPE_CHARS), said
    if where == "a whole answer":
        assert code == 0
        record = json.loads(path.read_text())["levels"][0]["records"][0]
        assert record["text"] == "a]0;pwned title[2J[31m2J\nb]0;pwned title[2J[31m2J"  # the line break kept
        assert record["finish_reason"] == "length ]0;pwned title [2J [31m 2J"
    else:
        assert code in (1, 2) and "]0" in error_line(captured.err)  # the server's words, without their escapes


# --- 4. the server's own error message, whatever shape carries it -------------------------------------------------
def mid_stream(error: bytes) -> list[fake.Step]:
    return [fake.head(), fake.chunk("a"), error]


SERVER_ERRORS: dict[str, list[fake.Step]] = {  # each carries the message "M-" + its shape's name
    "openai-400": fake.json_body("400 Bad Request", {"error": {"message": "M-openai-400", "type": "x"}}),
    "vllm-400": fake.json_body("400 Bad Request", {"object": "error", "message": "M-vllm-400", "code": 400}),
    "fastapi-422": fake.json_body(
        "422 Unprocessable Entity", {"detail": [{"loc": ["body", "x"], "msg": "M-fastapi-422", "type": "t"}]}
    ),
    "detail-500": fake.json_body("500 Internal Server Error", {"detail": "M-detail-500"}),
    "openai-200-json": fake.json_body("200 OK", {"error": {"message": "M-openai-200-json"}}),
    "vllm-200-json": fake.json_body("200 OK", {"object": "error", "message": "M-vllm-200-json"}),
    "json-as-the-stream": fake.json_body("200 OK", {"error": "M-json-as-the-stream"}, "text/event-stream"),
    "vllm-mid-stream": mid_stream(fake.event({"object": "error", "message": "M-vllm-mid-stream"})),
    "tgi-mid-stream": mid_stream(fake.event({"error": "M-tgi-mid-stream", "error_type": "generation"})),
    "error-event": mid_stream(b'event: error\ndata: {"message": "M-error-event"}\n\n'),
    "text-error-event": mid_stream(b"event: error\ndata: M-text-error-event\n\n"),
}


@pytest.mark.parametrize("shape", list(SERVER_ERRORS))
def test_the_servers_own_error_message_is_passed_on_in_every_shape(shape: str) -> None:
    steps, message = SERVER_ERRORS[shape], f"M-{shape}"
    with fake.scripted_server(lambda n: steps) as server, pytest.raises(ExplorerError) as failed:
        sweep.run_sweep(config(server.base_url))
    said = str(failed.value)
    assert message in said and "stream ended before" not in said and "\n" not in said


# --- 5. charsets and decoding -----------------------------------------------------------------------------------
def test_a_stream_is_read_as_utf8_whatever_charset_it_names() -> None:
    """The SSE standard: event streams are UTF-8. A server that names utf-16 (or a charset no one knows) and sends
    UTF-8 is read; bytes that are not UTF-8 are replaced, never an exception."""
    for charset in ("utf-16", "no-such-charset", "utf-8"):
        steps = [fake.head(content_type=f"text/event-stream; charset={charset}"), *fake.answer("é", "b")[1:]]
        with fake.scripted_server(lambda n, s=steps: s) as server:
            record = sweep.run_sweep(config(server.base_url)).levels[0].records[0]
        assert record.ok and record.text == "éb", charset
    broken = [fake.head(), b'data: {"choices": [{"delta": {"content": "a\xff\xfe"}}]}\n\n', *fake.answer("b")[1:]]
    with fake.scripted_server(lambda n: broken) as server:
        assert sweep.run_sweep(config(server.base_url)).levels[0].records[0].text == "a\ufffd\ufffdb"


DECODING_FAULTS: dict[str, tuple[list[fake.Step], str]] = {
    "utf-16 error body": (
        fake.json_body("400 Bad Request", b'{"error": {"message": "M-16"}}', "application/json; charset=utf-16"),
        "M-16",
    ),
    "UTF-16 bytes as the stream": (
        [fake.head(content_type="text/event-stream; charset=utf-16"), 'data: {"a": 1}\n\n'.encode("utf-16")],
        "sent no server-sent event",
    ),
    "gzip that is not": (
        [fake.head(extra="Content-Encoding: gzip\r\n"), b"not gzip at all"],
        "sent a body that cannot be decoded",
    ),
    "gzip cut short": (
        [fake.head(extra="Content-Encoding: gzip\r\n"), gzip.compress(b"".join(fake.answer("a")[1:]))[:30]],
        "",  # zlib may see the cut as an unfinished stream or as a cut: either is one line
    ),
}


@pytest.mark.parametrize("fault", list(DECODING_FAULTS))
def test_any_charset_or_decoding_error_is_one_line(fault: str, capfd: pytest.CaptureFixture[str]) -> None:
    steps, words = DECODING_FAULTS[fault]
    with fake.scripted_server(lambda n: steps) as server:
        assert cli(server) in (1, 2)
    assert words in error_line(capfd.readouterr().err)
