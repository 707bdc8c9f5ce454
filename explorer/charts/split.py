"""The split-phases what-if's builders (At scale): requests/s per GPU meeting both SLOs against the arrival rate, one
line per layout, with the share meeting them against DistServe's 90 % target; and each layout's TTFT and TPOT at one
rate against the session's SLOs. Frames from `explorer.scale.split_whatif.SplitResult`."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.latency import SLO_RULE_COLOR
from explorer.scale.split import ATTAINMENT_TARGET
from explorer.scale.split_whatif import SplitResult

LAYOUT_RANGE = ["#d95f02", "#e6ab02", "#1b9e77", "#7570b3"]  # colocated orange/yellow, disaggregated green


def goodput_frame(result: SplitResult) -> pd.DataFrame:
    """One row per layout and rate: the share of requests meeting both SLOs, and requests/s per GPU meeting them."""
    rows = [
        {
            "layout": c.layout.label,
            "gpus": c.gpus,
            "rate_per_s": rate,
            "attainment": share,
            "ttft_met": ttft,
            "tpot_met": tpot,
            "met_per_gpu_per_s": met,
            "goodput_per_gpu": c.goodput_per_gpu,
            "source": result.steps.source,
        }
        for c in result.curves
        for rate, share, ttft, tpot, met in zip(
            c.rates_per_s, c.attainment, c.ttft_met, c.tpot_met, c.met_per_gpu(), strict=True
        )
    ]
    return pd.DataFrame(rows)


def _layout_color(frame: pd.DataFrame) -> alt.Color:
    domain = list(dict.fromkeys(frame["layout"]))
    return alt.Color("layout:N", title=None, scale=alt.Scale(domain=domain, range=LAYOUT_RANGE[: len(domain)])).legend(
        orient="top", labelLimit=0
    )


def goodput_chart(frame: pd.DataFrame) -> alt.VConcatChart:
    """Top: requests/s per GPU meeting both SLOs against the arrival rate (the curve that flattens and falls where a
    layout stops keeping up). Bottom: the share meeting both, with DistServe's 90 % target as a rule: a layout's
    goodput is the rate where its line crosses it."""
    color = _layout_color(frame)
    x = alt.X("rate_per_s:Q", title="arrival rate (requests/s, all GPUs)")
    met = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(x, alt.Y("met_per_gpu_per_s:Q", title="meeting both SLOs (requests/s per GPU)"), color)
        .properties(height=220)
    )
    share = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(x, alt.Y("attainment:Q", title="share meeting both SLOs", axis=alt.Axis(format="%")), color)
    )
    target = (
        alt.Chart(pd.DataFrame({"target": [ATTAINMENT_TARGET]}))
        .mark_rule(color=SLO_RULE_COLOR, strokeDash=[4, 3])
        .encode(y="target:Q")
    )
    return alt.vconcat(met, (share + target).properties(height=160))


def distribution_frame(result: SplitResult) -> pd.DataFrame:
    """Every simulated request at the chosen rate, per layout: its TTFT and TPOT and whether each met its SLO."""
    inputs = result.inputs
    rows = [
        {
            "layout": label,
            "rate_per_s": result.rate_per_s,
            "ttft_ms": o.ttft_s * 1e3,
            "tpot_ms": o.tpot_s * 1e3,
            "queue_ms": o.queue_s * 1e3,
            "exposed_transfer_ms": o.exposed_s * 1e3,
            "ttft_met": o.ttft_s < inputs.ttft_slo_s,
            "tpot_met": o.tpot_s < inputs.tpot_slo_s,
            "source": result.steps.source,
        }
        for label, outcomes in result.at_rate.items()
        for o in outcomes
    ]
    return pd.DataFrame(rows)


def distribution_chart(
    frame: pd.DataFrame, ttft_slo_ms: float, tpot_slo_ms: float, source: str = "modelled"
) -> alt.HConcatChart:
    """TTFT and TPOT of every request, one box per layout (min to max), each beside its SLO as a red rule."""
    color = _layout_color(frame)
    order = list(dict.fromkeys(frame["layout"]))  # the layouts in the record's order, not alphabetical

    def panel(field: str, title: str, slo_ms: float) -> alt.LayerChart:
        boxes = (
            alt.Chart(frame)
            .mark_boxplot(extent="min-max")
            .encode(
                alt.X("layout:N", title=None, sort=order, axis=alt.Axis(labelAngle=-20)),
                alt.Y(f"{field}:Q", title=title),
            )
            .encode(color)
        )
        rule = alt.Chart(pd.DataFrame({"slo": [slo_ms]})).mark_rule(color=SLO_RULE_COLOR).encode(y="slo:Q")
        return (boxes + rule).properties(width=220, height=220)

    return alt.hconcat(
        panel("ttft_ms", f"TTFT (ms, {source})", ttft_slo_ms), panel("tpot_ms", f"TPOT (ms, {source})", tpot_slo_ms)
    )
