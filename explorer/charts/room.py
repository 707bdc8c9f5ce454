"""The Room page's builders: one lane per person across the round's engine steps (the viewer's own highlighted), the
tokens of each step by person and each step's time (the Scheduling lab's step columns), step time against batch size,
and each person's figures in the round and alone.

Every `*_frame()` reads a `RoomRound` and a viewer (the person's number in the room, or None) and returns a tidy
DataFrame (the data behind the chart, offered as CSV); people are labelled "you" and "participant N", never by name.

Sizes come from the data, widths from the column: a row is a fixed band (`ROW_PX`) however many people there are,
and every chart fits the width it is given (`FIT_WIDTH`: a phone's 390 px or a 1440 px screen), its engine steps
narrowing rather than running off the side. That is why each is one view, never a concatenation: Vega-Lite cannot fit
a concatenated chart to a width, and its axes would add to the column's width.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import PHASE_COLOR
from explorer.charts.schedule import step_entries_frame, tokens_per_step
from explorer.core.units import to_ms
from explorer.labs.room_records import CHUNKED, NOT_CHUNKED, RoomRound, participant_of
from explorer.labs.schedule.records import StepRecord

YOU = "you"
ROUND, ALONE = "in the round", "alone (same engine)"
SOURCE_DOMAIN, SOURCE_RANGE = [ROUND, ALONE], ["#6a51a3", "#969696"]
ROW_PX = 24  # one person's lane: room for a label in the presenter's 18 px type, so labels never overlap
TOKENS_PX, STEP_TIME_PX = 220, 110  # the plot heights of the tokens and step-time columns (axes add to them)
BATCH_PX = 240
# The width given (the column's) holds the whole chart, axes and legend included; heights are the data's own.
FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")
STEP_TITLE = "engine step (one forward pass each)"


def step_axis() -> alt.Axis:
    """Engine steps along x: upright labels, every other one dropped where a phone's column makes them collide."""
    return alt.Axis(labelAngle=0, labelOverlap="parity", labelSeparation=2)


def bottom_legend(columns: int = 2) -> alt.Legend:
    """A legend under the plot, its entries in `columns` columns and whole (never cut short): it takes rows, not
    width, so it never pushes a chart past a phone's column."""
    return alt.Legend(orient="bottom", direction="horizontal", columns=columns, labelLimit=0, titleLimit=0)


def lane_label(participant: int, viewer: int | None) -> str:
    return YOU if participant == viewer else f"participant {participant}"


def lane_order(run: RoomRound, viewer: int | None) -> list[str]:
    """The viewer's own lane first, then everyone else's by number."""
    ordered = sorted(run.lanes, key=lambda lane: (lane.participant != viewer, lane.participant))
    return [lane_label(lane.participant, viewer) for lane in ordered]


# --- one lane per person ---------------------------------------------------------------------------------------------
def lanes_frame(run: RoomRound, viewer: int | None) -> pd.DataFrame:
    """One row per person per step that carried their tokens: phase, tokens, the step's size and measured time."""
    rows = [
        {
            "step": s.index,
            "lane": lane_label(participant_of(e.request), viewer),
            "you": participant_of(e.request) == viewer,
            "phase": "prefill" if e.prefill_tokens else "decode",
            "tokens": e.prefill_tokens + e.decode_tokens,
            "requests_in_step": len(s.entries),
            "start_ms": to_ms(s.start_s),
            "wall_ms": to_ms(s.wall_s),
        }
        for s in run.steps
        for e in s.entries
    ]
    columns = ["step", "lane", "you", "phase", "tokens", "requests_in_step", "start_ms", "wall_ms"]
    return pd.DataFrame(rows, columns=columns)


def lanes_chart(frame: pd.DataFrame, order: list[str]) -> alt.LayerChart:
    """The round's schedule: a row per person (`ROW_PX` each), a column per engine step, a cell where the step carried
    their tokens (prefill orange, decode green); the viewer's own row outlined and the others faded."""
    base = alt.Chart(frame)
    x = alt.X("step:O", title=STEP_TITLE, axis=step_axis())
    y = alt.Y("lane:N", sort=order, title=None, axis=alt.Axis(labelLimit=200))
    cells = base.mark_rect(stroke="white", strokeWidth=1).encode(
        x=x,
        y=y,
        color=alt.Color("phase:N", scale=PHASE_COLOR, title="tokens", legend=bottom_legend()),
        opacity=alt.condition("datum.you", alt.value(1.0), alt.value(0.45)),
        tooltip=[
            "lane:N",
            "step:O",
            "phase:N",
            "tokens:Q",
            "requests_in_step:Q",
            alt.Tooltip("wall_ms:Q", format=".1f"),
        ],
    )
    yours = (
        base.transform_filter("datum.you").mark_rect(fillOpacity=0, stroke="#000000", strokeWidth=2).encode(x=x, y=y)
    )
    # SVG, not Streamlit's canvas for large data: a lane label and cell stay elements whose boxes the browser test
    # measures (and a screen reader reads); a round has at most 32 lanes of a few hundred steps.
    return (cells + yours).properties(
        height=alt.Step(ROW_PX), autosize=FIT_WIDTH, usermeta={"embedOptions": {"renderer": "svg"}}
    )


# --- tokens per step, as the Scheduling lab draws them ---------------------------------------------------------------
def tokens_frame(run: RoomRound, viewer: int | None, steps: tuple[StepRecord, ...] | None = None) -> pd.DataFrame:
    """The Scheduling lab's step columns (`explorer.charts.schedule.step_entries_frame`), people's labels as its
    requests: the round's steps, or `steps` (a long round's chunked serving)."""
    order = {label: i for i, label in enumerate(lane_order(run, viewer))}
    chosen = run.steps if steps is None else steps
    return step_entries_frame(chosen, order, lambda request: lane_label(participant_of(request), viewer))


def tokens_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Tokens per step stacked by person (prefill orange, decode green, white seams between people), each step named
    when it mixes the phases or carries a chunk of a split prompt."""
    x = alt.X("step:O", title=STEP_TITLE, axis=step_axis())
    tokens = tokens_per_step(frame, x, "tokens in the step", bottom_legend())
    return tokens.properties(height=TOKENS_PX, autosize=FIT_WIDTH)


def step_times_chart(frame: pd.DataFrame) -> alt.Chart:
    """Each engine step's measured time, the same steps as `tokens_chart` above it."""
    return (
        alt.Chart(frame)
        .transform_aggregate(wall_ms="max(wall_ms)", groupby=["step", "kind"])
        .mark_bar(color="#636363")
        .encode(
            x=alt.X("step:O", title=STEP_TITLE, axis=step_axis()),
            y=alt.Y("wall_ms:Q", title="step time (ms, measured)"),
            tooltip=["step:O", "kind:N", alt.Tooltip("wall_ms:Q", format=".1f")],
        )
        .properties(height=STEP_TIME_PX, autosize=FIT_WIDTH)
    )


# --- step time against batch size ------------------------------------------------------------------------------------
def batch_frame(run: RoomRound) -> pd.DataFrame:
    """Every decode-only step's measured time with how many requests it carried: the round's, and each alone run's
    (a batch of one on the same engine)."""
    rows = [
        {"run": ROUND, "batch": batch, "wall_ms": to_ms(t)}
        for batch, times in run.decode_steps_by_batch().items()
        for t in times
    ]
    rows += [{"run": ALONE, "batch": 1, "wall_ms": to_ms(t)} for t in run.alone_decode_step_s]
    return pd.DataFrame(rows, columns=["run", "batch", "wall_ms"])


def batch_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Each decode step as a point at its batch size, with the median of each batch size and run joined by a line."""
    base = alt.Chart(frame)
    x = alt.X(
        "batch:Q",
        title="requests in the decode step (batch size)",
        axis=alt.Axis(tickMinStep=1, format="d"),
        scale=alt.Scale(padding=8),  # the largest batch's points whole, not halved by the plot's edge
    )
    color = alt.Color(
        "run:N", scale=alt.Scale(domain=SOURCE_DOMAIN, range=SOURCE_RANGE), title=None, legend=bottom_legend()
    )
    points = base.mark_point(filled=True, opacity=0.5, size=50).encode(
        x=x,
        y=alt.Y("wall_ms:Q", title="decode step time (ms, measured)"),
        color=color,
        tooltip=["run:N", "batch:Q", alt.Tooltip("wall_ms:Q", format=".1f")],
    )
    medians = (
        base.transform_aggregate(median_ms="median(wall_ms)", groupby=["run", "batch"])
        .mark_line(point=True, strokeWidth=2)
        .encode(
            x=x, y="median_ms:Q", color=color, tooltip=["run:N", "batch:Q", alt.Tooltip("median_ms:Q", format=".1f")]
        )
    )
    return (points + medians).properties(height=BATCH_PX, autosize=FIT_WIDTH)


# --- each person's figures -------------------------------------------------------------------------------------------
def seats_frame(run: RoomRound, viewer: int | None) -> pd.DataFrame:
    """Per person (the viewer first): TTFT and ITL p50 in the round and alone, the batch their decode tokens rode
    in, how many steps carried them, and whether their tokens equal their alone run's."""
    order = lane_order(run, viewer)
    rows = []
    for lane in run.lanes:
        seat = run.seat(lane.participant)
        assert seat is not None
        rows.append(
            {
                "person": lane_label(lane.participant, viewer),
                "prompt_tokens": lane.prompt_tokens,
                "new_tokens": lane.new_tokens,
                "ttft_s": seat.ttft_s,
                "alone_ttft_s": seat.alone_ttft_s,
                "itl_p50_s": seat.itl_p50_s,
                "alone_itl_p50_s": seat.alone_itl_p50_s,
                "batch": seat.batch,
                "steps_ridden": len(seat.steps),
                "same_tokens_as_alone": seat.same_tokens,
            }
        )
    frame = pd.DataFrame(rows)
    return frame.sort_values("person", key=lambda names: names.map(order.index)).reset_index(drop=True)


def prompts_frame(run: RoomRound, viewer: int | None) -> pd.DataFrame:
    """The prompts and answers this viewer may see (their own; everyone's where the presenter shows them)."""
    rows = [
        {"person": lane_label(lane.participant, viewer), "prompt": lane.prompt_text, "answer": lane.answer_text}
        for lane in run.lanes
        if lane.prompt_text
    ]
    return pd.DataFrame(rows, columns=["person", "prompt", "answer"])


# --- TPOT against the SLO, a long round served whole and chunked -----------------------------------------------------
TPOT, LONGEST_GAP = "TPOT", "longest gap"
SERVING_DOMAIN, SERVING_RANGE = [NOT_CHUNKED, CHUNKED], ["#d94801", "#2171b5"]
SLO_COLOR = "#cb181d"
PAST_ALONE_TOO = "past (alone too)"  # past the SLO, but so was the prompt alone: not the round's doing


def tpot_frame(run: RoomRound, viewer: int | None, tpot_slo_s: float) -> pd.DataFrame:
    """Per person and serving (not chunked; chunked where it was served again): their TPOT and longest gap between
    two tokens in ms, the TPOT alone, the SLO, whether the TPOT was past it and whether the round pushed it there
    (under it alone). Two rows each, one per figure, so the chart draws both on one axis."""
    rows = []
    for mark in run.tpot_marks(tpot_slo_s):
        for figure, value_s in ((TPOT, mark.tpot_s), (LONGEST_GAP, mark.longest_gap_s)):
            if value_s is None:
                continue
            rows.append(
                {
                    "person": lane_label(mark.participant, viewer),
                    "serving": mark.serving,
                    "budget_tokens": mark.budget,
                    "figure": figure,
                    "ms": to_ms(value_s),
                    "ttft_ms": None if mark.ttft_s is None else to_ms(mark.ttft_s),
                    "alone_tpot_ms": None if mark.alone_tpot_s is None else to_ms(mark.alone_tpot_s),
                    "tpot_slo_ms": to_ms(tpot_slo_s),
                    "past_slo": mark.past_slo,
                    "pushed": mark.pushed,
                    "mark": "pushed past" if mark.pushed else PAST_ALONE_TOO if mark.past_slo else "",
                }
            )
    columns = [
        "person",
        "serving",
        "budget_tokens",
        "figure",
        "ms",
        "ttft_ms",
        "alone_tpot_ms",
        "tpot_slo_ms",
        "past_slo",
        "pushed",
        "mark",
    ]
    return pd.DataFrame(rows, columns=columns)


def tpot_chart(frame: pd.DataFrame, order: list[str], tpot_slo_ms: float) -> alt.LayerChart:
    """A row per person, a band per serving: their TPOT (a dot) and longest gap (a tick) on a log axis of ms, the
    SLO as a red line, and "pushed past" beside each TPOT the round pushed past the SLO though it met it alone (grey
    `PAST_ALONE_TOO` where the prompt alone missed it as well)."""
    base = alt.Chart(frame)
    y = alt.Y("person:N", sort=order, title=None, axis=alt.Axis(labelLimit=200))
    y_offset = alt.YOffset("serving:N", sort=SERVING_DOMAIN)
    x = alt.X(
        "ms:Q", title="ms between tokens (measured, log scale)", scale=alt.Scale(type="log", nice=False, padding=12)
    )
    color = alt.Color(
        "serving:N", scale=alt.Scale(domain=SERVING_DOMAIN, range=SERVING_RANGE), title=None, legend=bottom_legend()
    )
    tooltip = ["person:N", "serving:N", "budget_tokens:Q", "figure:N", alt.Tooltip("ms:Q", format=".1f"), "pushed:N"]
    tpot = (
        base.transform_filter(f"datum.figure == '{TPOT}'")
        .mark_point(filled=True, size=90)
        .encode(x=x, y=y, yOffset=y_offset, color=color, tooltip=tooltip)
    )
    gap = (
        base.transform_filter(f"datum.figure == '{LONGEST_GAP}'")
        .mark_tick(thickness=2, size=10)
        .encode(x=x, y=y, yOffset=y_offset, color=color, tooltip=tooltip)
    )
    pushed = (
        base.transform_filter(f"datum.figure == '{TPOT}' && datum.mark")
        .mark_text(align="left", dx=8)
        .encode(
            x=x,
            y=y,
            yOffset=y_offset,
            text="mark:N",
            color=alt.condition("datum.pushed", alt.value(SLO_COLOR), alt.value("#636363")),
        )
    )
    line = alt.Chart(pd.DataFrame({"ms": [tpot_slo_ms], "label": [f"TPOT SLO {tpot_slo_ms:,.3g} ms"]}))
    slo = line.mark_rule(color=SLO_COLOR, strokeDash=[4, 3], strokeWidth=2).encode(
        x="ms:Q", tooltip=[alt.Tooltip("ms:Q", title="TPOT SLO (ms)", format=".1f")]
    )
    slo += line.mark_text(align="left", baseline="top", dx=4, color=SLO_COLOR).encode(
        x="ms:Q", y=alt.value(2), text="label:N"
    )
    # A row per serving in each person's band, each as tall as a lane of the schedule.
    return (tpot + gap + pushed + slo).properties(height=alt.Step(ROW_PX), autosize=FIT_WIDTH)
