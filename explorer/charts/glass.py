"""The Endpoint page's glass box: what the server's own /metrics say about each batch of requests, beside what the
client measured. Where a request's time goes (network, the server's front end, queue, prefill, decode), the engine's
step mix, its prefix cache, the prefix-reuse experiment, and the sweep as serving benchmarks draw it (throughput in
all against speed per user, with the SLO goodput)."""

from __future__ import annotations

import statistics

import altair as alt
import pandas as pd

from explorer.charts.common import PHASE_RANGE, two_lines
from explorer.charts.latency import SLO_RULE_COLOR
from explorer.charts.roofline import roofline_chart
from explorer.core.units import to_ms
from explorer.remote.metrics import MEASURED, MODELLED, REPORTED
from explorer.remote.prefix import PrefixResult
from explorer.remote.records import LevelResult, SweepResult

# --- where a request's time goes -------------------------------------------------------------------------------------
# The parts of one request, in the order they happen. The server's TTFT runs from the request's arrival at its front
# end to the first token; its queue and prefill are inside that, so what remains of it is the front end's own work
# (tokenizing the prompt, handing it to the engine, detokenizing the first token). The client's TTFT adds the
# network and HTTP on top: the client's TTFT minus the server's.
PARTS = (
    ("network & HTTP", "client TTFT − server TTFT", MEASURED + " − " + REPORTED),
    ("tokenize & hand-off", "server TTFT − queue − prefill", REPORTED),
    ("queue", "waiting to be scheduled", REPORTED),
    ("prefill", "scheduled to first token", REPORTED),
    ("decode", "first token to last", REPORTED),
)
PART_NAMES = [name for name, _, _ in PARTS]
PART_RANGE = ["#bdbdbd", "#9e9ac8", "#fdd0a2", PHASE_RANGE[0], PHASE_RANGE[1]]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else to_ms(seconds)


def client_ttft_s(level: LevelResult) -> float | None:
    """The mean client TTFT over a level (the server's histograms give sums and counts: means compare)."""
    return _mean(list(level.ttfts_s))


def client_itl_s(level: LevelResult) -> float | None:
    return _mean(list(level.itls_s))


def request_parts_s(level: LevelResult) -> dict[str, float | None]:
    """A level's mean request split into PARTS (seconds); None where the server publishes no such figure."""
    server = level.server
    if server is None:
        return dict.fromkeys(PART_NAMES)
    queue, prefill, decode = (server.per_request_s(n) for n in ("queue", "prefill", "decode"))
    server_ttft, client_ttft = server.per_request_s("ttft"), client_ttft_s(level)
    network = None if server_ttft is None or client_ttft is None else client_ttft - server_ttft
    front = None if None in (server_ttft, queue, prefill) else server_ttft - queue - prefill  # type: ignore[operator]
    return dict(zip(PART_NAMES, (network, front, queue, prefill, decode)))


def request_split_frame(result: SweepResult) -> pd.DataFrame:
    """Long form: per level and part, the mean request's milliseconds and where the figure comes from."""
    rows = [
        {
            "concurrency": level.concurrency,
            "part": name,
            "what": what,
            "ms": _ms(seconds),
            "source": source,
            "order": i,
        }
        for level in result.levels
        for i, ((name, what, source), seconds) in enumerate(zip(PARTS, request_parts_s(level).values()))
        if seconds is not None
    ]
    return pd.DataFrame(rows, columns=["concurrency", "part", "what", "ms", "source", "order"])


def request_split_chart(frame: pd.DataFrame) -> alt.Chart:
    """One stacked bar per concurrency level: where the mean request's time went, in the order it happens. A part
    below zero (clocks of two processes do not agree to the microsecond) is drawn at zero; the table keeps it."""
    shown = frame.assign(ms=frame["ms"].clip(lower=0))
    return (
        alt.Chart(shown)
        .mark_bar()
        .encode(
            y=alt.Y("concurrency:O", title="requests in flight"),
            x=alt.X("ms:Q", stack="zero", title="mean request (ms)"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=PART_NAMES, range=PART_RANGE),
                sort=PART_NAMES,
                legend=alt.Legend(orient="top", title=None),
            ),
            order=alt.Order("order:Q"),
            tooltip=["concurrency:O", "part:N", "what:N", alt.Tooltip("ms:Q", format=".1f"), "source:N"],
        )
        .properties(height=alt.Step(36), title="Where a request's time goes")
    )


def server_split_frame(result: SweepResult) -> pd.DataFrame:
    """Per level: the client's TTFT and ITL (measured) beside the server's queue / prefill / decode per request,
    TTFT and ITL (reported), and the gaps named. Empty without server metrics."""
    rows = []
    for level in result.levels:
        server = level.server
        if server is None:
            continue
        parts = request_parts_s(level)
        rows.append(
            {
                "concurrency": level.concurrency,
                "client_ttft_ms": _ms(client_ttft_s(level)),
                "server_ttft_ms": _ms(server.per_request_s("ttft")),
                "server_queue_ms": _ms(parts["queue"]),
                "server_prefill_ms": _ms(parts["prefill"]),
                "server_decode_ms": _ms(parts["decode"]),
                "network_http_ms": _ms(parts["network & HTTP"]),
                "tokenize_handoff_ms": _ms(parts["tokenize & hand-off"]),
                "client_itl_ms": _ms(client_itl_s(level)),
                "server_itl_ms": _ms(server.per_request_s("itl")),
                "server_requests": server.requests,
            }
        )
    return pd.DataFrame(rows)


# --- the engine's steps, its cache -----------------------------------------------------------------------------------
STEP_KINDS = ["carried a prefill chunk", "decodes only", "unsure (bucket straddles the requests in flight)"]
STEP_RANGE = [PHASE_RANGE[0], PHASE_RANGE[1], "#bdbdbd"]


def step_mix_frame(result: SweepResult) -> pd.DataFrame:
    """Long form: per level, engine steps of each kind (`StepMix`: read from the per-step token histogram)."""
    rows = []
    for level in result.levels:
        mix = level.server.step_mix(level.concurrency) if level.server is not None else None
        if mix is None:
            continue
        for kind, steps in zip(STEP_KINDS, (mix.with_prefill, mix.decode_only, mix.unsure)):
            rows.append({"concurrency": level.concurrency, "kind": kind, "steps": steps, "tokens": mix.tokens})
    return pd.DataFrame(rows, columns=["concurrency", "kind", "steps", "tokens"])


def step_mix_chart(frame: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            y=alt.Y("concurrency:O", title="requests in flight"),
            x=alt.X("steps:Q", stack="zero", title="engine steps (reported)"),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=STEP_KINDS, range=STEP_RANGE),
                sort=STEP_KINDS,
                legend=alt.Legend(orient="top", title=None, labelLimit=0),
            ),
            tooltip=["concurrency:O", "kind:N", "steps:Q", alt.Tooltip("tokens:Q", title="tokens in all the steps")],
        )
        .properties(height=alt.Step(36), title="The engine's steps")
    )


def cache_frame(result: SweepResult) -> pd.DataFrame:
    """Per level: prefix-cache queries and hits, cached prompt tokens (the server's counter and, where sent, its
    usage per request), KV usage and requests running at their peak (polled), preemptions."""
    rows = []
    for level in result.levels:
        server = level.server
        if server is None:
            continue
        usage = [r.cached_tokens for r in level.succeeded if r.cached_tokens is not None]
        queries, hits = server.counter("prefix_queries"), server.counter("prefix_hits")
        rows.append(
            {
                "concurrency": level.concurrency,
                "prefix_cache_queries_tokens": queries,
                "prefix_cache_hits_tokens": hits,
                "prefix_hit_pct": 100 * hits / queries if queries and hits is not None else None,
                "cached_prompt_tokens_metrics": server.counter("cached_prompt_tokens"),
                "cached_prompt_tokens_usage": sum(usage) if usage else None,
                "kv_usage_peak_pct": None if server.peaks.kv_usage is None else 100 * server.peaks.kv_usage,
                "running_peak": server.peaks.running,
                "waiting_peak": server.peaks.waiting,
                "gauge_samples": server.peaks.samples,
                "preemptions": server.counter("preemptions"),
            }
        )
    return pd.DataFrame(rows)


# --- the prefix-reuse experiment -------------------------------------------------------------------------------------
def prefix_frame(result: PrefixResult) -> pd.DataFrame:
    """Long form: per request, its TTFT (measured) and its cached prompt tokens (reported), one row each."""
    rows = []
    for i, step in enumerate(result.steps):
        rows.append({"order": i, "request": step.label, "figure": "TTFT (ms, measured)", "value": _ms(step.ttft_s)})
        cached = step.cached_tokens_server
        if cached is None:
            cached = step.cached_tokens_usage
        rows.append({"order": i, "request": step.label, "figure": "cached prompt tokens (reported)", "value": cached})
    return pd.DataFrame(rows, columns=["order", "request", "figure", "value"])


def prefix_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """TTFT bars (left axis) and cached prompt tokens (right axis, labelled points) per request, in the order sent:
    the repeat's cached tokens and its shorter TTFT are what reuse saves; one changed token loses them all."""
    order = list(dict.fromkeys(frame.sort_values("order")["request"]))
    x = alt.X("request:N", sort=order, title=None, axis=alt.Axis(labelAngle=0, labelLimit=220))
    base = alt.Chart(frame).encode(x=x)
    ttft = (
        base.transform_filter("datum.figure == 'TTFT (ms, measured)'")
        .mark_bar(color="#9ecae1", width=alt.RelativeBandSize(0.6))
        .encode(
            y=alt.Y("value:Q", title="TTFT (ms, measured)"),
            tooltip=["request:N", alt.Tooltip("value:Q", title="TTFT (ms)", format=".1f")],
        )
    )
    cached = base.transform_filter("datum.figure == 'cached prompt tokens (reported)'")
    cached_y = alt.Y("value:Q", title="cached prompt tokens (reported)", axis=alt.Axis(orient="right"))
    dots = cached.mark_point(filled=True, size=140, color=PHASE_RANGE[0]).encode(
        y=cached_y, tooltip=["request:N", alt.Tooltip("value:Q", title="cached prompt tokens")]
    )
    labels = cached.mark_text(dy=-12, color=PHASE_RANGE[0], fontWeight="bold").encode(
        y=cached_y, text=alt.Text("value:Q", format=",.0f")
    )
    return (
        alt.layer(ttft, dots + labels)
        .resolve_scale(y="independent")
        .properties(height=300, title="What prefix reuse saves")
    )


# --- the sweep as serving benchmarks draw it -------------------------------------------------------------------------
def per_user_tokens_per_s(level: LevelResult) -> float | None:
    """Speed per user: the median over requests of 1 / TPOT, the tokens/s one reader sees once the answer flows (the
    x axis of throughput-interactivity plots)."""
    speeds = [1 / r.tpot_s for r in level.succeeded if r.tpot_s]
    return statistics.median(speeds) if speeds else None


def serving_frame(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> pd.DataFrame:
    """Per level: output tokens/s in all, and of the requests that met both SLOs (goodput), against speed per user;
    with the server's own prefill/decode per request where it reports them."""
    rows = []
    for level in result.levels:
        good = [r for r in level.records if r.meets_slos(ttft_slo_s, itl_slo_s)]
        server = level.server
        base = {
            "concurrency": level.concurrency,
            "per_user_tokens_per_s": per_user_tokens_per_s(level),
            "server_prefill_ms": _ms(server.per_request_s("prefill")) if server else None,
            "server_decode_ms": _ms(server.per_request_s("decode")) if server else None,
            "label": f"c={level.concurrency}",
        }
        total = level.total_output_tokens_per_s
        goodput = sum(r.output_tokens for r in good) / level.wall_s if level.wall_s > 0 else None
        rows.append({**base, "series": "all requests", "tokens_per_s": total})
        rows.append({**base, "series": "meeting both SLOs (goodput)", "tokens_per_s": goodput})
    return pd.DataFrame(rows)


SERIES = ["all requests", "meeting both SLOs (goodput)"]


def serving_chart(frame: pd.DataFrame, itl_slo_s: float) -> alt.LayerChart:
    """Throughput in all (y) against speed per user (x), one point per concurrency: more in flight buys throughput
    and costs each user speed. The goodput line counts only requests that met both SLOs; the dashed rule is the speed
    an ITL SLO asks for (1 / ITL SLO): points left of it are too slow for it."""
    min_speed = 1 / itl_slo_s
    x = alt.X("per_user_tokens_per_s:Q", title=two_lines("speed per user (tokens/s, 1 / TPOT, measured)"))
    y = alt.Y("tokens_per_s:Q", title=two_lines("throughput (output tokens/s, measured)"))
    color = alt.Color(
        "series:N",
        scale=alt.Scale(domain=SERIES, range=["#4292c6", "#1b9e77"]),
        legend=alt.Legend(orient="top", title=None, labelLimit=0),
    )
    tooltip = [
        "concurrency:Q",
        "series:N",
        alt.Tooltip("tokens_per_s:Q", format=".1f"),
        alt.Tooltip("per_user_tokens_per_s:Q", format=".1f"),
        alt.Tooltip("server_prefill_ms:Q", title="server prefill per request (ms, reported)", format=".1f"),
        alt.Tooltip("server_decode_ms:Q", title="server decode per request (ms, reported)", format=".1f"),
    ]
    base = alt.Chart(frame).encode(x=x, y=y, color=color)
    point = alt.OverlayMarkDef(size=90, filled=True)
    lines = base.mark_line(point=point).encode(order="concurrency:Q", tooltip=tooltip)
    labels = (
        base.transform_filter("datum.series == 'all requests'")
        .mark_text(align="left", dx=8, dy=-8, color="#333333")
        .encode(text="label:N")
    )
    rule_frame = pd.DataFrame({"speed": [min_speed], "label": [f"ITL SLO: {min_speed:.0f} tokens/s per user"]})
    rule = alt.Chart(rule_frame).mark_rule(color=SLO_RULE_COLOR, strokeDash=[6, 3], strokeWidth=2).encode(x="speed:Q")
    rule_text = (
        alt.Chart(rule_frame)
        .mark_text(align="right", dx=-4, baseline="top", color=SLO_RULE_COLOR)  # inside: the rule may be the edge
        .encode(x="speed:Q", y=alt.value(0), text="label:N")
    )
    return (lines + labels + rule + rule_text).properties(height=360, title="Throughput against speed per user")


# --- the engine on the roofline --------------------------------------------------------------------------------------
def engine_per_token_frame(result: SweepResult) -> pd.DataFrame:
    """Per level where the engine publishes its estimates: FLOPs and bytes read per token it computed, their ratio
    (the arithmetic intensity the engine itself models) and FLOP/s over the level's wall time."""
    rows = []
    for level in result.levels:
        server = level.server
        flops, read = (server.per_token(n) if server else None for n in ("flops", "read_bytes"))
        if flops is None or read is None or server is None:
            continue
        rows.append(
            {
                "concurrency": level.concurrency,
                "flops_per_token": flops,
                "read_bytes_per_token": read,
                "intensity_flops_per_byte": flops / read,
                "flops_per_s": (server.counter("flops") or 0.0) / level.wall_s if level.wall_s > 0 else None,
                "tokens_computed": server.tokens_computed,
                "source": MODELLED,
            }
        )
    return pd.DataFrame(rows)


def engine_roofline_frame(roofline: pd.DataFrame, engine: pd.DataFrame) -> pd.DataFrame:
    """Our passes' roofline rows (`explorer.charts.roofline.roofline_frame`) with the engine's points added as kind
    'engine': its own FLOP/byte per token against FLOP/s over each level's wall time."""
    rows = engine.assign(kind="engine", phase=[f"engine, c={c}" for c in engine["concurrency"]])
    return pd.concat([roofline, rows[["kind", "phase", "intensity_flops_per_byte", "flops_per_s"]]], ignore_index=True)


def engine_roofline_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """The Cost page's roofline of our passes, with the engine's levels as black diamonds on it."""
    engine = (
        alt.Chart(frame)
        .transform_filter("datum.kind == 'engine'")
        .mark_point(shape="diamond", size=160, filled=True, color="#000000")
        .encode(
            x="intensity_flops_per_byte:Q",
            y="flops_per_s:Q",
            tooltip=[
                alt.Tooltip("phase:N", title="point"),
                alt.Tooltip("intensity_flops_per_byte:Q", title="FLOP/byte (engine's estimate)", format=".2f"),
                alt.Tooltip("flops_per_s:Q", title="FLOP/s (estimate / measured wall)", format=".3~s"),
            ],
        )
    )
    return roofline_chart(frame) + engine
