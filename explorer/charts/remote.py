"""The Endpoint page's builders: a concurrency sweep's levels as a table, its TTFT/ITL percentiles and its
throughput-latency trade-off against the SLOs, each request, and the local instrumented run beside the remote one."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.latency import PERCENTILE_COLOR, SLO_RANGE, SLO_RULE_COLOR
from explorer.core.trace import Trace
from explorer.core.units import to_ms
from explorer.remote.records import PERCENTILES, SweepResult

PERCENTILE_LABELS = [f"p{q}" for q in PERCENTILES]
PERCENTILE_RANGE = ["#9ecae1", "#4292c6", "#08306b"]  # p50 light to p99 dark: one quantity, deeper into its tail
GOODPUT_DOMAIN = ["every request met both SLOs", "some requests missed an SLO"]
PANEL_WIDTH = 320
PANEL_HEIGHT = 260
LABEL_ROOM = 1.35  # the throughput axis runs to 1.35x the best level, leaving room for its label


def _ms_or_none(seconds: float | None) -> float | None:
    return None if seconds is None else to_ms(seconds)


# --- the levels --------------------------------------------------------------------------------------------------
def levels_frame(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> pd.DataFrame:
    """One row per concurrency level: percentiles in ms, throughput and goodput against the given SLOs."""
    rows = []
    for level in result.levels:
        s = level.summary(ttft_slo_s, itl_slo_s)
        rows.append(
            {
                "concurrency": level.concurrency,
                "succeeded": s.succeeded,
                "failed": s.failed,
                **{f"ttft_p{q}_ms": _ms_or_none(v) for q, v in zip(PERCENTILES, s.ttft_percentiles_s)},
                **{f"itl_p{q}_ms": _ms_or_none(v) for q, v in zip(PERCENTILES, s.itl_percentiles_s)},
                "output_tokens": s.output_tokens,
                "total_output_tokens_per_s": s.total_output_tokens_per_s,
                "requests_per_s": s.requests_per_s,
                "goodput_requests": s.goodput_requests,
                "goodput_pct": None if s.goodput_fraction is None else 100 * s.goodput_fraction,
                "wall_s": level.wall_s,
            }
        )
    return pd.DataFrame(rows)


def percentiles_frame(result: SweepResult) -> pd.DataFrame:
    """Long form for the percentile chart: one row per level, metric (TTFT or ITL) and percentile."""
    rows = [
        {
            "concurrency": level.concurrency,
            "metric": metric,
            "percentile": f"p{q}",
            "value_ms": value_ms,
        }
        for level in result.levels
        for metric, of in (("TTFT", level.ttft_percentile_s), ("ITL", level.itl_percentile_s))
        for q in PERCENTILES
        if (value_ms := _ms_or_none(of(q))) is not None
    ]
    return pd.DataFrame(rows, columns=["concurrency", "metric", "percentile", "value_ms"])


def _slo_rule(slo_ms: float, label: str, axis: str = "y") -> alt.LayerChart:
    frame = pd.DataFrame({"slo_ms": [slo_ms], "label": [label]})
    rule = alt.Chart(frame).mark_rule(color=SLO_RULE_COLOR, strokeDash=[6, 3], strokeWidth=2)
    text = alt.Chart(frame).mark_text(align="left", baseline="bottom", dx=4, dy=-2, color=SLO_RULE_COLOR)
    if axis == "y":
        return rule.encode(y="slo_ms:Q") + text.encode(x=alt.value(0), y="slo_ms:Q", text="label:N")
    return rule.encode(x="slo_ms:Q") + text.encode(y=alt.value(0), x="slo_ms:Q", text="label:N")


def _percentile_panel(frame: pd.DataFrame, metric: str, slo_ms: float) -> alt.LayerChart:
    lines = (
        alt.Chart(frame[frame["metric"] == metric])
        .mark_line(point=True)
        .encode(
            x=alt.X("concurrency:O", title="requests in flight (concurrency)", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("value_ms:Q", title=f"{metric} (ms, measured)"),
            color=alt.Color(
                "percentile:N",
                scale=alt.Scale(domain=PERCENTILE_LABELS, range=PERCENTILE_RANGE),
                sort=PERCENTILE_LABELS,
                legend=alt.Legend(orient="top", title=None),
            ),
            tooltip=["concurrency:O", "percentile:N", alt.Tooltip("value_ms:Q", format=".1f", title=f"{metric} ms")],
        )
    )
    title = f"{metric}: {'time to the first token' if metric == 'TTFT' else 'gap before each later token'}"
    return (lines + _slo_rule(slo_ms, f"{metric} SLO {slo_ms:g} ms")).properties(
        title=title, width=PANEL_WIDTH, height=PANEL_HEIGHT
    )


def percentiles_chart(frame: pd.DataFrame, ttft_slo_s: float, itl_slo_s: float) -> alt.HConcatChart:
    """TTFT and ITL percentiles by concurrency, side by side, each with its SLO as a dashed red rule."""
    return alt.hconcat(
        _percentile_panel(frame, "TTFT", to_ms(ttft_slo_s)), _percentile_panel(frame, "ITL", to_ms(itl_slo_s))
    ).resolve_scale(color="shared")


# --- throughput against latency ----------------------------------------------------------------------------------
def tradeoff_frame(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> pd.DataFrame:
    """Per level: total output tokens/s against p99 TTFT and p99 ITL, with goodput for the label and colour."""
    rows = []
    for level in result.levels:
        s = level.summary(ttft_slo_s, itl_slo_s)
        good, total = s.goodput_requests, s.requests
        rows.append(
            {
                "concurrency": level.concurrency,
                "total_output_tokens_per_s": s.total_output_tokens_per_s,
                "ttft_p99_ms": _ms_or_none(s.ttft_p99_s),
                "itl_p99_ms": _ms_or_none(s.itl_p99_s),
                "goodput_requests": good,
                "requests": total,
                "goodput_per_s": s.goodput_requests_per_s,
                "goodput": GOODPUT_DOMAIN[0] if good == total else GOODPUT_DOMAIN[1],
                "label": f"c={level.concurrency} · {good}/{total} good",
            }
        )
    return pd.DataFrame(rows)


def _tradeoff_panel(frame: pd.DataFrame, field: str, metric: str, slo_ms: float) -> alt.LayerChart:
    # Room on the right: each level's label sits right of its point and must not be cut at the plot's edge.
    x_max = float(frame["total_output_tokens_per_s"].max() or 0) * LABEL_ROOM or 1.0
    base = alt.Chart(frame).encode(
        x=alt.X(
            "total_output_tokens_per_s:Q",
            title="total output tokens/s, all requests (measured)",
            scale=alt.Scale(domain=[0, x_max]),
        ),
        y=alt.Y(f"{field}:Q", title=f"p99 {metric} (ms, measured)"),
    )
    path = base.mark_line(color=PERCENTILE_COLOR, strokeDash=[2, 2]).encode(order="concurrency:Q")
    points = base.mark_point(size=110, filled=True).encode(
        color=alt.Color(
            "goodput:N",
            scale=alt.Scale(domain=GOODPUT_DOMAIN, range=SLO_RANGE),
            legend=alt.Legend(orient="top", title=None, labelLimit=0),
        ),
        tooltip=[
            "concurrency:Q",
            alt.Tooltip("total_output_tokens_per_s:Q", format=".1f"),
            alt.Tooltip(f"{field}:Q", format=".1f"),
            "goodput_requests:Q",
            "requests:Q",
            alt.Tooltip("goodput_per_s:Q", format=".2f", title="good requests/s"),
        ],
    )
    labels = base.mark_text(align="left", dx=8, dy=-8, color="#333333").encode(text="label:N")
    return (path + points + labels + _slo_rule(slo_ms, f"{metric} SLO {slo_ms:g} ms")).properties(
        title=f"Throughput against p99 {metric}", width=PANEL_WIDTH, height=PANEL_HEIGHT
    )


def tradeoff_chart(frame: pd.DataFrame, ttft_slo_s: float, itl_slo_s: float) -> alt.HConcatChart:
    """Each level a point (tokens/s, p99 latency), in concurrency order: more in flight buys throughput with
    latency; green where every request met both SLOs (goodput = all), red where some did not."""
    return alt.hconcat(
        _tradeoff_panel(frame, "itl_p99_ms", "ITL", to_ms(itl_slo_s)),
        _tradeoff_panel(frame, "ttft_p99_ms", "TTFT", to_ms(ttft_slo_s)),
    ).resolve_scale(color="shared")


# --- requests ----------------------------------------------------------------------------------------------------
def requests_frame(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> pd.DataFrame:
    """Every request of every level, failures included with their one-line reason."""
    rows = [
        {
            "concurrency": level.concurrency,
            "request": r.index,
            "sent_at_s": r.start_s,
            "ttft_ms": _ms_or_none(r.ttft_s),
            "itl_p50_ms": _ms_or_none(r.itl_p50_s),
            "itl_p99_ms": _ms_or_none(r.itl_p99_s),
            "tpot_ms": _ms_or_none(r.tpot_s),
            "e2e_ms": _ms_or_none(r.e2e_s),
            "chunks": len(r.chunk_arrivals_s),
            "output_tokens": r.output_tokens,
            "chunk_tokens_total": r.chunk_tokens_total,
            "tokens_disagree": r.tokens_disagree,  # the chunks' counts do not sum to the server's usage total
            "tokens_from": f"{r.output_tokens_from} / {r.chunk_tokens_from}",
            "tokens_per_s": r.tokens_per_s,
            "meets_slos": r.meets_slos(ttft_slo_s, itl_slo_s),
            "error": r.error,
        }
        for level in result.levels
        for r in level.records
    ]
    return pd.DataFrame(rows)


# --- beside the local run ----------------------------------------------------------------------------------------
def local_vs_remote_frame(result: SweepResult, local: Trace | None) -> pd.DataFrame:
    """TTFT p50 and ITL p50 of each remote level and, when there is one, of this session's local instrumented run."""
    rows = [
        {
            "where": f"remote, concurrency {level.concurrency}",
            "ttft_p50_ms": _ms_or_none(level.ttft_percentile_s(50)),
            "itl_p50_ms": _ms_or_none(level.itl_percentile_s(50)),
            "what_ttft_holds": "connect + queue + prefill + network",
        }
        for level in result.levels
    ]
    if local is not None:
        rows.insert(
            0,
            {
                "where": f"local instrumented run ({local.model.display_name})",
                "ttft_p50_ms": to_ms(local.ttft_s),
                "itl_p50_ms": _ms_or_none(local.itl_p50_s),
                "what_ttft_holds": "tokenize + one prefill pass",
            },
        )
    return pd.DataFrame(rows, columns=["where", "ttft_p50_ms", "itl_p50_ms", "what_ttft_holds"])
