"""The Endpoint page's glass box: the server's own /metrics over each level beside the client's figures (the phase
split with its gaps named, the step mix, the prefix cache, KV usage, preemptions, the engine on our roofline), the
sweep as throughput against speed per user, and the prefix-reuse experiment."""

from __future__ import annotations

import streamlit as st

from explorer.charts import glass
from explorer.charts.roofline import roofline_frame
from explorer.core.errors import ExplorerError
from explorer.core.units import to_ms
from explorer.hosting import settings
from explorer.remote import prefix
from explorer.remote.metrics import MEASURED, MODELLED, REPORTED, ServerDelta
from explorer.remote.records import LevelResult, SweepResult
from explorer.remote.watch import POLL_INTERVAL_S
from explorer.ui.admission import count_run
from explorer.ui.state import ENDPOINT_PREFIX, current_run
from explorer.ui.widgets import chart, escape_markdown, show_error, table

# --- the glass box: the server's own account -------------------------------------------------------------------------
NO_METRICS = (
    "Not shown without the server's /metrics: queue, prefill and decode per request, the engine's step mix, "
    "prefix-cache hits, KV usage and preemptions (an engine such as vLLM or SGLang publishes them); everything above "
    "and below is the client's own measurement."
)
GLASS_CAPTION = (
    "Read from the server's Prometheus /metrics before and after each concurrency level: histogram sums and counts "
    "over the level give the server's own mean per request. Another client's requests in the same window are counted "
    "too. TTFT as the client sees it = network & HTTP + the server's front end (tokenizing, handing the prompt to the "
    "engine) + queue + prefill."
)


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _levels_with_server(result: SweepResult) -> list[LevelResult]:
    return [level for level in result.levels if level.server is not None]


def glass_box(result: SweepResult) -> None:
    """The server's own phase split beside the client's TTFT and ITL, the step mix, the prefix cache, KV usage and
    preemptions, per level; one line saying what cannot be shown when the server publishes no metrics."""
    st.subheader("Inside the server: its own account of each level")
    levels = _levels_with_server(result)
    if not levels:
        why = result.metrics_note or "this sweep holds no server metrics"
        st.info(f"{NO_METRICS} This server: {escape_markdown(why)}.", icon=":material/visibility_off:")
        return
    engine = ENGINE_NAMES.get(levels[0].server.engine, levels[0].server.engine)  # type: ignore[union-attr]
    missing = sorted({m for level in levels for m in level.server.missing})  # type: ignore[union-attr]
    st.caption(GLASS_CAPTION)
    if missing:
        st.caption(f"{engine} does not publish here: {', '.join(missing)}; those figures stay blank.")
    for level in levels:
        server = level.server
        client_ttft, client_itl = glass.client_ttft_s(level), glass.client_itl_s(level)
        said = server.phase_line or "no per-request phase split"  # type: ignore[union-attr]
        client = f"TTFT {client_ttft * 1e3:.1f} ms" if client_ttft is not None else "no TTFT"
        client += f", ITL {client_itl * 1e3:.1f} ms" if client_itl is not None else ""
        heading = f"**Concurrency {level.concurrency}**"
        st.markdown(f"{heading} · {REPORTED}: {said} · {MEASURED}: {client}")
    if (whole := result.server_total) is not None:
        st.markdown(f"**Whole sweep, warm-up included** · {REPORTED}: {whole_sweep_line(whole)}")
    table(
        glass.server_split_frame(result),
        "Per level, means per request: the client's TTFT and ITL beside the server's; network & HTTP = client TTFT − "
        "server TTFT; tokenize & hand-off = server TTFT − queue − prefill.",
        f"client: {MEASURED} · server: {REPORTED}",
    )
    split = glass.request_split_frame(result)
    chart(
        glass.request_split_chart(split), split, "endpoint-request-split",
        "Where the mean request's time goes at each level, in the order it happens: more requests in flight wait in "
        "the queue and share each step.", f"server parts {REPORTED}; network = {MEASURED} − {REPORTED}",
    )  # fmt: skip
    steps = glass.step_mix_frame(result)
    if steps.empty:
        st.caption(f"No step mix: {engine} publishes no tokens-per-step histogram.")
    else:
        chart(
            glass.step_mix_chart(steps), steps, "endpoint-step-mix",
            "Continuous batching: a decode step carries one token per request in flight, so a step carrying more "
            "tokens held a prefill chunk (read from the buckets of the tokens-per-step histogram).", REPORTED,
        )  # fmt: skip
    table(
        glass.cache_frame(result),
        "Prefix cache (queries and hits in prompt tokens), cached prompt tokens from the server's counter and, where "
        "it sends them, its usage per request; KV-cache usage and requests running at their peak, polled every "
        f"{POLL_INTERVAL_S:g} s during the level; preemptions.",
        REPORTED,
    )
    engine_roofline(result)


def whole_sweep_line(whole: ServerDelta) -> str:
    """The sweep's totals as printed: seconds in all (sums of the server's histograms) over its requests."""
    figures = [(n, whole.total_s(n)) for n in ("queue", "prefill", "decode")]
    said = ", ".join(f"{n} {to_ms(v):.1f} ms in all" for n, v in figures if v is not None)
    return f"{said} over {whole.requests} requests"


def engine_roofline(result: SweepResult) -> None:
    """The engine's own FLOP and byte estimates per token as a roofline point beside our passes' points."""
    engine = glass.engine_per_token_frame(result)
    if engine.empty:
        st.caption(
            "No roofline point for the engine: it publishes no FLOP or byte estimates (vLLM does when started with "
            "--enable-mfu-metrics)."
        )
        return
    table(engine, "The engine's own estimates per token it computed (prefill and decode tokens).", MODELLED)
    local = current_run()
    if local is None:
        st.caption("Run a prompt locally (below) to draw the engine's point beside our own passes on the roofline.")
        return
    frame = glass.engine_roofline_frame(roofline_frame(local.trace), engine)
    chart(
        glass.engine_roofline_chart(frame), frame, "endpoint-engine-roofline",
        "Our passes (prefill, decode) under this device's roof, and the engine's levels (black diamonds) at the "
        "intensity it models: another engine and batch, so compare where they sit, not the heights.",
        f"passes: modelled FLOPs / measured time; engine: {MODELLED} / measured wall",
    )  # fmt: skip


def serving_sweep(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> None:
    """The sweep as serving benchmarks draw it: throughput in all against speed per user, with goodput."""
    frame = glass.serving_frame(result, ttft_slo_s, itl_slo_s)
    chart(
        glass.serving_chart(frame, itl_slo_s), frame, "endpoint-throughput-per-user",
        "Each point a concurrency level: up the curve, more requests in flight raise the tokens/s in all while each "
        "reader gets fewer tokens/s. The green line counts only the requests that met both SLOs (goodput); the red "
        "rule is the speed per user the ITL SLO asks for. The tooltip holds the server's own prefill and decode per "
        "request.",
        f"{MEASURED}; server split {REPORTED}",
    )  # fmt: skip


# --- the prefix-reuse experiment -------------------------------------------------------------------------------------
def prefix_experiment(result: SweepResult, policy: settings.EndpointPolicy) -> None:
    """Three requests to the sweep's endpoint (a long system prompt, the same with another question, the same with
    one token changed) and what reuse saved, in one chart."""
    st.subheader("Prefix reuse, on the real engine")
    endpoint = result.endpoint
    st.caption(
        f"Sends to {escape_markdown(endpoint.base_url)} (model {escape_markdown(endpoint.model)}), one at a time: a "
        f"long system prompt (about {len(prefix.SYSTEM_BODY.split())} words) with a question; the same prompt with "
        "another question, whose shared prefix the engine can take from its cache; then the prompt with its first "
        "word changed, one token, so no cached block matches."
    )
    with st.form("prefix-form"):
        api_key = st.text_input(
            "API key for the experiment (optional)", type="password", help="Sent as a bearer token; never stored."
        )
        pressed = st.form_submit_button("Run the prefix experiment")
    if pressed:
        try:
            policy.check(endpoint.base_url)
            count_run()
            with st.spinner("Sending the three requests…"):
                ENDPOINT_PREFIX.set(prefix.run_prefix_experiment(endpoint, api_key or None))
        except ExplorerError as exc:
            show_error(str(exc))
    shown: prefix.PrefixResult | None = ENDPOINT_PREFIX.get()
    if shown is None:
        return
    for step in shown.steps:
        if step.error:
            show_error(f"{step.label}: {step.error}")
    if shown.metrics_note:
        st.caption(f"No /metrics here ({escape_markdown(shown.metrics_note)}): cached tokens from usage, where sent.")
    for step in shown.steps:
        st.markdown(f"**{step.label}** · {prefix_line(step)}")
    frame = glass.prefix_frame(shown)
    chart(
        glass.prefix_chart(frame), frame, "endpoint-prefix-reuse",
        "The repeat's cached prompt tokens are prefill the engine did not redo; one changed token at the start makes "
        "every cached block miss (blocks are chained by hash from the first).",
        f"TTFT {MEASURED}; cached tokens {REPORTED} (/metrics delta per request)",
    )  # fmt: skip


def prefix_line(step: prefix.PrefixStep) -> str:
    """One request's figures as printed (and read by the browser test)."""
    parts = [f"TTFT {step.ttft_s * 1e3:.1f} ms, {MEASURED}" if step.ttft_s is not None else "no answer"]
    if step.cached_tokens_server is not None:
        parts.append(f"cached prompt tokens {step.cached_tokens_server:.0f}, {REPORTED} by /metrics")
    if step.cached_tokens_usage is not None:
        parts.append(f"cached tokens in usage {step.cached_tokens_usage}")
    if step.prompt_tokens is not None:
        parts.append(f"prompt tokens {step.prompt_tokens}")
    if step.prefill_s_server is not None:
        parts.append(f"server prefill {step.prefill_s_server * 1e3:.1f} ms")
    return " · ".join(parts)
