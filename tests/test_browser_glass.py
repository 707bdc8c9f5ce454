"""The Endpoint page as a glass box, in a real browser against a real vLLM (`real_vllm`, tests/vllm_support.py): the
server-side prefill and decode times the page shows equal the /metrics deltas this test reads on its own, the
prefix experiment shows cached tokens on the repeat and none after the one-token change, and the sweep draws at
concurrency 1, 2 and 4."""

from __future__ import annotations

import io
import json
import re
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.browser_support import (
    full_screenshot,
    log_tail,
    mark_run_state,
    screenshot_folder,
    skip_module_without_browser,
    streamlit_server,
    wait_for_charts,
    wait_until_rerun_done,
)
from tests.vllm_support import real_vllm  # noqa: F401 - the session fixture

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(1200)]
skip_module_without_browser("the Endpoint page's glass box against a real vLLM")

RUN_TIMEOUT_S = 500  # warm-up + 3 levels x 4 requests, then the prefix experiment, on a busy 2-core machine
LEVELS = (1, 2, 4)
# Histogram sums the page reads through our parser; read here on their own, straight from prometheus_client.
SUMS = {"prefill": "vllm:request_prefill_time_seconds_sum", "decode": "vllm:request_decode_time_seconds_sum"}
COUNT = "vllm:e2e_request_latency_seconds_count"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - a loopback test server
        return answer.read()


def server_sums(base_url: str) -> dict[str, float]:
    """prefill / decode seconds and finished requests in all, summed over label sets, from the server's /metrics."""
    text = get(base_url.removesuffix("/v1") + "/metrics").decode()
    wanted = {*SUMS.values(), COUNT}
    totals = dict.fromkeys(wanted, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[sample.name] += sample.value
    return {"prefill": totals[SUMS["prefill"]], "decode": totals[SUMS["decode"]], "requests": totals[COUNT]}


def served_model(base_url: str) -> str:
    return json.loads(get(base_url + "/models"))["data"][0]["id"]


def test_the_glass_box_against_a_real_vllm(
    real_vllm: str,  # noqa: F811 - the fixture imported above
    chromium: object,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base_url = real_vllm
    shots = screenshot_folder(tmp_path_factory, "glass")
    server_log = tmp_path / "streamlit.log"
    viewport = {"width": 1400, "height": 1000}
    with streamlit_server(server_log, env={"EXPLORER_ALLOWED_ENDPOINTS": base_url}) as url:
        context = chromium.new_context(viewport=viewport, accept_downloads=True)  # type: ignore[attr-defined]
        try:
            page = context.new_page()
            page.set_default_timeout(60_000)
            page.goto(url)
            page.locator("[data-testid='stSidebar']").get_by_role("button", name="Run", exact=True).wait_for()
            page.locator("[data-testid='stSidebarNavLink']").get_by_text("Endpoint", exact=True).click()
            main = page.locator("[data-testid='stMain']")
            main.get_by_text("No sweep yet").wait_for()
            for label, value in (
                ("Base URL", base_url),
                ("Model", served_model(base_url)),
                ("Max tokens", "4"),
                ("Concurrency levels", ",".join(map(str, LEVELS))),
                ("Requests per level", "4"),
            ):
                box = main.get_by_label(label, exact=True)
                box.fill(value)
                box.blur()
            before = server_sums(base_url)
            mark = mark_run_state(page)
            main.get_by_role("button", name="Measure").click()
            wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
            failed = page.locator("[data-testid='stException'], [data-testid='stAlertContentError']")
            main.get_by_text("Whole sweep, warm-up included").or_(failed).first.wait_for(timeout=RUN_TIMEOUT_S * 1000)
            after = server_sums(base_url)
            errors = page.locator("[data-testid='stAlertContentError']").all_inner_texts()
            assert not errors, f"{errors}; server log: {log_tail(server_log)}"
            text = main.inner_text()

            # The server's prefill and decode, as shown, equal the /metrics deltas read here (shown to 0.1 ms).
            shown = re.search(
                r"Whole sweep, warm-up included · reported \(server\): queue [\d.]+ ms in all, "
                r"prefill ([\d.]+) ms in all, decode ([\d.]+) ms in all over (\d+) requests",
                text,
            )
            assert shown, text[:3000]
            assert float(shown[1]) == pytest.approx((after["prefill"] - before["prefill"]) * 1e3, abs=0.051)
            assert float(shown[2]) == pytest.approx((after["decode"] - before["decode"]) * 1e3, abs=0.051)
            assert int(shown[3]) == round(after["requests"] - before["requests"]) == 1 + 4 * len(LEVELS)
            for c in LEVELS:
                assert re.search(rf"Concurrency {c} · reported \(server\): queue [\d.]+ ms, prefill", text)

            # The sweep as serving benchmarks draw it, at concurrency 1, 2 and 4: the data behind the chart.
            with page.expect_download() as download:
                main.get_by_role("button", name="Download data: endpoint-throughput-per-user.csv").click()
            drawn_at = pd.read_csv(io.BytesIO(Path(download.value.path()).read_bytes()))
            assert sorted(set(drawn_at["concurrency"])) == list(LEVELS)
            assert drawn_at["tokens_per_s"].notna().any() and drawn_at["per_user_tokens_per_s"].notna().all()

            # The prefix-reuse experiment: cached tokens on the repeat, none after the one-token change.
            mark = mark_run_state(page)
            main.get_by_role("button", name="Run the prefix experiment").click()
            wait_until_rerun_done(page, mark, RUN_TIMEOUT_S)
            main.get_by_text("prefix changed by one token ·").or_(failed).first.wait_for(timeout=RUN_TIMEOUT_S * 1000)
            assert not failed.count(), f"{failed.all_inner_texts()}; server log: {log_tail(server_log)}"
            drawn, charts = wait_for_charts(page, 60, at_least=6)
            text = main.inner_text()
            cached = {
                label: float(n)
                for label, n in re.findall(r"(first \(cold\)|same prefix, another question|prefix changed by one "
                                           r"token) · TTFT [\d.]+ ms, measured \(client\) · cached prompt tokens "
                                           r"(\d+)", text)
            }  # fmt: skip
            assert cached["first (cold)"] == 0, text
            assert cached["same prefix, another question"] > 0, text
            assert cached["prefix changed by one token"] == 0, text
            assert (drawn, charts) == (charts, charts) and charts >= 6, f"{drawn} of {charts} charts drawn"
        finally:
            with_shot = shots / "endpoint-glass.png"
            full_screenshot(page, with_shot, **viewport)
            context.close()
    print(f"[browser test] glass box screenshot: {with_shot}; prefix cached tokens {cached}")
