"""The Scheduling page's builders: engine steps, request timelines, the block table, paging's memory, modes compared.

Every `*_frame()` reads a `ScheduleRun` and returns a tidy DataFrame (the data behind the chart, offered as CSV);
every `*_chart()` draws one such frame. Prefill and decode keep the colours of every other chart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import altair as alt
import pandas as pd

from explorer.charts.common import PHASE_COLOR, PHASE_RANGE, two_lines
from explorer.core.trace import percentile
from explorer.core.units import MB, to_ms
from explorer.labs.schedule.paging import memory_steps
from explorer.labs.schedule.records import CONTINUOUS, SEQUENTIAL, STATIC, ScheduleRun, ServedMode, StepRecord

# Requests get colours that are neither the prefill orange nor the decode green, cycled past ten requests.
REQUEST_RANGE = ["#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#843c39", "#7b4173"]
SHARED, SHARED_COLOR = "shared by several", "#000000"
STATE_DOMAIN = ["queued", "prefilling", "decoding", "done"]
STATE_RANGE = ["#bdbdbd", PHASE_RANGE[0], PHASE_RANGE[1], "#e5e5e5"]
MODE_DOMAIN = [CONTINUOUS, STATIC, SEQUENTIAL]
MODE_RANGE = ["#6a51a3", "#e7298a", "#737373"]
LAYOUT_DOMAIN = [
    "paged (blocks held)",
    "contiguous, model's max length reserved (primary)",
    "contiguous, prompt + max new tokens reserved (second)",
]
LAYOUT_RANGE = ["#6a51a3", "#636363", "#bdbdbd"]
SHARING_DOMAIN, SHARING_RANGE = ["off", "on"], ["#bdbdbd", "#6a51a3"]


def legend_color(
    field: str, domain: Sequence[str], colors: Sequence[str], title: str | None, *, legend: bool = True
) -> alt.Color:
    """A nominal field coloured from a fixed palette, its legend on the right (long labels kept whole)."""
    shown = alt.Legend(orient="right", labelLimit=0) if legend else None
    return alt.Color(f"{field}:N", scale=alt.Scale(domain=list(domain), range=list(colors)), title=title, legend=shown)


def request_colors(ids: Sequence[str]) -> list[str]:
    return [REQUEST_RANGE[i % len(REQUEST_RANGE)] for i in range(len(ids))]


def step_label(kind: str, chunked: bool) -> str:
    """What a step's column is called on the chart: mixed steps and chunked prefills are named."""
    return " + ".join(([kind] if kind == "mixed" else []) + (["chunk"] if chunked else []))


# --- engine steps ----------------------------------------------------------------------------------------------------
def steps_frame(run: ScheduleRun) -> pd.DataFrame:
    """One row per request per step: its prefill or decode tokens, with the step's kind, label and measured time."""
    return step_entries_frame(run.steps, {r.id: i for i, r in enumerate(run.requests)}, lambda request: request)


def step_entries_frame(
    steps: Sequence[StepRecord], order: dict[str, int], lane_of: Callable[[str], str]
) -> pd.DataFrame:
    """`steps_frame`'s rows for any served steps, each request shown as `lane_of(request)` (the Room's people) and
    ordered by `order` of that lane."""
    rows = []
    for s in steps:
        for e in s.entries:
            lane = lane_of(e.request)
            rows.append(
                {
                    "step": s.index,
                    "request": lane,
                    "request_order": order.get(lane, len(order)),
                    "phase": "prefill" if e.prefill_tokens else "decode",
                    "tokens": e.prefill_tokens + e.decode_tokens,
                    "chunk": e.chunk,
                    "completes_prefill": e.completes_prefill,
                    "kind": s.kind,
                    "label": step_label(s.kind, s.has_partial_prefill),
                    "start_ms": to_ms(s.start_s),
                    "wall_ms": to_ms(s.wall_s),
                    "step_tokens": s.tokens,
                }
            )
    columns = ["step", "request", "request_order", "phase", "tokens", "chunk", "completes_prefill", "kind", "label"]
    return pd.DataFrame(rows, columns=[*columns, "start_ms", "wall_ms", "step_tokens"])


def step_table_frame(run: ScheduleRun) -> pd.DataFrame:
    """One row per step, as the CLI prints it: times, tokens by phase, blocks, and who was in it."""
    return pd.DataFrame(
        {
            "step": s.index,
            "start_ms": to_ms(s.start_s),
            "wall_ms": to_ms(s.wall_s),
            "schedule_ms": to_ms(s.schedule_s),
            "prefill_tokens": s.prefill_tokens,
            "decode_tokens": s.decode_tokens,
            "kind": step_label(s.kind, s.has_partial_prefill) or s.kind,
            "requests": " ".join(
                f"{e.request}:{e.prefill_tokens}p" if e.prefill_tokens else f"{e.request}:d" for e in s.entries
            ),
            "blocks_held": s.blocks_held,
            "free_blocks": s.free_blocks,
            "prefix_hits": " ".join(f"{h.request}:{h.tokens}" for h in s.prefix_hits),
        }
        for s in run.steps
    )


def tokens_per_step(frame: pd.DataFrame, x: alt.X, y_title: str, legend: alt.Legend) -> alt.LayerChart:
    """Tokens per step stacked by request (prefill orange, decode green, white seams between requests), each step
    named when it mixes the phases or carries a chunk of a split prompt: the Scheduling lab's and the Room's."""
    base = alt.Chart(frame)
    bars = base.mark_bar(stroke="white", strokeWidth=1).encode(
        x=x,
        y=alt.Y("sum(tokens):Q", title=y_title, axis=alt.Axis(tickMinStep=1, format="d")),
        color=alt.Color("phase:N", scale=PHASE_COLOR, title="tokens", legend=legend),
        order=alt.Order("request_order:Q"),
        tooltip=["step:O", "request:N", "phase:N", "tokens:Q", "chunk:Q", "label:N"],
    )
    labels = (
        base.transform_aggregate(total="sum(tokens)", groupby=["step", "label"])
        .mark_text(angle=270, align="left", dx=4, color="#333333")
        .encode(x=x, y="total:Q", text="label:N")
    )
    return bars + labels


def steps_chart(frame: pd.DataFrame) -> alt.VConcatChart:
    """Tokens per step stacked by request (`tokens_per_step`); below, each step's measured time."""
    base = alt.Chart(frame)
    x = alt.X("step:O", title="engine step (one forward pass each)", axis=alt.Axis(labelAngle=0))
    tokens = tokens_per_step(frame, x, "tokens computed in the step", alt.Legend(orient="top"))
    times = (
        base.transform_aggregate(wall_ms="max(wall_ms)", groupby=["step", "kind"])
        .mark_bar(color="#636363")
        .encode(
            x=x,
            y=alt.Y("wall_ms:Q", title="step time (ms, measured)"),
            tooltip=["step:O", "kind:N", alt.Tooltip("wall_ms:Q", format=".1f")],
        )
        .properties(height=120)
    )
    return alt.vconcat(tokens.properties(height=260), times)


# --- request timelines -----------------------------------------------------------------------------------------------
def timeline_frame(run: ScheduleRun) -> pd.DataFrame:
    """Each request's life as segments (queued, prefilling, decoding, done) and one row per token received."""
    end_ms = to_ms(max(r.finish_s for r in run.requests))
    rows = []
    for r in run.requests:
        bounds = [r.arrival_s, r.start_s, r.first_token_s, r.finish_s]
        for state, start_s, stop_s in zip(STATE_DOMAIN, bounds, bounds[1:]):
            rows.append({"request": r.id, "state": state, "start_ms": to_ms(start_s), "end_ms": to_ms(stop_s)})
        rows.append({"request": r.id, "state": "done", "start_ms": to_ms(r.finish_s), "end_ms": end_ms})
        rows += [{"request": r.id, "state": "token", "start_ms": to_ms(t), "end_ms": to_ms(t)} for t in r.token_times_s]
    return pd.DataFrame(rows, columns=["request", "state", "start_ms", "end_ms"])


def timeline_chart(frame: pd.DataFrame, request_ids: Sequence[str]) -> alt.LayerChart:
    base = alt.Chart(frame)
    y = alt.Y("request:N", sort=list(request_ids), title=None)
    segments = (
        base.transform_filter("datum.state != 'token'")
        .mark_bar()  # no fixed bar height: it would turn the request axis's bands into one cramped row
        .encode(
            x=alt.X("start_ms:Q", title="time since the first arrival (ms, measured)"),
            x2="end_ms:Q",
            y=y,
            color=legend_color("state", STATE_DOMAIN, STATE_RANGE, "state"),
            tooltip=[
                "request:N",
                "state:N",
                alt.Tooltip("start_ms:Q", format=".1f"),
                alt.Tooltip("end_ms:Q", format=".1f"),
            ],
        )
    )
    ticks = (
        base.transform_filter("datum.state == 'token'")
        .mark_tick(color="#000000", thickness=1.5, size=14)
        .encode(
            x="start_ms:Q", y=y, tooltip=["request:N", alt.Tooltip("start_ms:Q", title="token at (ms)", format=".1f")]
        )
    )
    # Streamlit fits the whole chart, axis included, into the height: ~90 px of axis and title, then a row each.
    return (segments + ticks).properties(height=90 + 30 * len(request_ids))


def latency_frame(run: ScheduleRun, ttft_slo_s: float, itl_slo_s: float) -> pd.DataFrame:
    """Per request: TTFT (queue + prefill), ITL p50/p99 and E2E, with pass flags (strictly under the SLO)."""
    return pd.DataFrame(
        {
            "request": r.id,
            "prompt_tokens": r.prompt_len,
            "arrival_ms": to_ms(r.arrival_s),
            "queue_ms": to_ms(r.queue_s),
            "prefill_ms": to_ms(r.prefill_s),
            "ttft_ms": to_ms(r.ttft_s),
            "itl_p50_ms": None if r.itl_p50_s is None else to_ms(r.itl_p50_s),
            "itl_p99_ms": None if r.itl_p99_s is None else to_ms(r.itl_p99_s),
            "e2e_ms": to_ms(r.e2e_s),
            "ttft_within_slo": bool(r.ttft_s < ttft_slo_s),
            "itl_p99_within_slo": None if r.itl_p99_s is None else bool(r.itl_p99_s < itl_slo_s),
        }
        for r in run.requests
    )


# --- the block table -------------------------------------------------------------------------------------------------
def blocks_frame(run: ScheduleRun) -> pd.DataFrame:
    """One row per block held after each step is scheduled: who holds it (a block of several: 'shared by several')."""
    rows = []
    for s in run.steps:
        rows += [
            {
                "step": s.index,
                "block": block,
                "holder": ids[0] if len(ids) == 1 else SHARED,
                "holders": ", ".join(ids),
                "shared": len(ids) > 1,
            }
            for block, ids in s.block_holders.items()
        ]
    return pd.DataFrame(rows, columns=["step", "block", "holder", "holders", "shared"])


def blocks_chart(frame: pd.DataFrame, request_ids: Sequence[str], num_blocks: int) -> alt.Chart:
    """Blocks by step, one cell per block held, coloured by its holder (black: held by several)."""
    domain = [*request_ids, SHARED]
    return (
        alt.Chart(frame)
        .transform_calculate(block_end="datum.block + 1")
        .mark_rect()  # no seams: a few pixels per block, one request's run of blocks reads as one band
        .encode(
            x=alt.X("step:O", title="engine step", axis=alt.Axis(labelAngle=0)),
            # Quantitative, so the axis keeps a few round block numbers however many blocks there are.
            y=alt.Y("block:Q", title=f"KV block (of {num_blocks})", scale=alt.Scale(domain=[0, num_blocks])),
            y2="block_end:Q",
            color=legend_color("holder", domain, [*request_colors(request_ids), SHARED_COLOR], "held by"),
            tooltip=["step:O", "block:Q", "holders:N", "shared:N"],
        )
        .properties(height=min(600, max(220, 90 + 6 * num_blocks)))
    )


def memory_frame(run: ScheduleRun) -> pd.DataFrame:
    """Per step, modelled from the run's block tables (`labs.schedule.paging`): KV bytes of the blocks held (paged)
    against each admitted request reserving the model's maximum length contiguously (what PagedAttention's saving is
    measured against), and against it reserving exactly its prompt + max new tokens, from admission to its end."""
    rows = []
    for m in memory_steps(run):
        for layout, held in zip(LAYOUT_DOMAIN, (m.paged_bytes, m.max_length_bytes, m.exact_bytes)):
            if held is not None:  # a run from before the model's context was recorded has no max-length line
                rows.append({"step": m.step, "layout": layout, "mb": held / MB})
    return pd.DataFrame(rows, columns=["step", "layout", "mb"])


def memory_chart(frame: pd.DataFrame) -> alt.Chart:
    """A log scale: the max-length reservation is often hundreds of times the others, which must stay readable."""
    return (
        alt.Chart(frame)
        .transform_filter("datum.mb > 0")
        .mark_line(point=True, interpolate="step-after")
        .encode(
            x=alt.X("step:Q", title="engine step", axis=alt.Axis(tickMinStep=1)),
            y=alt.Y("mb:Q", title=two_lines("KV cache (MB, modelled, log)"), scale=alt.Scale(type="log")),
            color=legend_color("layout", LAYOUT_DOMAIN, LAYOUT_RANGE, None),
            tooltip=["step:Q", "layout:N", alt.Tooltip("mb:Q", format=".2f")],
        )
        .properties(height=240)
    )


# --- serving modes compared ------------------------------------------------------------------------------------------
def modes_frame(modes: Sequence[ServedMode]) -> pd.DataFrame:
    """One row per mode: total tokens, span, tokens/s and latency percentiles, and whether its tokens match solo."""
    return pd.DataFrame(
        {
            "mode": m.mode,
            "tokens": m.total_tokens,
            "span_s": m.span_s,
            "tokens_per_s": m.tokens_per_s,
            "ttft_p50_ms": to_ms(percentile([r.ttft_s for r in m.requests], 50) or 0.0),
            "itl_p50_ms": to_ms(percentile([g for r in m.requests for g in r.itl_s], 50) or 0.0),
            "itl_p99_ms": to_ms(percentile([g for r in m.requests for g in r.itl_s], 99) or 0.0),
            "e2e_max_ms": to_ms(max(r.e2e_s for r in m.requests)),
            "same_tokens_as_solo": m.all_tokens_match,
            "load_avg_1m": m.load_avg_1m,
        }
        for m in modes
    )


def throughput_chart(frame: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("tokens_per_s:Q", title="total tokens/s over the workload (measured)"),
            y=alt.Y("mode:N", sort=MODE_DOMAIN, title=None, axis=alt.Axis(labelLimit=200)),
            color=legend_color("mode", MODE_DOMAIN, MODE_RANGE, None, legend=False),
            tooltip=[
                "mode:N",
                "tokens:Q",
                alt.Tooltip("span_s:Q", format=".2f"),
                alt.Tooltip("tokens_per_s:Q", format=".1f"),
            ],
        )
        .properties(height=alt.Step(40))  # one 40-px row per mode, so no mode's label is dropped for overlap
    )


def mode_requests_frame(modes: Sequence[ServedMode]) -> pd.DataFrame:
    """One row per mode per request: its TTFT, ITL p50 and p99, and E2E under that mode."""
    return pd.DataFrame(
        {
            "mode": m.mode,
            "request": r.id,
            "ttft_ms": to_ms(r.ttft_s),
            "itl_p50_ms": None if r.itl_p50_s is None else to_ms(r.itl_p50_s),
            "itl_p99_ms": None if r.itl_p99_s is None else to_ms(r.itl_p99_s),
            "e2e_ms": to_ms(r.e2e_s),
        }
        for m in modes
        for r in m.requests
    )


def bars_by_request(
    frame: pd.DataFrame,
    group: tuple[str, Sequence[str], Sequence[str], str | None],  # field, its values, their colours, legend title
    metric: str,
    title: str,
    extra_tooltip: Sequence[str] = (),
) -> alt.Chart:
    """One bar per request and group (a serving mode, or prefix sharing off/on), side by side."""
    field, domain, colors, legend_title = group
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("request:N", title=None, axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset(f"{field}:N", sort=list(domain)),
            y=alt.Y(f"{metric}:Q", title=title),
            color=legend_color(field, domain, colors, legend_title),
            tooltip=[f"{field}:N", "request:N", alt.Tooltip(f"{metric}:Q", format=".1f"), *extra_tooltip],
        )
        .properties(height=240)
    )


def mode_requests_chart(frame: pd.DataFrame, metric: str, title: str) -> alt.Chart:
    return bars_by_request(frame, ("mode", MODE_DOMAIN, MODE_RANGE, None), metric, title)


# --- prefix sharing on vs off ----------------------------------------------------------------------------------------
def prefix_frame(run: ScheduleRun) -> pd.DataFrame:
    """Per request, with sharing on and off: prompt tokens computed, reused, TTFT, and whether the tokens agree."""
    off = run.prefix_off
    if off is None:
        return pd.DataFrame(columns=["request", "sharing", "prefill_tokens", "reused_tokens", "ttft_ms", "same_tokens"])
    rows = []
    for on_r, off_r in zip(run.requests, off.requests):
        same = on_r.token_ids == off_r.token_ids
        for sharing, r in (("on", on_r), ("off", off_r)):
            rows.append(
                {
                    "request": r.id,
                    "sharing": sharing,
                    "prefill_tokens": r.prefill_tokens_computed,
                    "reused_tokens": r.prefix_tokens_reused,
                    "ttft_ms": to_ms(r.ttft_s),
                    "same_tokens": same,
                }
            )
    return pd.DataFrame(rows)


def prefix_chart(frame: pd.DataFrame, metric: str, title: str) -> alt.Chart:
    sharing = ("sharing", SHARING_DOMAIN, SHARING_RANGE, "prefix sharing")
    return bars_by_request(frame, sharing, metric, title, ["prefill_tokens:Q", "reused_tokens:Q"])


# --- prompts ---------------------------------------------------------------------------------------------------------
def prompts_frame(run: ScheduleRun) -> pd.DataFrame:
    """Each request's prompt as sent, so any one can be checked alone with `run --no-chat-template`."""
    return pd.DataFrame(
        {"request": r.id, "prompt_tokens": r.prompt_len, "new_tokens": len(r.token_ids), "prompt_text": r.prompt_text}
        for r in run.requests
    )


# --- goodput under the session's SLO pair (issue 45) ----------------------------------------------------------------
def goodput_frame(modes: Sequence[ServedMode], ttft_slo_s: float, tpot_slo_s: float) -> pd.DataFrame:
    """One row per mode and request: its TTFT and TPOT (measured), each met or missed (strictly under), and both."""
    rows = []
    for m in modes:
        for v in m.goodput(ttft_slo_s, tpot_slo_s).verdicts:
            rows.append(
                {
                    "mode": m.mode,
                    "request": v.request,
                    "ttft_ms": to_ms(v.ttft_s),
                    "tpot_ms": None if v.tpot_s is None else to_ms(v.tpot_s),
                    "ttft_met": v.ttft_met,
                    "tpot_met": v.tpot_met,
                    "both_met": v.met,
                }
            )
    columns = ["mode", "request", "ttft_ms", "tpot_ms", "ttft_met", "tpot_met", "both_met"]
    return pd.DataFrame(rows, columns=columns)
