"""The step mode's builders: the request so far and its newest pass, its attention rows appended pass by pass (and the
newest few enlarged), its inter-token gaps with the passes that were disturbed marked, its cache and pass times."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Sequence

import altair as alt
import numpy as np
import pandas as pd

from explorer.charts.attention import ATTENDED, MASKED, MASKED_COLOR, PROB_SCALE, WINDOW_POSITIONS
from explorer.charts.common import display_token, position_label
from explorer.charts.cost import SEGMENT_LABELS, time_split_chart
from explorer.charts.latency import itl_chart, itl_frame
from explorer.core.attention_maps import AttentionMaps
from explorer.core.floor_share import pass_share
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import human_bytes, short_time

DISTURBED_MARK = "⚠"  # beside a pass timed while other work ran (`PassRecord.disturbed`)
# Fit the width only: the height given is the plot's, and axes and legends add to it. Streamlit's default ("fit")
# squeezes the whole chart into that height, so large type leaves the plot itself a few pixels tall.
FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")
# A legend entry's longest line, in characters. The narrowest column the page has is a phone's: 390 px less the page's
# padding, 358 px. Two columns of entries this long (about 6 px a character at the normal theme's 11 px) take about
# 2 x (21 x 6 + 25) = 302 px with their symbols; the time split's four entries at two lines each ("compute not hidden
# behind memory" over "(modelled)") overran 358 px and were cut at the column's edge ("KV cache read + w").
LEGEND_LINE_CHARS = 21
LEGEND_COLUMNS = 2


def running_figures(trace: Trace, done: bool) -> list[tuple[str, str, str]]:
    """(label, value, help) of the request so far: all measured, the clock paused between clicks."""
    last_gap = trace.itl_s[-1] if trace.itl_s else None
    return [
        ("Passes", f"{trace.new_tokens}{' (done)' if done else ''}", "one prefill, then one decode per token"),
        ("TTFT", short_time(trace.ttft_s), "measured: tokenizing + the prefill pass (clock paused between clicks)"),
        ("Last ITL", short_time(last_gap), "measured: the last decode pass and its sampling"),
        ("ITL p50 so far", short_time(trace.itl_p50_s), "measured: median of the gaps so far"),
        ("KV cache", human_bytes(trace.final_kv_cache_bytes), "measured: bytes of the real cache tensors"),
    ]


def newest_pass_line(trace: Trace, escape: Callable[[str], str]) -> str:
    """The newest pass in one line of Markdown (its token, anyone's text, through `escape`): what it computed, the
    token it sampled, its measured time and how close that came to the device's floor (`floor_share`: a decode's bytes
    read per second as a share of the measured read bandwidth, a prefill's FLOP/s of the measured matmul peak), marked
    when it was disturbed."""
    p = trace.passes[-1]
    what = f"prefill of {p.tokens_in} tokens" if p.is_prefill else "decode"
    mark = f" {DISTURBED_MARK} disturbed" if p.disturbed else ""
    token = escape(display_token(p.token_text))
    share = pass_share(p, trace.device).brief()  # bytes or FLOPs modelled, over the measured time
    return f"**Pass {p.index}** · {what} → **“{token}”** in **{short_time(p.wall_s)}** (measured) · {share}{mark}"


def tokens_line(trace: Trace) -> str:
    prompt = " │ ".join(display_token(t) for t in trace.prompt_tokens_text)
    generated = " │ ".join(display_token(p.token_text) for p in trace.passes)
    return f"{prompt}\n→ {generated}"


def top5_frame(p: PassRecord) -> pd.DataFrame:
    return pd.DataFrame(
        {"rank": i + 1, "token": display_token(t.text), "probability": t.prob, "sampled": t.token_id == p.token_id}
        for i, t in enumerate(p.top_tokens)
    )


def attention_rows_frame(maps: AttentionMaps, layer: int, head: int) -> pd.DataFrame:
    """The prefill's T x T map (masked cells marked), then each decode pass's one row over the cache, in the shape
    `prefill_chart` draws: one cell per (query, key). Long requests keep their last WINDOW_POSITIONS positions. Built
    column by column (drawn on every click of a room: a record per cell took tens of milliseconds)."""
    T = maps.prompt_len
    rows = [(q, maps.prefill[layer][head, q, :T]) for q in range(T)]
    rows += [(T + k, row[head]) for k, row in enumerate(maps.decode[layer])]  # decode pass k+1 feeds position T + k
    last = rows[-1][0]
    start = max(0, last + 1 - WINDOW_POSITIONS)
    queries, keys, probs = [], [], []
    for query, row in rows[start:]:  # row q is query position q: the first `start` fall outside the window
        stop = T if query < T else len(row)
        queries.append(np.full(stop - start, query))
        keys.append(np.arange(start, stop))
        probs.append(np.asarray(row[start:stop], dtype=np.float32))
    query_pos, key_pos = np.concatenate(queries), np.concatenate(keys)
    labels = np.array([position_label(p, maps.tokens_text[p]) for p in range(last + 1)], dtype=object)
    masked = key_pos > query_pos
    return pd.DataFrame(
        {
            "query_pos": query_pos,
            "key_pos": key_pos,
            "query": labels[query_pos],
            "key": labels[key_pos],
            "prob": np.concatenate(probs).astype(np.float64),
            "masked": masked,
            "cell": np.where(masked, MASKED, ATTENDED),
            "phase": np.where(query_pos < T, "prefill", "decode"),
        }
    )


NEWEST_ROWS = 6  # the strip's rows: the map's newest ones, each tall enough to see on a projector


def newest_rows_frame(rows: pd.DataFrame, count: int = NEWEST_ROWS) -> pd.DataFrame:
    """The last `count` query rows of `attention_rows_frame`, each named by the pass that computed it: the newest row
    drawn large (in the whole map a row is a few pixels tall once the prompt is long)."""
    last = int(rows["query_pos"].max())
    newest = rows[rows["query_pos"] > last - count].copy()
    prompt_len = int(rows.loc[rows["phase"] == "prefill", "query_pos"].max()) + 1
    tokens = newest["query"].str.split(":", n=1).str[1]  # position_label's "position:token"
    newest["row"] = [  # query position T + k is computed by decode pass k + 1; every prompt row by the prefill
        f"pass {q - prompt_len + 1} · {token}" if q >= prompt_len else f"prompt {q} · {token}"
        for q, token in zip(newest["query_pos"], tokens)
    ]
    return newest


def newest_rows_chart(frame: pd.DataFrame, height_px: int = 180) -> alt.LayerChart:
    """The strip of the newest rows: one row per query (named by its pass and token), a cell per key position in the
    cache, oldest to newest, in the map's colours (grey: masked by the causal mask). `height_px` is the strip's own;
    its axes add to it (`FIT_WIDTH`)."""
    order = frame.drop_duplicates("query_pos").sort_values("query_pos")["row"].tolist()
    base = alt.Chart(frame).encode(
        x=alt.X("key_pos:O", title="key position, oldest → newest", axis=alt.Axis(labels=False, ticks=False)),
        y=alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=130, labelOverlap=False)),
        tooltip=["row", "key", alt.Tooltip("prob:Q", format=".4f", title="probability")],
    )
    attended = (
        base.transform_filter("!datum.masked")
        .mark_rect()
        .encode(color=alt.Color("prob:Q", scale=PROB_SCALE, title="probability (√ scale)", legend=None))
    )
    masked = base.transform_filter("datum.masked").mark_rect(color=MASKED_COLOR)
    return alt.layer(attended, masked).properties(height=height_px, autosize=FIT_WIDTH)


def step_itl_frame(trace: Trace, itl_slo_s: float) -> pd.DataFrame:
    """The ITL frame of `latency.itl_frame`, with each gap's pass marked when it was disturbed."""
    frame = itl_frame(trace, itl_slo_s)
    frame["timing"] = [
        "disturbed: other work ran beside it" if trace.passes[k].disturbed else "clean" for k in frame["pass"]
    ]
    return frame


def step_itl_chart(frame: pd.DataFrame, itl_slo_s: float) -> alt.LayerChart:
    """The ITL bars against the SLO (`latency.itl_chart`), a ⚠ over each disturbed pass's bar. Its plot keeps its
    height whatever its legends and axes take (`FIT_WIDTH`): fitted into 280 px, the presenter theme's larger type
    left the bars a sliver and cut the axis title. The SLO line's legend goes under the plot: beside the bars' legend
    above it, the two ran past a phone's column ("ITL SLO 50 m")."""
    marks = (
        alt.Chart(frame)
        .transform_filter("datum.timing != 'clean'")
        .mark_text(text=DISTURBED_MARK, baseline="bottom", dy=-4)
        .encode(x="token_index:O", y="itl_ms:Q", tooltip=["token_index:O", "timing:N"])
    )
    drawn = itl_chart(frame, itl_slo_s)
    for legend in _legends(drawn, "stroke"):  # the SLO rule's
        legend.orient = "bottom"
    return (drawn + marks).properties(autosize=FIT_WIDTH)


def wrapped_label(label: str, width: int = LEGEND_LINE_CHARS) -> list[str]:
    """A legend entry "what (source)" as lines of at most `width` characters (a longer word stays whole), the source
    on lines of its own: "compute not hidden behind memory (modelled)" → ["compute not hidden", "behind memory",
    "(modelled)"]."""
    what, sep, source = label.partition(" (")
    return textwrap.wrap(what, width) + (textwrap.wrap(f"({source}", width) if sep else [])


def wrapped_labels_expr(labels: Sequence[str], width: int = LEGEND_LINE_CHARS) -> str:
    """A Vega `labelExpr` that draws each of `labels` on its wrapped lines (`wrapped_label`), any other as it is."""
    expr = "datum.label"
    for label in reversed(labels):
        lines = json.dumps(wrapped_label(label, width), ensure_ascii=False)
        expr = f"datum.label === {json.dumps(label, ensure_ascii=False)} ? {lines} : {expr}"
    return expr


def step_times_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Each pass's time split, as on the Cost page (`cost.time_split_chart`), with legends that fit a phone's column:
    the segments' names wrapped to short lines (`wrapped_label`) in two columns above the plot, never cut
    (`labelLimit` 0), and the passes' outline legend under it rather than beside it, where it took a third of the
    width the segments' legend above needed. Its plot keeps its height (`FIT_WIDTH`): squeezed into the chart's 320
    px with the legends' rows, it was left a third of that on a phone."""
    drawn = time_split_chart(frame)
    for legend in _legends(drawn, "color"):  # the segments'
        legend.columns, legend.labelLimit, legend.labelExpr = LEGEND_COLUMNS, 0, wrapped_labels_expr(SEGMENT_LABELS)
    for legend in _legends(drawn, "stroke"):  # the passes' outline
        legend.orient, legend.direction = "bottom", "horizontal"
    return drawn.properties(autosize=FIT_WIDTH)  # the legends' rows add to the plot's height, not take from it


def _legends(chart: alt.LayerChart, channel: str) -> list[alt.Legend]:
    """The legends that `chart`'s layers give `channel` ("color", "stroke"), to be set in place: the chart is the
    caller's own, just built."""
    channels = [layer.encoding[channel] for layer in chart.layer if layer.encoding is not alt.Undefined]
    return [c["legend"] for c in channels if c is not alt.Undefined and isinstance(c["legend"], alt.Legend)]


MARKED_IN_TRACE = "the trace (JSON) keeps each pass's figure (`beside_cpu_s`)"


def disturbed_sentence(passes: Sequence[PassRecord], marked: str = MARKED_IN_TRACE) -> str:
    """One line naming the passes timed while other work ran beside them (`PassRecord.disturbed`), and where they are
    `marked`; "" when none was."""
    disturbed = [p for p in passes if p.disturbed]
    if not disturbed:
        return ""
    shown = ", ".join(str(p.index) for p in disturbed[:8]) + (" …" if len(disturbed) > 8 else "")
    most = max((p.beside_cpu_s or 0.0) / p.wall_s for p in disturbed)
    which = f"pass {shown}" if len(disturbed) == 1 else f"passes {shown}"
    return (
        f"Disturbed: {len(disturbed)} of {len(passes)} passes ({which}) were timed while other work used the CPU "
        f"beside them (measured: up to {most:.0%} of a pass's time, by other sessions of this server or other "
        f"programs), so their times may be high; {marked}. Run again on a quiet server for a clean measurement."
    )
