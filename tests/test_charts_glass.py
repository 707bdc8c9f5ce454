"""The glass box's chart builders: pure, from a sweep whose levels carry the server's delta over a real vLLM batch
(tests/data/), checked by hand; and the Endpoint page against a server without /metrics (AppTest)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pandas as pd
import pytest

from explorer.charts import glass
from explorer.charts.roofline import roofline_frame
from explorer.core.loaded_model import LoadedModel
from explorer.remote import endpoint, prefix, records, sweep
from explorer.remote.metrics import Peaks, ServerDelta, parse_metrics
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.cost_support import tiny_run
from tests.test_metrics import VLLM_AFTER, VLLM_BEFORE
from tests.test_remote import record, stdlib_server, sweep_of


def delta() -> ServerDelta:
    peaks = Peaks(kv_usage=0.5, running=2.0, waiting=0.0, samples=4)
    return ServerDelta.between(parse_metrics(VLLM_BEFORE), parse_metrics(VLLM_AFTER), peaks)


def glass_sweep() -> records.SweepResult:
    """Two requests per level; the server's delta is the captured vLLM batch of two requests (TTFT sum 1.1297 s)."""
    a = record((0.70, 0.76, 0.82), (1, 1, 1), cached_tokens=0)
    b = record((0.50, 0.56, 0.62), (1, 1, 1), index=1, cached_tokens=640)
    levels = (records.LevelResult(1, 2.0, (a, b), delta()), records.LevelResult(2, 1.0, (a, b), delta()))
    return sweep_of(levels)


def test_the_request_split_adds_up_to_the_clients_ttft() -> None:
    result = glass_sweep()
    frame = glass.request_split_frame(result)
    level1 = frame[frame["concurrency"] == 1].set_index("part")["ms"]
    client_ttft_ms = (0.70 + 0.50) / 2 * 1e3
    # network + front end + queue + prefill is the client's mean TTFT, by construction of the parts.
    ttft_parts = ["network & HTTP", "tokenize & hand-off", "queue", "prefill"]
    assert level1[ttft_parts].sum() == pytest.approx(client_ttft_ms)
    assert level1["prefill"] == pytest.approx(1.1128133199999866 / 2 * 1e3)
    assert level1["network & HTTP"] == pytest.approx(client_ttft_ms - 1.129711389541626 / 2 * 1e3)
    assert list(frame[frame["concurrency"] == 1]["part"]) == glass.PART_NAMES  # in the order they happen
    assert glass.request_split_chart(frame).to_dict()["mark"]["type"] == "bar"


def test_the_server_split_table_names_the_gaps() -> None:
    row = glass.server_split_frame(glass_sweep()).iloc[0]
    assert row["server_decode_ms"] == pytest.approx(0.4621958729985636 / 2 * 1e3)
    assert row["client_itl_ms"] == pytest.approx(60.0)
    assert row["server_itl_ms"] == pytest.approx(0.4621958729985636 / 14 * 1e3)
    assert row["server_requests"] == 2


def test_the_step_mix_uses_each_levels_concurrency() -> None:
    frame = glass.step_mix_frame(glass_sweep())
    at_1 = frame[frame["concurrency"] == 1].set_index("kind")["steps"]
    assert list(at_1) == [2, 14, 0]
    at_2 = frame[frame["concurrency"] == 2].set_index("kind")["steps"]
    assert list(at_2) == [2, 14, 0]  # (1, 8] holds no step here; a step of 1 token is a decode at either level
    assert glass.step_mix_chart(frame).to_dict()["encoding"]["x"]["stack"] == "zero"


def test_the_cache_table_holds_the_counter_and_the_usage() -> None:
    row = glass.cache_frame(glass_sweep()).iloc[0]
    assert row["cached_prompt_tokens_metrics"] == 640 and row["cached_prompt_tokens_usage"] == 640
    assert row["prefix_hit_pct"] == pytest.approx(100 * 640 / 1481)
    assert row["kv_usage_peak_pct"] == 50 and row["preemptions"] == 0


def test_no_server_metrics_no_rows() -> None:
    plain = sweep_of((records.LevelResult(1, 1.0, (record((0.1, 0.2), (1, 1)),)),))
    for build in (glass.request_split_frame, glass.step_mix_frame, glass.engine_per_token_frame):
        assert build(plain).empty
    assert glass.server_split_frame(plain).empty and glass.cache_frame(plain).empty


def test_the_serving_frame_plots_throughput_against_speed_per_user() -> None:
    result = glass_sweep()
    frame = glass.serving_frame(result, ttft_slo_s=0.6, itl_slo_s=0.1)
    level1 = frame[frame["concurrency"] == 1].set_index("series")
    # Each request: 3 tokens, TPOT (e2e - ttft) / 2 = 60 ms: 16.7 tokens/s per user.
    assert level1["per_user_tokens_per_s"].iloc[0] == pytest.approx(1 / 0.06)
    assert level1.loc["all requests", "tokens_per_s"] == pytest.approx(6 / 2.0)
    assert level1.loc["meeting both SLOs (goodput)", "tokens_per_s"] == pytest.approx(3 / 2.0)  # TTFT 0.7 misses 0.6
    assert level1["server_prefill_ms"].iloc[0] == pytest.approx(1.1128133199999866 / 2 * 1e3)
    spec = glass.serving_chart(frame, itl_slo_s=0.1).to_dict()
    rule = next(layer for layer in spec["layer"] if layer.get("mark", {}).get("type") == "rule")
    assert rule["encoding"]["x"]["field"] == "speed"
    assert [{"speed": 10.0, "label": "ITL SLO: 10 tokens/s per user"}] in spec["datasets"].values()


def prefix_result() -> prefix.PrefixResult:
    steps = (
        prefix.PrefixStep(prefix.STEPS[0], "q1", 1.2, 900, None, 0.0, 1.1),
        prefix.PrefixStep(prefix.STEPS[1], "q2", 0.3, 905, None, 896.0, 0.2),
        prefix.PrefixStep(prefix.STEPS[2], "q1", 1.25, 900, None, 0.0, 1.15),
    )
    return prefix.PrefixResult(endpoint.make_endpoint("http://h/v1", "m"), "You ...", steps, "", "t")


def test_the_prefix_chart_holds_ttft_and_cached_tokens_in_one_chart() -> None:
    frame = glass.prefix_frame(prefix_result())
    cached = frame[frame["figure"] == "cached prompt tokens (reported)"]["value"].tolist()
    ttft = frame[frame["figure"] == "TTFT (ms, measured)"]["value"].tolist()
    assert cached == [0.0, 896.0, 0.0] and ttft == pytest.approx([1200, 300, 1250])
    spec = glass.prefix_chart(frame).to_dict()
    assert spec["resolve"]["scale"]["y"] == "independent" and len(spec["layer"]) == 2
    assert prefix.PrefixResult.from_dict(json.loads(json.dumps(prefix_result().to_dict()))) == prefix_result()


def test_the_prefix_prompts_differ_in_their_first_word_only() -> None:
    shared, changed = prefix.system_prompts("abc123")
    assert shared.split(" ", 1)[1] == changed.split(" ", 1)[1] and shared.split()[0] != changed.split()[0]
    assert len(shared.split()) > 400  # several KV blocks of 128 tokens


def test_the_engines_roofline_point_sits_beside_our_passes(tiny_lm: LoadedModel) -> None:
    tiny_trace = tiny_run(tiny_lm)
    published = VLLM_AFTER.replace(
        'vllm:estimated_flops_per_gpu_total{engine="0",model_name="embedded"} 0.0',
        'vllm:estimated_flops_per_gpu_total{engine="0",model_name="embedded"} 2.57e+11',
    ).replace(
        'vllm:estimated_read_bytes_per_gpu_total{engine="0",model_name="embedded"} 0.0',
        'vllm:estimated_read_bytes_per_gpu_total{engine="0",model_name="embedded"} 8.57e+09',
    )
    server = ServerDelta.between(parse_metrics(VLLM_BEFORE), parse_metrics(published))
    result = sweep_of((records.LevelResult(1, 2.0, (record((0.1, 0.2), (1, 1)),), server),))
    engine = glass.engine_per_token_frame(result)
    assert engine.iloc[0]["intensity_flops_per_byte"] == pytest.approx(2.57e11 / 8.57e9)
    assert engine.iloc[0]["flops_per_s"] == pytest.approx(2.57e11 / 2.0)
    frame = glass.engine_roofline_frame(roofline_frame(tiny_trace), engine)
    assert (frame["kind"] == "engine").sum() == 1 and (frame["kind"] == "pass").sum() == len(tiny_trace.passes)
    assert len(glass.engine_roofline_chart(frame).to_dict()["layer"]) >= 2


# --- the page against a server without /metrics ----------------------------------------------------------------------
@contextlib.contextmanager
def chat_server_without_metrics() -> Iterator[str]:
    """Streams a two-chunk chat answer on POST; 404 on GET /metrics, as `transformers serve` or a hosted API do."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for data in (
                {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]},
                {"choices": [{"delta": {"content": " there"}, "finish_reason": "length"}]},
                {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
            ):
                self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def do_GET(self) -> None:  # noqa: N802
            self.send_error(404, "Not Found")

        def log_message(self, *args: object) -> None:
            pass

    with stdlib_server(Handler) as base_url:
        yield base_url


def test_a_sweep_against_a_server_without_metrics_works_as_before_and_says_why() -> None:
    with chat_server_without_metrics() as base_url:
        config = sweep.SweepConfig(endpoint.make_endpoint(base_url, "m"), max_tokens=2, concurrency_levels=(1,))
        config = sweep.SweepConfig(**{**config.__dict__, "requests_per_level": 2})
        result = sweep.run_sweep(config)
    assert [len(level.succeeded) for level in result.levels] == [2]
    assert result.levels[0].server is None and result.server_total is None
    assert result.metrics_note.endswith("/metrics answered HTTP 404")


def test_the_page_says_in_one_line_what_it_cannot_show_without_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    with chat_server_without_metrics() as base_url:
        config = sweep.SweepConfig(endpoint.make_endpoint(base_url, "m"), max_tokens=2, concurrency_levels=(1, 2))
        result = sweep.run_sweep(sweep.SweepConfig(**{**config.__dict__, "requests_per_level": 2}))
    at = open_page("pages/endpoint.py")
    at.session_state["endpoint_result"] = result
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    lines = [i.value for i in at.info if i.value.startswith("Not shown without the server's /metrics")]
    assert len(lines) == 1 and "answered HTTP 404" in lines[0] and "\n" not in lines[0]
    assert len(at.get("vega_lite_chart")) == 3  # percentiles, trade-off, throughput against speed per user


def test_the_page_shows_the_servers_split_beside_the_clients() -> None:
    at = open_page("pages/endpoint.py")
    at.session_state["endpoint_result"] = glass_sweep()
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    text = " ".join(m.value for m in at.markdown)
    split = "queue 0.0 ms, prefill 556.4 ms, decode 231.1 ms per request over 2 requests"
    assert f"**Concurrency 1** · reported (server): {split} · measured (client): TTFT 600.0 ms, ITL 60.0 ms" in text
    assert "vLLM does not publish here: estimated FLOPs, estimated bytes read" in " ".join(c.value for c in at.caption)
    assert len(at.get("vega_lite_chart")) == 5  # + where the time goes, the step mix
    labels = {b.label for b in at.get("download_button")}
    for name in ("endpoint-request-split", "endpoint-step-mix", "endpoint-throughput-per-user"):
        assert f"Download data: {name}.csv" in labels  # the data behind each chart
    assert isinstance(glass.server_split_frame(glass_sweep()), pd.DataFrame)


def test_the_prefix_experiment_runs_against_a_server_without_metrics() -> None:
    with chat_server_without_metrics() as base_url:
        result = prefix.run_prefix_experiment(endpoint.make_endpoint(base_url, "m"), nonce="abc")
    assert [step.label for step in result.steps] == list(prefix.STEPS)
    assert all(step.error == "" and step.ttft_s and step.cached_tokens_server is None for step in result.steps)
    assert result.metrics_note.endswith("/metrics answered HTTP 404")
    assert result.system_prompt.startswith("You (run abc)")
    assert glass.prefix_frame(result)["value"].notna().sum() == 3  # TTFTs only: no cached tokens to draw


def test_an_uploaded_files_server_metrics_are_left_out_not_built_unchecked() -> None:
    from explorer.remote import upload

    data = json.loads(glass_sweep().to_json())
    data["levels"][0]["server"]["histograms"] = ["not", "an", "object"]  # would fail deep inside from_dict
    data["server_total"] = {"engine": "vllm"}
    result = upload.read_sweep(json.dumps(data).encode(), upload.UploadLimits.for_server(hosted=True))
    assert all(level.server is None for level in result.levels) and result.server_total is None
    assert result.metrics_note == "the server's metrics in an uploaded file are not read"
