"""The remote measurement: its pure rules by hand, its one-line errors against real sockets, and a real engine
(`transformers serve` with continuous batching, on loopback, the embedded model) measured at concurrency 1 and 4,
through the CLI, the API and the Endpoint page (AppTest and a real browser)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

import httpx
import numpy as np
import pytest

from explorer.charts import latency
from explorer.cli.main import main
from explorer.core import slo
from explorer.core.errors import BadInput, RunFailed
from explorer.hosting import settings
from explorer.remote import answer, deadlines, endpoint, records, sweep, tokens, wire
from explorer.ui import state as ui_state
from tests import fake_servers as fake
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.browser_support import listens_on
from tests.tiny import byte_tokenizer

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
SERVER_START_TIMEOUT_S = 300  # model load on a busy 2-core machine
SWEEP_MAX_TOKENS = "8"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def record(
    arrivals: tuple[float, ...], chunk_tokens: tuple[int, ...], ttft_s: float | None = None, **kw
) -> records.RequestRecord:
    values = dict(
        index=0,
        start_s=0.0,
        ttft_s=arrivals[0] if ttft_s is None else ttft_s,
        e2e_s=arrivals[-1],
        chunk_arrivals_s=arrivals,
        chunk_tokens=chunk_tokens,
        output_tokens=sum(chunk_tokens),
        output_tokens_from="usage",
        chunk_tokens_from="chunks",
        prompt_tokens=10,
        finish_reason="length",
        text="x" * len(arrivals),
    )
    values.update(kw)
    return records.RequestRecord(**values)


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ""
    return lines[0]


# --- pure rules --------------------------------------------------------------------------------------------------
def test_base_urls_are_normalized() -> None:
    assert endpoint.parse_base_url("HTTP://LocalHost:8000/v1/").normalized == "http://localhost:8000/v1"
    assert endpoint.parse_base_url("http://h:80/v1").normalized == "http://h/v1"
    assert endpoint.parse_base_url("https://h/v1").port == 443
    assert endpoint.make_endpoint("http://h:8000/v1", " m ", "completions").url == "http://h:8000/v1/completions"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("", "empty"),
        ("ftp://h/v1", "http(s)"),
        ("localhost:8000/v1", "http(s)"),
        ("http://", "http(s)"),
        ("http://h:99999/v1", "not a valid URL"),
        ("http://user:secret@h/v1", "no credentials"),
        ("http://h/v1?x=1", "no query"),
        ("http://h:8000/v1/chat/completions", "'http://h:8000/v1'"),
    ],
)
def test_bad_base_urls_are_one_line(url: str, words: str) -> None:
    with pytest.raises(BadInput) as error:
        endpoint.parse_base_url(url)
    assert words in str(error.value) and "\n" not in str(error.value)
    assert "secret" not in str(error.value)


def test_hosted_mode_allows_only_listed_endpoints() -> None:
    settings.EndpointPolicy(hosted=False).check("http://anywhere:1/v1")
    with pytest.raises(BadInput, match=settings.ALLOWED_ENDPOINTS_ENV):
        settings.EndpointPolicy(hosted=True).check("http://127.0.0.1:8000/v1")
    policy = settings.EndpointPolicy.from_env(
        {settings.HOSTED_ENV: "1", settings.ALLOWED_ENDPOINTS_ENV: "http://LOCALHOST:8000/v1/, not a url, http://g/v1"}
    )
    assert policy.allowed == ("http://localhost:8000/v1", "http://g/v1")  # the typo opens nothing
    policy.check("http://localhost:8000/v1")
    with pytest.raises(BadInput, match="only measures these endpoints: http://localhost:8000/v1, http://g/v1"):
        policy.check("http://169.254.169.254/v1")
    assert not settings.EndpointPolicy.from_env({settings.HOSTED_ENV: "0"}).hosted
    with pytest.raises(BadInput):
        settings.check_endpoint_allowed("http://x/v1", {settings.HOSTED_ENV: "true"})


def test_hosted_mode_caps_a_sweep() -> None:
    policy = settings.EndpointPolicy(hosted=True, allowed=("http://h/v1",))
    policy.check_limits((1, 16), 64, 512)
    for levels, requests, max_tokens in (((1, 17), 8, 32), ((1,), 65, 32), ((1,), 8, 513)):
        with pytest.raises(BadInput, match="caps a sweep"):
            policy.check_limits(levels, requests, max_tokens)
    settings.EndpointPolicy().check_limits((256,), 1000, 4096)  # local use stays free


def stream_from(base_url: str, timeout_s: float = 10.0) -> answer.Stream:
    """One request through the wire alone, as a sweep sends it: its own client, a watchdog keeping its deadline."""
    request = wire.StreamRequest(endpoint.make_endpoint(base_url, "m"), "hi", 4, timeout_s=timeout_s)
    with deadlines.Watchdog(deadlines.Deadline.after(60)) as watchdog, wire.open_client(1, timeout_s) as client:
        call = watchdog.open(timeout_s)
        try:
            return wire.stream_once(request, client, call)
        finally:
            watchdog.close(call)


def test_server_sent_events_are_read_chunk_by_chunk() -> None:
    events = (
        b": a comment, as servers send for keep-alive\n\n"
        b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
        b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n'  # no blank line: still two events
        b'data: {"choices": [{"delta": {"content": "lo"}, "finish_reason": null}]}\n\n'
        b"event: ignored\n"
        b'data: {"choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"completion_tokens": 2, '
        b'"prompt_tokens": 9}}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"choices": [{"delta": {"content": "after done"}}]}\n\n'
    )
    with fake.scripted_server(lambda n: [fake.head(), events]) as server:
        parsed = stream_from(server.base_url)
    assert parsed.texts == ("Hel", "lo") and len(parsed.arrivals_s) == 2
    assert (parsed.completion_tokens, parsed.prompt_tokens, parsed.finish_reason) == (2, 9, "length")


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        (b"data: {oops\n\n", BadInput, "not JSON"),
        (b'data: {"error": {"message": "overloaded"}}\n\n', RunFailed, "error mid-stream: overloaded"),
        (b"data: [DONE]\n\n", RunFailed, "no output text"),
    ],
)
def test_a_bad_stream_is_one_line(body: bytes, error: type[Exception], words: str) -> None:
    with fake.scripted_server(lambda n: [fake.head(), body]) as server, pytest.raises(error, match=words) as raised:
        stream_from(server.base_url)
    assert "\n" not in str(raised.value)


def test_run_sweep_refuses_an_unlisted_endpoint_before_sending_anything() -> None:
    config = sweep.SweepConfig(endpoint.make_endpoint("http://127.0.0.1:9/v1", "m"))
    with mock.patch.object(httpx.Client, "send") as sent, pytest.raises(BadInput, match="only measures"):
        sweep.run_sweep(config, policy=settings.EndpointPolicy(True, ("http://127.0.0.1:8000/v1",)))
    sent.assert_not_called()


def test_itl_is_per_token_with_a_chunk_gap_shared_by_its_tokens() -> None:
    # chunks at 100, 150 and 300 ms with 1, 1 and 3 tokens: one 50 ms gap, then 150 ms over 3 tokens
    assert records.per_token_itls((0.100, 0.150, 0.300), (1, 1, 3)) == pytest.approx((0.05, 0.05, 0.05, 0.05))
    # extra tokens of the first chunk arrive with the first token: no gap for them
    assert records.per_token_itls((0.1, 0.3), (3, 1)) == pytest.approx((0.2,))
    # a chunk counted as 0 tokens keeps the clock: its wait rolls into the next chunk's tokens
    assert records.per_token_itls((0.0, 0.1, 0.3), (1, 0, 2)) == pytest.approx((0.15, 0.15))
    assert records.per_token_itls((0.2,), (1,)) == ()


def test_a_request_mean_itl_is_aiperfs_itl_and_vllms_tpot() -> None:
    r = record((0.2, 0.25, 0.4), (1, 1, 3))
    assert r.ttft_s == 0.2 and r.e2e_s == 0.4 and r.output_tokens == 5
    assert r.tpot_s == pytest.approx((0.4 - 0.2) / 4)
    assert np.mean(r.itl_s) == pytest.approx(r.tpot_s)
    assert r.tokens_per_s == pytest.approx(5 / 0.4)


def test_slos_are_strict_and_a_one_token_request_has_no_itl_to_miss() -> None:
    r = record((0.5, 0.55, 0.60), (1, 1, 1))  # TTFT 500 ms, ITLs 50 ms
    assert r.meets_slos(0.6, 0.051) and not r.meets_slos(0.5, 0.051) and not r.meets_slos(0.6, 0.05)
    assert record((0.5,), (1,)).meets_slos(0.6, 0.001)
    assert not record((0.5,), (1,), error="boom").meets_slos(10, 10)


def test_a_level_pools_every_requests_ttft_and_itls() -> None:
    a = record((0.1, 0.2, 0.4), (1, 1, 1), index=0)
    b = record((0.3, 0.35), (1, 1), index=1)
    failed = records.RequestRecord(2, 0.0, None, None, (), (), 0, "chunks", "chunks", None, None, "", "refused")
    level = records.LevelResult(concurrency=2, wall_s=2.0, records=(a, b, failed))
    assert level.failed == 1 and level.ttfts_s == (0.1, 0.3)
    assert level.itls_s == pytest.approx((0.1, 0.2, 0.05))
    assert level.itl_percentile_s(50) == pytest.approx(0.1)
    assert level.ttft_percentile_s(90) == pytest.approx(float(np.percentile([0.1, 0.3], 90)))
    assert level.total_output_tokens_per_s == pytest.approx(5 / 2.0)
    assert level.total_tokens_per_s == pytest.approx((5 + 20) / 2.0)
    assert level.goodput(ttft_slo_s=0.2, itl_slo_s=1.0) == 1  # only a: b's TTFT is 300 ms; the failure never counts
    summary = level.summary(0.2, 1.0)
    assert summary.goodput_fraction == pytest.approx(1 / 3) and summary.succeeded == 2


def sweep_of(levels: tuple[records.LevelResult, ...]) -> records.SweepResult:
    return records.SweepResult(
        endpoint=endpoint.make_endpoint("http://127.0.0.1:8000/v1", "some/model"),
        prompt="Hello",
        max_tokens=3,
        requests_per_level=2,
        ttft_slo_s=1.0,
        itl_slo_s=0.05,
        levels=levels,
        warmup=record((1.5, 1.6), (1, 1), index=-1),
        created_at="2026-01-01T00:00:00+00:00",
    )


def test_a_sweep_round_trips_through_json_with_its_summaries() -> None:
    level = records.LevelResult(1, 1.0, (record((0.1, 0.2, 0.4), (1, 1, 1)), record((0.3, 0.35), (2, 1), index=1)))
    result = sweep_of((level,))
    data = json.loads(result.to_json())
    assert data["levels"][0]["summary"]["itl_p50_s"] == pytest.approx(level.itl_percentile_s(50))
    assert data["levels"][0]["records"][1]["summary"]["itl_s"] == pytest.approx([0.05])
    assert records.SweepResult.from_json(result.to_json()) == result


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a remote sweep"),
        ('{"schema": 99}', "schema"),
        ('{"schema": 1}', "damaged"),
    ],
)
def test_a_damaged_sweep_file_is_one_line(text: str, words: str) -> None:
    with pytest.raises(BadInput, match=words):
        records.SweepResult.from_json(text)


def test_tokens_come_from_usage_then_tokenizer_then_chunks() -> None:
    stream = answer.Stream((0.1, 0.2, 0.3), ("ab", "c", "de"), (None, None, None), 6, 12, "stop")
    assert tokens.count_tokens(stream, None) == ([1, 1, 1], "chunks", 6, "usage")  # the EOS token is in usage only
    counter = tokens.tokenizer_chunk_counter(byte_tokenizer(None).backend_tokenizer)  # one token per byte
    assert tokens.count_tokens(stream, counter) == ([2, 1, 2], "tokenizer", 6, "usage")
    no_usage = answer.Stream((0.1, 0.2), ("ab", "c"), (None, None), None, None, None)
    assert tokens.count_tokens(no_usage, counter) == ([2, 1], "tokenizer", 3, "tokenizer")
    assert tokens.count_tokens(no_usage, None) == ([1, 1], "chunks", 2, "chunks")
    continuous = answer.Stream((0.1, 0.2), ("ab", "cde"), (1, 4), 4, 12, "stop")  # vLLM's continuous usage stats
    assert tokens.count_tokens(continuous, counter) == ([1, 3], "usage", 4, "usage")


def test_levels_parse_and_the_slo_defaults_are_the_latency_pages() -> None:
    assert sweep.parse_levels("4, 1,4") == (1, 4)
    for bad in ("", "1,x", "1.5"):
        with pytest.raises(BadInput):
            sweep.parse_levels(bad)
    assert (sweep.DEFAULT_TTFT_SLO_S, sweep.DEFAULT_ITL_SLO_S) == (
        latency.DEFAULT_TTFT_SLO_S,
        latency.DEFAULT_ITL_SLO_S,
    )
    with pytest.raises(BadInput, match="Concurrency levels"):
        sweep.SweepConfig(endpoint.make_endpoint("http://h/v1", "m"), concurrency_levels=(0,)).validate()


def test_the_api_key_is_sent_but_never_shown_or_stored() -> None:
    request = wire.StreamRequest(endpoint.make_endpoint("http://h/v1", "m"), "hi", 4, api_key="sk-secret")
    assert request.headers()["Authorization"] == "Bearer sk-secret"
    assert "sk-secret" not in repr(request)
    assert json.loads(request.body())["stream_options"] == {"include_usage": True}
    assert settings.api_key_from_env("KEY", {"KEY": "k"}) == "k"
    with pytest.raises(BadInput, match="KEY"):
        settings.api_key_from_env("KEY", {})


# --- one-line errors against real sockets ------------------------------------------------------------------------
@contextlib.contextmanager
def stdlib_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A loopback HTTP server in a thread, shut down on exit; yields its /v1 base URL."""
    server = ThreadingHTTPServer((HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class JsonOnly(BaseHTTPRequestHandler):
    """A server that ignores stream=true on /v1/chat/completions and 404s everything else."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/chat/completions":
            self.send_error(404, "Not Found")
            return
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_refused_connection_exits_2_with_one_line() -> None:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "explorer", "remote", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    elapsed_s = time.perf_counter() - started  # the process's whole life: a user waits for all of it
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: Nothing is listening at 127.0.0.1:9 (connection refused): start the server or fix the URL."
    ]
    assert elapsed_s < 5.0, f"refused connection answered after {elapsed_s:.1f} s"


def test_a_bad_url_or_host_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["remote", "--base-url", "ftp://127.0.0.1/v1", "--model", "m"]) == 2
    assert "http(s)" in one_line_error(capsys)
    assert main(["remote", "--base-url", "http://no-such-host.invalid/v1", "--model", "m"]) == 2
    assert "Cannot resolve host 'no-such-host.invalid'" in one_line_error(capsys)


def test_a_non_streaming_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with stdlib_server(JsonOnly) as base_url:
        assert main(["remote", "--base-url", base_url, "--model", "m"]) == 2
        assert "answered with application/json, not a stream" in one_line_error(capsys)
        assert main(["remote", "--base-url", base_url, "--model", "m", "--api", "completions"]) == 2
        assert "is not an OpenAI-compatible completions API (HTTP 404" in one_line_error(capsys)


def test_a_silent_server_times_out_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind((HOST, 0))
        silent.listen(8)
        base_url = f"http://{HOST}:{silent.getsockname()[1]}/v1"
        assert main(["remote", "--base-url", base_url, "--model", "m", "--timeout-s", "0.5"]) == 1
        assert "No answer from" in one_line_error(capsys)


# --- a real engine -----------------------------------------------------------------------------------------------
SERVING_MISSING = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


@dataclass(frozen=True)
class Engine:
    base_url: str
    model: str  # the name the server answers to: the folder it was started with
    log: Path


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """`transformers serve` on a free loopback port with the embedded model and continuous batching; always stopped.

    The paged KV cache is kept small (64 blocks of 32 tokens): its default on this CPU build reserved ~6 GB of RSS.
    """
    if SERVING_MISSING:
        pytest.skip(f"transformers serve needs {', '.join(SERVING_MISSING)}: pip install the dev requirements")
    from explorer.models.loading import ensure_embedded_converted

    folder = str(ensure_embedded_converted())
    port = free_port()
    log = tmp_path_factory.mktemp("transformers-serve") / "server.log"
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", folder, "--continuous-batching"]
    cmd += ["--cb-block-size", "32", "--cb-num-blocks", "64", "--cb-max-batch-tokens", "512"]
    cmd += ["--host", HOST, "--port", str(port), "--device", "cpu"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    root = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not (_healthy(root) and listens_on(proc, port)):  # not another run's server on the same port
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"transformers serve not healthy after {SERVER_START_TIMEOUT_S} s: {log.read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield Engine(f"{root}/v1", folder, log)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def recorded(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's command: concurrency 1 and 4, 8 requests each, written as JSON."""
    path = tmp_path_factory.mktemp("remote") / "r.json"
    argv = ["remote", "--base-url", engine.base_url, "--model", engine.model, "--prompt", "Hello"]
    argv += ["--concurrency", "1,4", "--requests", "8", "--max-tokens", SWEEP_MAX_TOKENS, "--json", str(path)]
    assert main(argv) == 0
    return path


@pytest.mark.server
@pytest.mark.slow  # the engine's start and the recorded sweep (~15 s) fall on the first of these tests
def test_a_real_engine_measured_at_concurrency_1_and_4(recorded: Path, engine: Engine) -> None:
    data = json.loads(recorded.read_text())
    assert data["endpoint"] == {"base_url": engine.base_url, "model": engine.model, "api": "chat"}
    assert [level["concurrency"] for level in data["levels"]] == [1, 4]
    result = records.SweepResult.from_json(recorded.read_text())
    for level, level_data in zip(result.levels, data["levels"]):
        summary = level_data["summary"]
        for key in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s"):
            assert summary[key] > 0, key
        assert summary["total_output_tokens_per_s"] > 0 and summary["succeeded"] == 8
        assert len(level_data["records"]) == 8
        for r in level.records:
            assert r.ok and r.output_tokens_from == "usage" and 1 <= r.output_tokens <= int(SWEEP_MAX_TOKENS)
            assert r.prompt_tokens and r.prompt_tokens > 1  # the chat template wraps "Hello"
            assert list(r.chunk_arrivals_s) == sorted(r.chunk_arrivals_s) and r.ttft_s == r.chunk_arrivals_s[0]
            assert len(r.itl_s) == sum(r.chunk_tokens) - r.chunk_tokens[0]
    assert result.warmup is not None and result.warmup.ok  # sent first, kept apart

    def overlaps(level: records.LevelResult) -> bool:
        spans = [(r.start_s, r.start_s + (r.e2e_s or 0)) for r in level.records]
        return any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :])

    assert not overlaps(result.level(1))  # one in flight: each request starts after the previous one answered
    assert overlaps(result.level(4))  # four in flight: the engine batched requests that overlap in time


@pytest.mark.server
@pytest.mark.slow
def test_the_completions_api_and_a_local_tokenizer(engine: Engine) -> None:
    config = sweep.SweepConfig(
        endpoint.make_endpoint(engine.base_url, engine.model, "completions"),
        prompt="The sky is",
        max_tokens=6,
        concurrency_levels=(2,),
        requests_per_level=2,
        warmup=False,
    )
    result = sweep.run_sweep(config, counter=tokens.load_chunk_counter("embedded"))
    for r in result.level(2).records:
        assert r.ok and r.chunk_tokens_from == "tokenizer" and r.output_tokens_from == "usage"
        assert abs(sum(r.chunk_tokens) - r.output_tokens) <= 1, (r.chunk_tokens, r.output_tokens, r.text)


@pytest.mark.server
@pytest.mark.slow
def test_a_wrong_model_name_is_one_line(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["remote", "--base-url", engine.base_url, "--model", "no-such/model"]) == 2
    message = one_line_error(capsys)
    assert "does not serve model 'no-such/model' (HTTP 400)" in message


@pytest.mark.server
@pytest.mark.slow
def test_the_endpoint_page_renders_the_recorded_sweep(recorded: Path) -> None:
    at = endpoint_page()
    at.get("file_uploader")[0].set_value(("r.json", recorded.read_bytes(), "application/json")).run()
    assert_renders(at)
    assert [int(c) for c in at.dataframe[0].value["concurrency"]] == [1, 4]


# --- the Endpoint page -------------------------------------------------------------------------------------------
def endpoint_page():
    at = open_page("pages/endpoint.py")
    assert any("No sweep yet" in i.value for i in at.info)
    return at


def assert_renders(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("vega_lite_chart")) == 3  # percentiles, trade-off, throughput against speed per user
    assert any(records.ITL_RULE in m.value for m in at.markdown)  # the rule, on screen (in its expander)
    assert any("measured" in c.value for c in at.caption)


def synthetic_sweep_json() -> bytes:
    slow = record((0.2, 0.26, 0.33), (1, 1, 1), index=1)
    fast = record((0.1, 0.12, 0.14), (1, 1, 1))
    levels = (records.LevelResult(1, 1.0, (fast, slow)), records.LevelResult(2, 0.5, (fast, slow)))
    return sweep_of(levels).to_json().encode()


def test_the_page_renders_a_json_and_rereads_it_against_new_slos(tiny_lm) -> None:
    from explorer.core.engine import Request
    from explorer.core.measure import measure

    at = endpoint_page()
    local = measure(tiny_lm, Request(prompt="hi", max_new_tokens=3))
    at.session_state[ui_state.RUN] = ui_state.RunResult(local, None, "", "run 1: hi")  # as if the sidebar had run it
    at.get("file_uploader")[0].set_value(("sweep.json", synthetic_sweep_json(), "application/json")).run()
    assert_renders(at)
    beside = at.dataframe[-1].value
    assert beside["where"].iloc[0].startswith("local instrumented run")
    assert beside["TTFT p50 (ms)"].iloc[0] == pytest.approx(local.ttft_s * 1e3, rel=1e-3)  # shown to 4 digits
    shown = at.session_state["endpoint_result"]
    # One pair of SLOs for every page: until set, the session's defaults, chosen from its run (the local one here).
    defaults = slo.from_trace(local)
    slo_inputs = {n.label: n for n in at.number_input if n.label in ("TTFT SLO (ms)", "ITL SLO (ms)")}
    assert slo_inputs["TTFT SLO (ms)"].value == pytest.approx(defaults.ttft_s * 1e3)
    assert slo_inputs["ITL SLO (ms)"].value == pytest.approx(defaults.itl_s * 1e3)
    slo_inputs["TTFT SLO (ms)"].set_value(1000.0).run()
    next(n for n in at.number_input if n.label == "ITL SLO (ms)").set_value(100.0).run()
    assert list(at.dataframe[0].value["goodput requests"]) == [2, 2]  # the slow request's 70 ms gap meets 100 ms
    next(n for n in at.number_input if n.label == "ITL SLO (ms)").set_value(50.0).run()
    assert list(at.dataframe[0].value["goodput requests"]) == [1, 1]  # the slow request's 70 ms gap misses 50 ms
    next(n for n in at.number_input if n.label == "ITL SLO (ms)").set_value(100.0).run()  # the Latency page's SLOs
    assert list(at.dataframe[0].value["goodput requests"]) == [2, 2]
    assert at.session_state["endpoint_result"] is shown  # re-read, never re-measured


def test_the_page_says_in_one_line_what_is_wrong() -> None:
    at = endpoint_page()
    at.get("file_uploader")[0].set_value(("bad.json", b"{not json", "application/json")).run()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("This file is not JSON") and "\n" not in errors[0]
    assert not at.get("vega_lite_chart")


# --- the Endpoint page, live in a real browser -------------------------------------------------------------------
BROWSER_RUN_TIMEOUT_S = 400  # warm-up + 2 levels x 2 requests on a busy 2-core machine


@pytest.mark.browser
@pytest.mark.server
@pytest.mark.slow
def test_the_endpoint_page_measures_live_in_a_browser(engine: Engine, tmp_path: Path, chromium: object) -> None:
    from tests.browser_support import (
        full_screenshot,
        log_tail,
        mark_run_state,
        streamlit_server,
        wait_for_charts,
        wait_until_rerun_done,
    )

    shots = Path(os.environ.get("EXPLORER_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    server_log = tmp_path / "streamlit.log"
    viewport = {"width": 1400, "height": 1000}
    allowed = {"EXPLORER_ALLOWED_ENDPOINTS": engine.base_url}  # the server runs as deployed: hosted, an allow-list
    with streamlit_server(server_log, env=allowed) as url:
        context = chromium.new_context(viewport=viewport)  # the session's Chromium (tests/conftest.py)
        try:
            page = context.new_page()
            page.set_default_timeout(60_000)
            page_errors: list[str] = []
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.goto(url)  # through app.py, as a visitor arrives: a first request straight to /endpoint skips it
            # Until app.py's first run draws, the sidebar lists pages/ by file name: wait for its own sidebar.
            page.locator("[data-testid='stSidebar']").get_by_role("button", name="Run", exact=True).wait_for()
            page.locator("[data-testid='stSidebarNavLink']").get_by_text("Endpoint", exact=True).click()
            main_area = page.locator("[data-testid='stMain']")
            main_area.get_by_text("No sweep yet").wait_for()
            for label, value in (
                ("Base URL", engine.base_url),
                ("Model", engine.model),
                ("Max tokens", "4"),
                ("Concurrency levels", "1,2"),
                ("Requests per level", "2"),
            ):
                box = main_area.get_by_label(label, exact=True)
                box.fill(value)
                box.blur()
            mark = mark_run_state(page)
            main_area.get_by_role("button", name="Measure").click()
            try:
                wait_until_rerun_done(page, mark, BROWSER_RUN_TIMEOUT_S)
                # The sweep's script run can end before the browser has its charts: wait for the elements themselves.
                page.locator("[data-testid='stVegaLiteChart']").nth(1).wait_for(timeout=BROWSER_RUN_TIMEOUT_S * 1000)
                drawn, charts = wait_for_charts(page, 30)
            finally:
                full_screenshot(page, shots / "endpoint-live.png", **viewport)
            errors = page.locator("[data-testid='stAlertContentError']").all_inner_texts()
            assert not errors, f"{errors}; server log: {log_tail(server_log)}"
            # transformers serve publishes no engine /metrics: the client's three charts, no glass box.
            assert (drawn, charts) == (3, 3), f"{drawn} of {charts} charts drawn; see {shots / 'endpoint-live.png'}"
            text = main_area.inner_text()
            # The ITL rule in plain words on the page, its precise statement in an expander under its own title.
            assert "every token gets its own inter-token latency" in text and engine.base_url in text
            assert "How ITL and TTFT are counted, precisely" in text
            nav = [label.strip() for label in page.locator("[data-testid='stSidebarNavLink']").all_inner_texts()]
            assert "Endpoint" in nav and "Inside one inference" in nav  # app.py's navigation, not pages/
            assert page_errors == []
        finally:
            context.close()
    print(f"[browser test] endpoint page screenshot: {shots / 'endpoint-live.png'}")


def test_hosted_mode_refuses_an_unlisted_endpoint_on_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.HOSTED_ENV, "1")
    monkeypatch.setenv(settings.ALLOWED_ENDPOINTS_ENV, "http://127.0.0.1:8000/v1")
    at = endpoint_page()
    assert next(t for t in at.text_input if t.label == "Base URL").value == "http://127.0.0.1:8000/v1"
    next(t for t in at.text_input if t.label == "Base URL").input("http://169.254.169.254/v1")
    next(t for t in at.text_input if t.label == "Model").input("m")
    with mock.patch.object(httpx.Client, "send") as sent:
        next(b for b in at.button if b.label == "Measure").click().run()
    sent.assert_not_called()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "only measures these endpoints" in errors[0] and "\n" not in errors[0]


def test_the_page_shows_its_own_itl_rule_never_the_files() -> None:
    data = json.loads(synthetic_sweep_json())
    data["itl_rule"] = "**Click** [here](http://example.invalid)"  # an uploaded file is anyone's text
    at = endpoint_page()
    at.get("file_uploader")[0].set_value(("x.json", json.dumps(data).encode(), "application/json")).run()
    assert_renders(at)
    assert not any("example.invalid" in i.value for i in at.info)


def test_chunk_counts_that_miss_the_servers_total_are_flagged_on_the_page() -> None:
    short = record((0.1, 0.2), (1, 1), output_tokens=5)  # one token per chunk assumed; the server's usage says 5
    at = endpoint_page()
    body = sweep_of((records.LevelResult(1, 1.0, (short,)),)).to_json().encode()
    at.get("file_uploader")[0].set_value(("short.json", body, "application/json")).run()
    assert not at.exception
    assert any("sum to 2, but the server's usage says 5" in w.value for w in at.warning)
    assert list(at.dataframe[1].value["tokens disagree"]) == ["yes"]  # in "Every request", as a person reads it


def test_a_different_local_prompt_is_said_and_the_same_one_runs_locally(tiny_lm) -> None:
    from explorer.core.engine import Request
    from explorer.core.measure import measure

    at = endpoint_page()
    other = measure(tiny_lm, Request(prompt="hi", max_new_tokens=3))
    at.session_state[ui_state.RUN] = ui_state.RunResult(other, None, "", "run 1: hi")
    at.get("file_uploader")[0].set_value(("sweep.json", synthetic_sweep_json(), "application/json")).run()
    assert any("different prompt" in w.value for w in at.warning)
    next(b for b in at.button if b.label == "Run this prompt locally").click().run(timeout=600)
    assert not at.exception and not at.error, [e.value for e in at.error]
    local = at.session_state[ui_state.RUN].trace
    assert (local.prompt_text, local.chat_template_used) == ("Hello", True)  # the sweep's prompt, chat API
    assert not any("different prompt" in w.value for w in at.warning)
    assert at.dataframe[-1].value["TTFT p50 (ms)"].iloc[0] == pytest.approx(local.ttft_s * 1e3, rel=1e-3)


def test_a_sweep_counts_against_the_hosted_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.HOSTED_ENV, "1")
    monkeypatch.setenv(settings.ALLOWED_ENDPOINTS_ENV, "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("EXPLORER_RUNS_PER_MINUTE", "1")
    at = endpoint_page()
    next(t for t in at.text_input if t.label == "Model").input("m")
    recorded = records.SweepResult.from_json(synthetic_sweep_json().decode())
    with mock.patch.object(sweep, "run_sweep", return_value=recorded) as swept:
        next(b for b in at.button if b.label == "Measure").click().run()
        assert not at.error, [e.value for e in at.error]
        next(b for b in at.button if b.label == "Measure").click().run()
    assert swept.call_count == 1
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "1 runs per minute" in errors[0]
