"""The Latency page's builders: ITL per token and its distribution against SLOs, SLO checks over repeats, and runs
compared."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import altair as alt
import pandas as pd

from explorer.charts.common import display_token
from explorer.charts.cost import decode_median_text
from explorer.charts.kv import kv_traffic_text
from explorer.core.roofline import Cost, kv_cache_bytes, pass_cost
from explorer.core.slo import REFERENCE_ITL_SLO_S, REFERENCE_TTFT_SLO_S, figure_ms
from explorer.core.trace import Trace, percentile
from explorer.core.units import human_bytes, to_ms

DEFAULT_TTFT_SLO_S = REFERENCE_TTFT_SLO_S  # the CLI sweep's defaults; the app's views start from the run's own
DEFAULT_ITL_SLO_S = REFERENCE_ITL_SLO_S  # (explorer.core.slo), with this one drawn as a named reference line
REFERENCE_COLOR = "#777777"
SLO_DOMAIN = ["under the SLO", "at or over the SLO"]
SLO_RANGE = ["#1b9e77", "#e41a1c"]  # decode green when within the ITL SLO, red when not
SLO_RULE_COLOR = "#e41a1c"
PERCENTILE_COLOR = "#555555"
# Earlier runs light, the current run darkest: an order, not a phase, so purples rather than the phase colours.
RUN_RANGE = ["#bcbddc", "#9e9ac8", "#807dba", "#6a51a3", "#54278f", "#3f007d"]  # 6: HISTORY_LENGTH 5 + current
HISTOGRAM_BINS = 30


@dataclass(frozen=True)
class LabelledTrace:
    """A run to compare: its label for legends (Altair text only, never markdown) and its trace."""

    label: str
    trace: Trace


# --- what a decode gap waits on --------------------------------------------------------------------------------------
def kv_share(cost: Cost) -> float:
    """The KV traffic's part of a pass's modelled bytes (the rest is the weights)."""
    return cost.kv_bytes_moved / cost.bytes_moved


def decode_bytes_sentence(trace: Trace) -> str:
    """What a decode pass moves at this run's context and at the model's maximum, by the app's own KV model: how much
    a gap can grow with the context is a number here, not a trend asserted for every model and length. The KV figure
    is traffic (read + written), said beside the cache it moves through (the KV cache page shows the cache's size)."""
    model = trace.model
    longest = pass_cost(model, trace.device, 1, cache_len_before=model.max_context - 1)
    at_max = f"at the model's maximum of {model.max_context:,} tokens"
    moved = (
        f"{kv_traffic_text(longest.kv_bytes_moved, kv_cache_bytes(model, model.max_context))} against "
        f"{human_bytes(longest.weight_bytes_read)} of weights ({kv_share(longest):.0%} KV)"
    )
    if not trace.decodes:
        return f"Modelled, a decode pass of this model {at_max} would move {moved}."
    last = trace.decodes[-1]
    return (
        f"Modelled, this run's last decode pass (at {last.cache_len_after:,} tokens) moved "
        f"{kv_traffic_text(last.cost.kv_bytes_moved, last.kv_cache_bytes)} against "
        f"{human_bytes(last.cost.weight_bytes_read)} of weights ({kv_share(last.cost):.1%} KV); {at_max}, {moved}."
    )


def decode_gap_sentence(trace: Trace, measured: str = "measured") -> str:
    """What each gap is: one decode pass, at the decode median every page shows (`Trace.decode_median_s`), and the
    sampling after it."""
    median = decode_median_text(trace, measured)
    return "Each gap is one decode pass" + (f", {median}," if median else "") + " and its sampling"


# --- one run ---------------------------------------------------------------------------------------------------------
def itl_frame(trace: Trace, itl_slo_s: float) -> pd.DataFrame:
    """One row per token after the first: the measured gap before it and whether that gap met the ITL SLO."""
    # Token k (0-based) is sampled by pass k; itl_s[k - 1] is the gap between tokens k - 1 and k.
    rows = [
        {
            "token_index": k,
            "pass": k,
            "token": display_token(trace.passes[k].token_text),
            "itl_ms": to_ms(gap_s),
            "over_slo": not gap_s < itl_slo_s,
            "vs_slo": SLO_DOMAIN[0] if gap_s < itl_slo_s else SLO_DOMAIN[1],
        }
        for k, gap_s in enumerate(trace.itl_s, start=1)
    ]
    return pd.DataFrame(rows, columns=["token_index", "pass", "token", "itl_ms", "over_slo", "vs_slo"])


def itl_distribution_frame(trace: Trace) -> pd.DataFrame:
    """Every repeat's gaps together: the ITL distribution over all repeats."""
    rows = [
        {"repeat": r + 1, "token_index": k, "itl_ms": to_ms(b.token_s - a.token_s)}
        for r, passes in enumerate(trace.repeats)
        for k, (a, b) in enumerate(zip(passes, passes[1:]), start=1)
    ]
    return pd.DataFrame(rows, columns=["repeat", "token_index", "itl_ms"])


def repeats_ttft_frame(trace: Trace, ttft_slo_s: float) -> pd.DataFrame:
    """Each repeat's TTFT and E2E, and which repeat the pass-by-pass pages show."""
    return pd.DataFrame(
        {
            "repeat": r + 1,
            "ttft_ms": to_ms(passes[0].token_s),
            "e2e_ms": to_ms(passes[-1].token_s),
            "shown": r == trace.shown_repeat,
            "passes_slo": passes[0].token_s < ttft_slo_s,
        }
        for r, passes in enumerate(trace.repeats)
    )


def repeats_ttft_chart(frame: pd.DataFrame, ttft_slo_s: float) -> alt.LayerChart:
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("repeat:O", title="repeat", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("ttft_ms:Q", title="TTFT (ms, measured)"),
            color=alt.Color(
                "shown:N",
                scale=alt.Scale(domain=[True, False], range=["#d95f02", "#fdae6b"]),
                title="shown pass by pass",
                legend=alt.Legend(orient="top"),
            ),
            tooltip=["repeat:O", alt.Tooltip("ttft_ms:Q", format=".2f"), alt.Tooltip("e2e_ms:Q", format=".2f")],
        )
    )
    return (bars + _slo_rule(to_ms(ttft_slo_s), slo_label("TTFT", to_ms(ttft_slo_s)))).properties(height=220)


# The figures checked against an SLO, each read per repeat (core.trace.RepeatSpreads) as the metrics show them.
SLO_FIGURES = [("TTFT", "ttft_s"), ("ITL p50", "itl_p50_s"), ("ITL p90", "itl_p90_s"), ("ITL p99", "itl_p99_s")]
POOLED_PERCENTILES = [50, 90, 99]


def repeat_slo_frame(trace: Trace, ttft_slo_s: float, itl_slo_s: float) -> pd.DataFrame:
    """TTFT and ITL p50/p90/p99 against their SLOs as the metrics show them: each taken per repeat, then the median
    (with min and max); `passes` is None where there is no value (no decodes)."""
    rows, spreads = [], trace.spreads
    for metric, figure in SLO_FIGURES:
        spread, slo_s = getattr(spreads, figure), ttft_slo_s if figure == "ttft_s" else itl_slo_s
        rows.append(
            {
                "metric": metric,
                "value_ms": to_ms(spread.median) if spread else None,
                "min_ms": to_ms(spread.low) if spread else None,
                "max_ms": to_ms(spread.high) if spread else None,
                "repeats": spread.samples if spread else 0,
                "slo_ms": to_ms(slo_s),
                "passes": bool(spread.median < slo_s) if spread else None,  # strict, as written: "p99 ITL < 50 ms"
            }
        )
    return pd.DataFrame(rows)


def pooled_percentiles_frame(trace: Trace) -> pd.DataFrame:
    """The ITL p50/p90/p99 of every repeat's gaps in one pool, for the histogram's rules (they can differ from the
    per-repeat medians of `repeat_slo_frame`); no rows without decodes."""
    rows = [
        {"metric": f"ITL p{q}", "value_ms": to_ms(value_s)}
        for q in POOLED_PERCENTILES
        if (value_s := percentile(trace.all_itl_s, q)) is not None
    ]
    return pd.DataFrame(rows, columns=["metric", "value_ms"])


def slo_verdict(metric: str, value_ms: float | None, slo_ms: float) -> str:
    """One line such as 'p99 ITL 47.00 ms < 50.00 ms: PASS'."""
    if value_ms is None or pd.isna(value_ms):
        return f"{metric}: n/a (no value in this run)"
    if value_ms < slo_ms:
        return f"{metric} {value_ms:.2f} ms < {slo_ms:.2f} ms: PASS"
    return f"{metric} {value_ms:.2f} ms ≥ {slo_ms:.2f} ms: FAIL"


def slo_label(metric: str, slo_ms: float) -> str:
    return f"{metric} SLO {figure_ms(slo_ms)} ms"


def _slo_rule(slo_ms: float, label: str, reference_ms: float | None = None) -> alt.Chart:
    """The SLO as a red dashed rule and, given `reference_ms`, the chat reference as a grey dotted one: named in a
    legend of their own, never by text drawn over the data."""
    lines = [(label, slo_ms, SLO_RULE_COLOR, [6, 3])]
    if reference_ms is not None:
        lines.append((f"chat reference {reference_ms:.0f} ms", reference_ms, REFERENCE_COLOR, [2, 3]))
    frame = pd.DataFrame({"line": [n for n, *_ in lines], "slo_ms": [v for _, v, *_ in lines]})
    names = [n for n, *_ in lines]
    return (
        alt.Chart(frame)
        .mark_rule(strokeWidth=2)
        .encode(
            y="slo_ms:Q",
            stroke=alt.Stroke(
                "line:N",
                scale=alt.Scale(domain=names, range=[c for *_, c, _ in lines]),
                legend=alt.Legend(title=None, orient="top", labelLimit=0, symbolType="stroke"),
            ),
            strokeDash=alt.StrokeDash(
                "line:N", scale=alt.Scale(domain=names, range=[d for *_, d in lines]), legend=None
            ),
            tooltip=["line:N", alt.Tooltip("slo_ms:Q", format=".1f")],
        )
    )


def itl_chart(frame: pd.DataFrame, itl_slo_s: float) -> alt.LayerChart:
    """ITL bars by token index, red where a gap missed the SLO, with the SLO as a dashed rule."""
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("token_index:O", title="generated token (token 0 arrives at TTFT)"),
            y=alt.Y("itl_ms:Q", title="inter-token latency (ms, measured)"),
            color=alt.Color(
                "vs_slo:N",
                scale=alt.Scale(domain=SLO_DOMAIN, range=SLO_RANGE),
                title="ITL",
                legend=alt.Legend(orient="top"),
            ),
            tooltip=["token_index:O", "token:N", alt.Tooltip("itl_ms:Q", format=".2f"), "vs_slo:N"],
        )
    )
    slo_ms = to_ms(itl_slo_s)
    reference_ms = to_ms(REFERENCE_ITL_SLO_S)
    rules = _slo_rule(slo_ms, slo_label("ITL", slo_ms), None if reference_ms == slo_ms else reference_ms)
    return (bars + rules).properties(height=280)


HISTOGRAM_TITLE = "How often each inter-token latency occurs"
PERCENTILE_SHADES = ["#aaaaaa", "#777777", "#333333"]  # p50, p90, p99: darker further into the tail
PERCENTILE_DASHES = [[1, 0], [4, 2], [1, 2]]


def histogram_lines_frame(percentiles: pd.DataFrame, itl_slo_s: float) -> pd.DataFrame:
    """The rules over the histogram: each pooled percentile and the ITL SLO, named with its value for the legend."""
    slo_ms = to_ms(itl_slo_s)
    rows = [
        {"line": f"{row.metric} {figure_ms(row.value_ms)} ms", "metric": row.metric, "value_ms": row.value_ms}
        for row in percentiles.itertuples(index=False)
    ]
    rows.append({"line": slo_label("ITL", slo_ms), "metric": "ITL SLO", "value_ms": slo_ms})
    return pd.DataFrame(rows, columns=["line", "metric", "value_ms"])


def itl_histogram_chart(frame: pd.DataFrame, percentiles: pd.DataFrame, itl_slo_s: float) -> alt.LayerChart:
    """The ITL distribution under its title, with its pooled p50/p90/p99 (`pooled_percentiles_frame`) as grey rules
    and the ITL SLO as a red one, each named with its value in the legend above the plot: labels drawn inside it sat
    on the bars, on the SLO line and on each other."""
    histogram = (
        alt.Chart(frame)
        .mark_bar(color=SLO_RANGE[0], opacity=0.8)
        .encode(
            x=alt.X("itl_ms:Q", bin=alt.Bin(maxbins=HISTOGRAM_BINS), title="inter-token latency (ms, measured)"),
            y=alt.Y("count():Q", title="tokens", axis=alt.Axis(tickMinStep=1, format="d")),  # counts are whole
        )
    )
    lines = histogram_lines_frame(percentiles, itl_slo_s)
    names = lines["line"].tolist()
    shades = PERCENTILE_SHADES[: len(names) - 1] + [SLO_RULE_COLOR]
    dashes = PERCENTILE_DASHES[: len(names) - 1] + [[6, 3]]
    rules = (
        alt.Chart(lines)
        .mark_rule(strokeWidth=2)
        .encode(
            x="value_ms:Q",
            stroke=alt.Stroke(
                "line:N",
                scale=alt.Scale(domain=names, range=shades),
                legend=alt.Legend(title=None, orient="top", labelLimit=0, symbolType="stroke"),
            ),
            strokeDash=alt.StrokeDash("line:N", scale=alt.Scale(domain=names, range=dashes), legend=None),
            tooltip=[alt.Tooltip("line:N", title="line")],
        )
    )
    return (histogram + rules).properties(height=240, title=HISTOGRAM_TITLE)


# --- runs compared ---------------------------------------------------------------------------------------------------
def run_colors(count: int) -> list[str]:
    """`count` purples spread from light to darkest (the newest run), so two runs are never near-identical shades."""
    if count <= 1:
        return RUN_RANGE[-1:] * count
    last = len(RUN_RANGE) - 1
    return [RUN_RANGE[last - round((count - 1 - i) * last / (count - 1))] for i in range(count)]


def runs_itl_frame(runs: Sequence[LabelledTrace]) -> pd.DataFrame:
    """Every run's ITL per token, oldest run first; the last run is the current one."""
    rows = [
        {
            "run": order,
            "label": run.label,
            "current": order == len(runs) - 1,
            "token_index": k,
            "itl_ms": to_ms(gap_s),
        }
        for order, run in enumerate(runs)
        for k, gap_s in enumerate(run.trace.itl_s, start=1)
    ]
    return pd.DataFrame(rows, columns=["run", "label", "current", "token_index", "itl_ms"])


def runs_itl_chart(frame: pd.DataFrame, labels: Sequence[str], itl_slo_s: float) -> alt.LayerChart:
    """One ITL line per run, the current one darkest and thickest, with the ITL SLO rule."""
    base = alt.Chart(frame).encode(
        x=alt.X("token_index:Q", title="generated token", axis=alt.Axis(tickMinStep=1)),
        # Short: the runs' legend above takes some of the height, and a longer title ran past the plot when presenting.
        y=alt.Y("itl_ms:Q", title="ITL (ms, measured)"),
        color=alt.Color(
            "label:N",
            scale=alt.Scale(domain=list(labels), range=run_colors(len(labels))),
            sort=list(labels),
            title="run",
            legend=alt.Legend(orient="top", columns=2, labelLimit=0),
        ),
        tooltip=["label:N", "token_index:Q", alt.Tooltip("itl_ms:Q", format=".2f")],
    )
    # Two layers rather than a conditional width: a line takes one width per series, so split by series.
    earlier = base.transform_filter("!datum.current").mark_line(point=True, strokeWidth=1.5)
    current = base.transform_filter("datum.current").mark_line(point=True, strokeWidth=3)
    lines = earlier + current
    slo_ms = to_ms(itl_slo_s)
    return (lines + _slo_rule(slo_ms, slo_label("ITL", slo_ms))).properties(height=280)


def runs_ttft_frame(runs: Sequence[LabelledTrace], ttft_slo_s: float) -> pd.DataFrame:
    """Each run's TTFT (and its prompt length, which prefill time grows with) against the TTFT SLO."""
    return pd.DataFrame(
        {
            "run": order,
            "label": run.label,
            "current": order == len(runs) - 1,
            "prompt_tokens": run.trace.prompt_len,
            "ttft_ms": to_ms(run.trace.ttft_s),
            "passes": bool(run.trace.ttft_s < ttft_slo_s),
        }
        for order, run in enumerate(runs)
    )


def runs_ttft_chart(frame: pd.DataFrame, ttft_slo_s: float) -> alt.LayerChart:
    """One TTFT bar per run in the run's colour, with the TTFT SLO rule."""
    labels = list(frame["label"])
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("label:N", sort=labels, title=None, axis=alt.Axis(labelAngle=0, labelLimit=160)),
            y=alt.Y("ttft_ms:Q", title="TTFT (ms, measured)"),
            color=alt.Color("label:N", scale=alt.Scale(domain=labels, range=run_colors(len(labels))), legend=None),
            tooltip=["label:N", "prompt_tokens:Q", alt.Tooltip("ttft_ms:Q", format=".2f"), "passes:N"],
        )
    )
    slo_ms = to_ms(ttft_slo_s)
    return (bars + _slo_rule(slo_ms, slo_label("TTFT", slo_ms))).properties(height=240)
