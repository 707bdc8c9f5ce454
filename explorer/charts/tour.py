"""The Tour's own builders: the prompt's tokens on a slide, the mask's and decode rows' shapes from a trace alone, each
phase's time beside its roofline bound, decode steps against batch size, and one prefill on a serving timeline.

The other slides reuse the pages' builders (attention, KV cache, timeline), resized with `sized` to fit a slide.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from explorer.charts.attention import MASKED, MASKED_COLOR, block_size
from explorer.charts.common import MEASURED, MODELLED, PHASE_RANGE, TWO_LINE_LABEL, display_token
from explorer.charts.cost import SEGMENT_COLUMNS, SEGMENT_LABELS, SEGMENT_RANGE, median_decode_index
from explorer.charts.run import ROLE_DOMAIN, ROLE_RANGE, TOKENS_PER_ROW
from explorer.core.roofline import pass_cost, pass_flops
from explorer.core.trace import Trace
from explorer.core.units import short_time, to_ms

COMPUTED = "computed (key ≤ query)"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CHUNKS = 4  # how many chunks the serving slide splits the prompt into (fewer for a shorter prompt)
STEPS_BEFORE, STEPS_AFTER = 2, 3  # a running request's decode steps drawn before and after the new prompt arrives
WORK_DOMAIN = ["decode step", "prefill", "chunk + decode"]  # a chunk of the prefill shares a step with a decode
WORK_RANGE = [PHASE_RANGE[1], PHASE_RANGE[0], "#7570b3"]


def sized(chart: alt.TopLevelMixin, height_px: int) -> alt.TopLevelMixin:
    """A page's chart at a slide's height (its own builder fixed one for a page)."""
    return chart.properties(height=height_px)


def median_decode_s(trace: Trace) -> float | None:
    """The decode median every other page shows (`Trace.decode_median_s`: every repeat's decode passes), so the Tour
    never says another figure for the same run; None without a decode pass."""
    return trace.decode_median_s


# --- slide 1: the prompt as tokens ---------------------------------------------------------------------------------
def token_span(token: str, cell_chars: int | None) -> int:
    """How many cells a token's box takes: one, or as many as its whole text needs at `cell_chars` characters a cell
    (None: always one, each label cut to its cell)."""
    return 1 if cell_chars is None else max(1, math.ceil((len(token) + 1) / cell_chars))


def _place(cells: list[tuple[str, str, str]], per_row: int, cell_chars: int | None) -> list[dict[str, object]]:
    """Cells left to right, `per_row` to a row; a token that would run past the row's end starts the next."""
    placed, row, column = [], 0, 0
    for position, token, role in cells:
        span = min(per_row, token_span(token, cell_chars))
        if column + span > per_row:
            row, column = row + 1, 0
        placed.append({"position": position, "token": token, "role": role, "row": row, "column": column, "span": span})
        column += span
    return placed


def tokens_frame(
    trace: Trace, max_rows: int, per_row: int = TOKENS_PER_ROW, cell_chars: int | None = None
) -> pd.DataFrame:
    """The prompt's tokens (all computed by the prefill) and the first token it samples, `per_row` cells to a row, in
    the Run page's roles. With `cell_chars` a token longer than a cell holds takes as many cells as its whole text
    needs ("<|im_start|>" whole, not "<|im_st…"). A prompt longer than `max_rows` rows keeps its start, one cell that
    counts the rest, and the sampled token. `column` is where a box starts, `span` how many cells it takes."""
    cells = [(str(i), display_token(text), ROLE_DOMAIN[1]) for i, text in enumerate(trace.prompt_tokens_text)]
    sampled = (str(trace.prompt_len), display_token(trace.passes[0].token_text), ROLE_DOMAIN[2])
    placed = _place([*cells, sampled], per_row, cell_chars)
    kept = len(cells)
    while placed[-1]["row"] >= max(1, max_rows) and kept > 1:  # drop the prompt's end until the rest fits
        kept -= 1
        rest = (f"{kept}–{trace.prompt_len - 1}", f"… +{trace.prompt_len - kept}", ROLE_DOMAIN[1])
        placed = _place([*cells[:kept], rest, sampled], per_row, cell_chars)
    frame = pd.DataFrame(placed, columns=["position", "token", "role", "row", "column", "span"])
    frame["column_end"] = frame["column"] + frame["span"]
    return frame


def token_grid_chart(frame: pd.DataFrame, per_row: int) -> alt.LayerChart:
    """The prompt's tokens as boxes in rows, coloured by role (as the Run page's strip), each box as wide as its
    token's whole text (`tokens_frame` with `cell_chars`); the tooltip names every token in full."""
    rows = int(frame["row"].max()) + 1
    base = alt.Chart(frame).encode(
        y=alt.Y("row:O", axis=None),
        tooltip=["position", "token", "role"],
    )
    x = alt.Scale(domain=[0, per_row], nice=False, zero=True)
    boxes = base.mark_rect(stroke="white", strokeWidth=2, cornerRadius=3).encode(
        x=alt.X("column:Q", axis=None, scale=x),
        x2="column_end:Q",
        color=alt.Color(
            "role:N",
            scale=alt.Scale(domain=ROLE_DOMAIN, range=ROLE_RANGE),
            title=None,
            legend=alt.Legend(orient="top", columns=1),  # one row overflowed a slide
        ),
    )
    labels = (
        base.transform_calculate(middle="(datum.column + datum.column_end) / 2")
        .mark_text()
        .encode(x=alt.X("middle:Q", axis=None, scale=x), text="token:N")
    )
    return (boxes + labels).properties(height=max(120, 36 * rows) + 40)  # + the legend above


# --- slide 2 without maps: the mask's shape --------------------------------------------------------------------------
def mask_frame(prompt_len: int, max_side: int) -> pd.DataFrame:
    """The prefill's T × T score map as blocks of at most `max_side` per side: which are masked (every key after every
    query of the block) and which are computed. Shapes only: no probabilities."""
    block = block_size(prompt_len, max_side)
    n = math.ceil(prompt_len / block)
    rows = []
    for q in range(n):
        for k in range(n):
            q0, k0 = q * block, k * block
            masked = k0 > min(q0 + block, prompt_len) - 1
            rows.append(
                {
                    "query_start": q0,
                    "query_stop": min(q0 + block, prompt_len),
                    "key_start": k0,
                    "key_stop": min(k0 + block, prompt_len),
                    "block": block,
                    "cell": MASKED if masked else COMPUTED,
                }
            )
    return pd.DataFrame(rows)


def mask_chart(frame: pd.DataFrame, height_px: int) -> alt.Chart:
    T = int(frame["key_stop"].max())
    return (
        alt.Chart(frame)
        .mark_rect(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("key_start:Q", title="key position", scale=alt.Scale(domain=[0, T], nice=False)),
            x2="key_stop:Q",
            y=alt.Y("query_start:Q", title="query position", scale=alt.Scale(domain=[0, T], nice=False, reverse=True)),
            y2="query_stop:Q",
            color=alt.Color(
                "cell:N",
                scale=alt.Scale(domain=[COMPUTED, MASKED], range=[PHASE_RANGE[0], MASKED_COLOR]),
                title=None,
                legend=alt.Legend(orient="top"),
            ),
            tooltip=["query_start", "query_stop", "key_start", "key_stop", "cell"],
        )
        .properties(height=height_px)
    )


# --- slide 3 without maps: the decode rows' lengths ------------------------------------------------------------------
def decode_rows_frame(trace: Trace, max_steps: int) -> pd.DataFrame:
    """The first `max_steps` decode passes: each computes one query row over `cache_len_after` cached keys."""
    return pd.DataFrame(
        [
            {
                "step": k,
                "row": f"decode {k + 1}",
                "keys_read": p.cache_len_after,
                "prompt_len": trace.prompt_len,
                "wall_ms": to_ms(p.wall_s),
            }
            for k, p in enumerate(trace.decodes[:max_steps])
        ],
        columns=["step", "row", "keys_read", "prompt_len", "wall_ms"],
    )


def decode_rows_chart(frame: pd.DataFrame, prompt_len: int, height_px: int) -> alt.LayerChart:
    order = frame["row"].tolist()
    bars = (
        alt.Chart(frame)
        .mark_bar(color=PHASE_RANGE[1])
        .encode(
            x=alt.X("keys_read:Q", title="cached keys one query row reads", scale=alt.Scale(zero=True)),
            y=alt.Y("row:N", sort=order, title="decode pass (ONE query row each)"),
            tooltip=["row", "keys_read", alt.Tooltip("wall_ms:Q", format=".2f", title="wall (ms)")],
        )
    )
    end = pd.DataFrame({"keys_read": [prompt_len], "label": ["end of prompt"]})
    rule = alt.Chart(end).mark_rule(color=PHASE_RANGE[0], strokeDash=[4, 3]).encode(x="keys_read:Q")
    return alt.layer(bars, rule).properties(height=height_px)


# --- slide 5: each phase's time beside its roofline bound ------------------------------------------------------------
def phase_time_frame(trace: Trace, measured: str = MEASURED) -> pd.DataFrame:
    """The prefill and a decode pass: measured time (the prefill's median over repeats, the decode passes' median;
    `measured` names it, "recorded" for a recording) and the roofline bound (modelled; the decode's at the pass
    nearest the median), one row each."""
    rows = []
    chosen = [(f"prefill, {trace.prompt_len} tokens (ms)", trace.prefill, trace.pass_wall_spread(0).median)]
    index = median_decode_index(trace)
    if index is not None:
        chosen.append(("decode, median pass (ms)", trace.passes[index], median_decode_s(trace)))
    for label, p, wall_s in chosen:
        for kind, value_s in ((measured, wall_s), (f"roofline ({MODELLED})", p.cost.roofline_time_s)):
            rows.append({"phase": label, "kind": kind, "ms": to_ms(value_s), "bound": p.cost.bound, "pass": p.index})
    return pd.DataFrame(rows)


def phase_time_chart(frame: pd.DataFrame, height_px: int, width_px: int) -> alt.FacetChart:
    """One panel per phase, stacked, each on its own scale (a prefill can take many decode passes' time)."""
    kinds = frame["kind"].drop_duplicates().tolist()
    base = alt.Chart().encode(
        y=alt.Y("kind:N", sort=kinds, title=None, axis=alt.Axis(labelLimit=240)),
        x=alt.X("ms:Q", title=None, axis=alt.Axis(tickCount=3)),  # the header says ms: a narrow panel, few ticks
    )
    bars = base.mark_bar().encode(
        color=alt.Color("kind:N", sort=kinds, scale=alt.Scale(range=["#222222", SEGMENT_RANGE[0]]), legend=None),
        tooltip=["phase", "kind", alt.Tooltip("ms:Q", format=".3f"), "bound"],
    )
    labels = base.mark_text(align="left", dx=4).encode(text=alt.Text("ms:Q", format=",.3~r"))
    panels = frame["phase"].drop_duplicates().tolist()
    return (
        alt.layer(bars, labels, data=frame)
        .properties(width=width_px, height=height_px)
        .facet(
            row=alt.Row(
                "phase:N",
                sort=panels,
                title=None,
                header=alt.Header(labelAngle=0, labelAlign="left", labelAnchor="start", labelOrient="top"),
            )
        )
        .resolve_scale(x="independent")
    )


# --- slide 6: TTFT on the timeline -----------------------------------------------------------------------------------
def with_ttft(timeline: alt.Chart, ttft_ms: float, height_px: int) -> alt.LayerChart:
    """The Run page's timeline of passes with a rule where the first token arrived."""
    timeline = timeline.copy(deep=False)
    timeline.height = alt.Undefined  # the layer sets the slide's height
    mark = pd.DataFrame({"start_ms": [ttft_ms], "label": ["TTFT"]})
    rule = alt.Chart(mark).mark_rule(color="black", strokeDash=[6, 3], strokeWidth=2).encode(x="start_ms:Q")
    text = (
        alt.Chart(mark)
        .mark_text(align="left", baseline="top", dx=4, dy=4)  # right of the rule: past the prefill bar
        .encode(x="start_ms:Q", y=alt.value(0), text="label:N")
    )
    return alt.layer(timeline, rule, text).properties(height=height_px)


# --- slide 7: decode steps against batch size (modelled) ------------------------------------------------------------
def decode_context(trace: Trace) -> int:
    """Cached positions before the median decode pass: the context each modelled sequence decodes at."""
    index = median_decode_index(trace)
    return trace.prompt_len if index is None else trace.passes[index].cache_len_before


def batch_frame(trace: Trace, batches: tuple[int, ...] = BATCHES) -> pd.DataFrame:
    """One modelled decode step per batch size B at this run's context: the weight read (the same for every B), the
    KV traffic and the maths beyond the memory time (both grow with B), and tokens/s; at B = 1, this run's measured
    median decode pass beside it."""
    context = decode_context(trace)
    measured_s = median_decode_s(trace)
    rows = []
    for batch in batches:
        c = pass_cost(trace.model, trace.device, 1, context, batch=batch, **trace.cache_options)
        rows.append(
            {
                "batch": batch,
                SEGMENT_COLUMNS[0]: to_ms(c.t_weight_read_s),
                SEGMENT_COLUMNS[1]: to_ms(c.t_kv_s),
                SEGMENT_COLUMNS[2]: to_ms(max(0.0, c.t_compute_s - c.t_memory_s)),
                "step_ms": to_ms(c.roofline_time_s),
                "tokens_per_s": batch / c.roofline_time_s,
                "bound": c.bound,
                "measured_ms": to_ms(measured_s) if batch == 1 and measured_s is not None else None,
            }
        )
    return pd.DataFrame(rows)


RATE_COLOR = "#222222"  # the tokens/s line: dark, apart from the step's blue and purple parts


def batch_chart(frame: pd.DataFrame, height_px: int) -> alt.LayerChart:
    """Stacked modelled step times by B (left axis) and the tokens/s they give as a line on an axis of its own (right):
    a number written above each bar ran into its neighbours on a slide ("51 tok/1/01 tok/s196 tok/s"). A black tick
    is this run's measured step."""
    parts = SEGMENT_COLUMNS[:3]
    labels = SEGMENT_LABELS[:3]
    x = alt.X("batch:O", title="batch B (sequences per step)", axis=alt.Axis(labelAngle=0))
    lookup = "{" + ", ".join(f"'{c}': '{lab}'" for c, lab in zip(parts, labels)) + "}"
    bars = (
        alt.Chart(frame)
        .transform_fold(parts, as_=["segment", "segment_ms"])
        .transform_calculate(part=f"{lookup}[datum.segment]")
        .mark_bar()
        .encode(
            x=x,
            y=alt.Y("segment_ms:Q", stack="zero", title="decode step (ms, modelled)"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=labels, range=SEGMENT_RANGE[:3]),
                title=None,
                legend=alt.Legend(orient="top", columns=1, labelLimit=0, labelExpr=TWO_LINE_LABEL),
            ),
            tooltip=["batch", "part:N", alt.Tooltip("segment_ms:Q", format=".3f"), "bound"],
        )
    )
    tick = (
        alt.Chart(frame)
        .transform_filter("isValid(datum.measured_ms)")
        .mark_tick(color="black", thickness=3, size=40)
        .encode(x=x, y="measured_ms:Q", tooltip=[alt.Tooltip("measured_ms:Q", title="measured (ms)", format=".3f")])
    )
    rate = (
        alt.Chart(frame)
        .mark_line(color=RATE_COLOR, point=alt.OverlayMarkDef(color=RATE_COLOR, size=50), strokeWidth=2)
        .encode(
            x=x,
            y=alt.Y(
                "tokens_per_s:Q",
                title="tokens/s (modelled, line)",
                axis=alt.Axis(orient="right", titleColor=RATE_COLOR, format="~s"),
            ),
            tooltip=[alt.Tooltip("tokens_per_s:Q", title="tokens/s (modelled)", format=",.0f")],
        )
    )
    return alt.layer(alt.layer(bars, tick), rate).resolve_scale(y="independent").properties(height=height_px)


# --- slide 8: one prefill on a serving timeline ---------------------------------------------------------------------
def chunk_times_s(trace: Trace, chunks: int) -> list[float]:
    """Modelled time each of `chunks` pieces of this prompt's prefill adds to the step it shares with a running
    request's decode: the run's measured prefill time split in the ratio of the pieces' FLOPs. The weights are read
    once per step, and the decode step (measured on its own) already reads them, so what a chunk adds is its maths
    (and the KV it writes), which the prefill's FLOPs stand for; a later piece attends over the earlier ones, so it
    costs a little more, and only the last computes the next token's logits. The pieces' useful attention pairs are
    the whole prefill's, so their times add up to its time."""
    T, model = trace.prompt_len, trace.model
    chunks = max(1, min(chunks, T))
    bounds = [round(i * T / chunks) for i in range(chunks + 1)]
    flops = [pass_flops(model, b - a, b, logits_tokens=int(b == T)) for a, b in zip(bounds, bounds[1:])]
    scale = trace.pass_wall_spread(0).median / pass_flops(model, T, T)
    return [f * scale for f in flops]


def _lane(lane: str, steps: list[tuple[str, float]], start_s: float = 0.0) -> list[dict[str, object]]:
    rows = []
    for work, step_s in steps:
        rows.append({"lane": lane, "work": work, "start_ms": to_ms(start_s), "end_ms": to_ms(start_s + step_s)})
        start_s += step_s
    return rows


def machine_word(device_kind: str) -> str:
    """What the disaggregated lanes are called: the kind of device the run was on ("cpu" → CPU, "cuda" → GPU)."""
    return "CPU" if device_kind == "cpu" else "GPU"


def serving_frame(prefill_s: float, decode_s: float, chunks_s: list[float], machine: str = "GPU") -> pd.DataFrame:
    """A running request decodes one token per step when a new prompt arrives; three ways to serve its prefill:
    in one piece between two decode steps, in chunks each sharing a step with the running request's decode (the
    step's time: the decode's own plus what the chunk adds, `chunks_s`, so never shorter than a decode step), or on
    another machine (a `machine`, named by the run's device kind). Every step but a whole prefill ends with one of
    the running request's tokens; each lane's label says the longest wait between two of them, and `added_ms` how
    much of that wait the new prompt caused."""
    decode, prefill, mixed = WORK_DOMAIN
    before, after = [(decode, decode_s)] * STEPS_BEFORE, [(decode, decode_s)] * STEPS_AFTER
    rows = [
        *_lane("one piece", [*before, (prefill, prefill_s), *after]),
        *_lane(f"{len(chunks_s)} chunks", [*before, *[(mixed, decode_s + c) for c in chunks_s], *after]),
        *_lane(f"decode {machine}", [*before, *[(decode, decode_s)] * (len(chunks_s) + STEPS_AFTER)]),
        *_lane(f"prefill {machine}", [(prefill, prefill_s)], start_s=STEPS_BEFORE * decode_s),
    ]
    frame = pd.DataFrame(rows)
    frame["step_ms"] = frame["end_ms"] - frame["start_ms"]
    gaps = longest_gaps_ms(frame)
    frame["longest_gap_ms"] = frame["lane"].map(gaps)
    frame["added_ms"] = frame["longest_gap_ms"] - to_ms(decode_s)  # the new prompt's share of that longest wait
    frame["lane_label"] = [
        lane if lane not in gaps else f"{lane}: {short_time(gaps[lane] / 1e3)}" for lane in frame["lane"]
    ]
    return frame


def longest_gaps_ms(frame: pd.DataFrame) -> dict[str, float]:
    """Per lane that carries the running request: the longest wait between two of its tokens (ms), from the start."""
    gaps = {}
    for lane, rows in frame[frame["work"] != WORK_DOMAIN[1]].groupby("lane", sort=False):
        ends = [0.0, *sorted(rows["end_ms"])]
        gaps[str(lane)] = max(b - a for a, b in zip(ends, ends[1:]))
    return gaps


def serving_chart(frame: pd.DataFrame, height_px: int) -> alt.Chart:
    """One lane per way of serving the prefill, its steps as bars on one clock, the longest token gap in its label."""
    return (
        alt.Chart(frame)
        .mark_bar(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X("start_ms:Q", title="time (ms)"),
            x2="end_ms:Q",
            y=alt.Y(
                "lane_label:N",
                sort=frame["lane_label"].drop_duplicates().tolist(),
                title=None,
                axis=alt.Axis(labelLimit=400),
            ),
            color=alt.Color(
                "work:N",
                scale=alt.Scale(domain=WORK_DOMAIN, range=WORK_RANGE),
                title=None,
                legend=alt.Legend(orient="top", columns=2, labelLimit=0),  # 3 columns overflowed a narrow slide
            ),
            tooltip=["lane", "work", alt.Tooltip("step_ms:Q", format=".1f", title="step (ms)")],
        )
        .properties(height=height_px)
    )
