"""The Tour: eight slides through the two phases, each one chart and one or two sentences computed from a run.

Every number in a sentence comes from the run (measured, or "recorded" for a recording) or from the roofline model on
the run's own model shapes and device figures (modelled), and says which. Nothing here keeps state or draws: the page
(`explorer.ui.tour_view`) asks for one slide at a time and hands its chart to `ui.chart`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import altair as alt
import pandas as pd

from explorer.charts import attention as attention_charts
from explorer.charts import kv as kv_charts
from explorer.charts import run as run_charts
from explorer.charts import tour as charts
from explorer.charts.cost import median_decode_index
from explorer.charts.latency import decode_bytes_sentence
from explorer.charts.roofline import prefill_ridge_sentence
from explorer.charts.tables import readable_figures
from explorer.core.attention_maps import AttentionMaps
from explorer.core.roofline import (
    LAYOUT_NAMES,
    LAYOUT_WORDS,
    RIDGE_BATCH_LIMIT,
    CacheOptions,
    pass_cost,
    ridge_batch,
)
from explorer.core.trace import ModelInfo, Trace
from explorer.core.units import human_bytes, ms, short_time

TITLES = (
    "The prompt as tokens",
    "Prefill: one pass, a masked T × T map",
    "Decode: one row per pass",
    "The KV cache grows",
    "Where the time goes",
    "TTFT against ITL",
    "Why batching helps decode",
    "What serving systems do",
)
SLIDE_COUNT = len(TITLES)
NARROW_PANEL_WIDTH_PX, PANEL_WIDTH_PX = 190, 560  # each phase's panel on the time slide (a facet does not stretch)
MAP_SIDE = 48  # the prefill map: at most 48 x 48 blocks (max-pooled beyond 48 prompt tokens)
ROW_PX = 36  # one row of token boxes
NARROW_TOKENS_PER_ROW = 6  # a slide's chart is narrower than a page's: fewer, wider boxes for 18 px labels
# Characters of a token a cell holds whole: 18 px type in a sixth of a slide's chart (~80 px with the sidebar open),
# 11 px type in a twelfth of a laptop's page (~80 px). A longer token takes more cells, never cut ("<|im_st…").
NARROW_CELL_CHARS, CELL_CHARS = 7, 10
SOURCES = (
    "Sarathi-Serve (chunked prefills): https://arxiv.org/abs/2403.02310 · vLLM's chunked prefill: "
    "https://docs.vllm.ai/en/latest/configuration/optimization.html · DistServe (prefill/decode disaggregation): "
    "https://arxiv.org/abs/2401.09670 · Splitwise: https://arxiv.org/abs/2311.18677"
)


@dataclass(frozen=True)
class Run:
    """What a slide reads: the trace, its attention maps (or why there are none), and the slide's chart height."""

    trace: Trace
    maps: AttentionMaps | None
    attention_note: str
    height_px: int
    measured: str = "measured"  # "recorded" when the run comes from a recording
    narrow: bool = False  # the chart shares the width with its sentences (presenter mode): fewer, wider marks
    capture_cut_short: bool = False  # capture was on but a click cut its replay short: the Attention page redoes it
    readable: bool = False  # presenter mode: the text's figures to 3 significant digits (`tables.readable_figures`)


@dataclass(frozen=True)
class Slide:
    index: int  # 0-based
    title: str
    sentences: tuple[str, ...]  # one or two, every number labelled measured / modelled
    chart: alt.TopLevelMixin
    frame: pd.DataFrame  # the data behind the chart (a CSV download)
    caption: str
    source: str  # where the chart's numbers come from
    more: str  # the longer explanation, shown below the chart (markdown, numbers and fixed words only)
    note: str = ""  # why the run has no attention maps, in the run's (or a recording file's) own words: plain text


def slide(index: int, run: Run) -> Slide:
    """Slide `index` (0-based) of the tour, built from `run`; its text's figures rounded for a room when `readable`."""
    if not 0 <= index < SLIDE_COUNT:
        raise ValueError(f"slide {index} is not one of the {SLIDE_COUNT}")
    built = BUILDERS[index](run)
    if not run.readable:
        return built
    return replace(
        built,
        sentences=tuple(readable_figures(s) for s in built.sentences),
        caption=readable_figures(built.caption),
        more=readable_figures(built.more),
    )  # not the note: a recording file's own words


def _slide(index: int, sentences: list[str], chart: alt.TopLevelMixin, frame: pd.DataFrame, *texts: str) -> Slide:
    caption, source, more = texts
    return Slide(index, TITLES[index], tuple(sentences), chart, frame, caption, source, more)


def _origin(run: Run) -> str:
    return "recording" if run.measured == "recorded" else "run"


def _template(trace: Trace) -> str:
    return "with the chat template" if trace.chat_template_used else "raw, no chat template"


# --- 1: the prompt as tokens -----------------------------------------------------------------------------------------
def tokens_slide(run: Run) -> Slide:
    trace = run.trace
    rows = max(2, (run.height_px - 40) // ROW_PX)
    per_row = NARROW_TOKENS_PER_ROW if run.narrow else charts.TOKENS_PER_ROW
    frame = charts.tokens_frame(trace, rows, per_row, NARROW_CELL_CHARS if run.narrow else CELL_CHARS)
    T, N = trace.prompt_len, trace.new_tokens
    origin = _origin(run)
    sentences = [
        f"This prompt is **{T} tokens** ({_template(trace)}; counted from this {origin}): ONE prefill pass computes "
        "them all at once and samples the first new token.",
        f"Then one decode pass per token: {N - 1} more for the other {N - 1} of {N} new tokens.",
    ]
    shown = "" if len(frame) > T else f" (the first {len(frame) - 2} shown)"
    return _slide(
        0,
        sentences,
        charts.sized(charts.token_grid_chart(frame, per_row), run.height_px),
        frame,
        f"Orange: the {T} prompt tokens{shown}, all computed by the prefill; green: the token it samples.",
        f"{run.measured}: the run's tokens",
        "A token is a piece of a word from the model's vocabulary; the chat template adds the role markers the model "
        "was trained with. The Inside one inference page shows the prompt as typed beside its tokens.",
    )


# --- 2: prefill and its mask -----------------------------------------------------------------------------------------
def full_maps(run: Run) -> bool:
    """Attention maps that hold the whole prompt (a recording may keep a window of a long prompt only)."""
    maps = run.maps
    if maps is None or not maps.prefill:
        return False
    return all(a.shape[-1] == run.trace.prompt_len for a in maps.prefill.values())


def default_layer(maps: AttentionMaps) -> int:
    return maps.layers[len(maps.layers) // 2]  # the Attention page's default: the middle captured layer


def prefill_slide(run: Run) -> Slide:
    trace = run.trace
    T, masked = trace.prompt_len, trace.prompt_len * (trace.prompt_len - 1) // 2
    first = (
        f"ONE prefill pass computed all {T} positions in {ms(trace.prefill.wall_s)} ({run.measured}): every query "
        f"row scores every key, a {T} × {T} map per head."
    )
    if full_maps(run):
        maps = run.maps
        assert maps is not None
        layer = default_layer(maps)
        facts = attention_charts.mask_facts(maps, layer)
        frame = attention_charts.pooled_frame(maps, layer, [0], MAP_SIDE, trace.model.kv_heads)
        chart = charts.sized(attention_charts.pooled_chart(frame), run.height_px)
        second = (
            f"The {masked:,} cells above the diagonal are the future, masked before the softmax (drawn from an eager "
            "replay): the largest "
            f"probability there is {facts.max_masked_prob:g} ({run.measured})."
        )
        block = int(frame["block"].iloc[0])
        caption = f"Layer {layer}, head 0: each row is one query's softmax; grey is masked (p = 0)" + (
            f"; each cell is the largest probability in a {block} × {block} block." if block > 1 else "."
        )
        more_sink = " " + attention_charts.sink_sentence(maps, layer, 0, run.measured)
        source = f"{run.measured}: captured attention probabilities (float16)"
    else:
        frame = charts.mask_frame(T, MAP_SIDE)
        chart = charts.mask_chart(frame, run.height_px)
        why = (
            "The attention capture was cut short by a click: open the Attention page to capture the maps; until then"
            if run.capture_cut_short
            else "No attention maps were captured:"
        )
        second = (
            f"{masked:,} of its {T * T:,} cells lie in the future, masked to 0. {why} the chart shows the mask's shape."
        )
        caption = "The shape of the prefill's score map: orange is computed, grey is masked (the future)."
        source = "the run's prompt length (no attention maps)"
        more_sink = ""
    more = (
        "All prompt tokens are in memory together, yet none may see a later one: prefill is parallel, not "
        "bidirectional. The timed pass uses PyTorch's fused attention (SDPA with is_causal=True), which applies the "
        "mask inside the kernel and skips the tiles wholly above the diagonal, so most future scores are never "
        "computed: the roofline counts only the useful pairs, T (T + 1) / 2 per head. The maps drawn here come from a "
        "separate, untimed replay with eager attention: it computes all T × T scores and sets the future ones to 0 "
        "before the softmax."
    ) + more_sink
    note = "" if full_maps(run) else f"Why no maps: {run.attention_note}"
    return replace(_slide(1, [first, second], chart, frame, caption, source, more), note=note)


# --- 3: decode, one row per pass -------------------------------------------------------------------------------------
def decode_slide(run: Run) -> Slide:
    trace = run.trace
    # Rows a slide can label: on a projector's 18 px labels, 10 rows in 400 px ran together and one was dropped.
    steps = max(4, run.height_px // (50 if run.narrow else 40))
    if not trace.decodes:
        frame = charts.decode_rows_frame(trace, steps)
        sentences = ["This run made a single token, so there is no decode pass: raise Max new tokens and run again."]
        chart = charts.decode_rows_chart(frame, trace.prompt_len, run.height_px)
        more = f"{attention_charts.NO_MASK_IN_DECODE}\n\n{attention_charts.MASK_PRECISELY}"
        return _slide(2, sentences, chart, frame, "No decode pass.", run.measured, more)
    first, last = trace.decodes[0].cache_len_after, trace.decodes[-1].cache_len_after
    median_s = charts.median_decode_s(trace)
    sentences = [
        f"Each decode pass computes ONE query row over the cache: {first} keys at the first, {last} at the last "
        f"({run.measured}); nothing is in the future, nothing to mask.",
        f"A decode pass: {ms(median_s)} ({run.measured}, median of {len(trace.all_decodes)}); the whole prefill: "
        f"{ms(trace.prefill.wall_s)}.",
    ]
    if full_maps(run):
        maps = run.maps
        assert maps is not None
        layer = default_layer(maps)
        shown = min(steps, len(maps.decode[layer]))
        key_bin = attention_charts.decode_key_bin(attention_charts.decode_cache_lens(maps, layer)[:shown])
        frame = attention_charts.decode_frame(maps, layer, 0, 0, shown, key_bin)
        frame["row"] = [f"decode {step + 1}" for step in frame["step"]]  # short labels for a slide's width
        chart = charts.sized(attention_charts.decode_chart(frame, trace.prompt_len), run.height_px)
        caption = f"Layer {layer}, head 0, the first {shown} decode passes: each row one key longer than the last."
        source = f"{run.measured}: captured attention probabilities (float16)"
    else:
        frame = charts.decode_rows_frame(trace, steps)
        chart = charts.decode_rows_chart(frame, trace.prompt_len, run.height_px)
        caption = f"The first {len(frame)} decode passes: the keys each one query row reads (dashed: end of prompt)."
        source = f"{run.measured}: the run's cache lengths (attention maps were not captured)"
    more = f"{attention_charts.NO_MASK_IN_DECODE}\n\n{attention_charts.MASK_PRECISELY}"
    return _slide(2, sentences, chart, frame, caption, source, more)


# --- 4: the cache grows ----------------------------------------------------------------------------------------------
def appended_text(model: ModelInfo) -> str:
    """What one decode pass adds, by the per-layer rule: every layer while it grows, then only the full layers once
    each sliding layer holds its window - 1 positions (a long context grows by that, not by every layer's share)."""
    if not model.sliding_layers:
        return f"{model.kv_bytes_per_token:,} B (modelled)"
    return (
        f"{model.kv_bytes_per_token:,} B while every layer grows, then {model.kv_bytes_per_token_full_layers:,} B "
        f"once the {model.sliding_layers} sliding-window layers hold their window - 1 positions: only the "
        f"{model.full_layers} full-attention layers keep growing (modelled)"
    )


def cache_slide(run: Run) -> Slide:
    trace, model = run.trace, run.trace.model
    frame = kv_charts.growth_frame(trace)
    sentences = [
        f"The prefill wrote {trace.prompt_len} positions at once ({human_bytes(trace.prefill.kv_cache_bytes)}, "
        f"{run.measured}); each decode pass appends one: {appended_text(model)}.",
        f"{human_bytes(trace.final_kv_cache_bytes)} after {trace.new_tokens} passes ({run.measured}). "
        + kv_charts.growth_check_text(frame),
    ]
    return _slide(
        3,
        sentences,
        charts.sized(kv_charts.growth_chart(frame), run.height_px),
        frame,
        "Points: the real cache tensors' bytes after each pass; line: the formula.",
        f"{run.measured} (points) vs modelled (line)",
        kv_charts.formula_text(model, trace.passes[-1].cache_len_after)
        + " (modelled). "
        + kv_charts.gqa_text(model, trace.passes[-1].cache_len_after),
    )


# --- 5: where the time goes ------------------------------------------------------------------------------------------
def time_slide(run: Run) -> Slide:
    trace, device = run.trace, run.trace.device
    frame = charts.phase_time_frame(trace, run.measured)
    p0, wall0 = trace.prefill, trace.pass_wall_spread(0).median
    sentences = [
        f"Prefill ({trace.prompt_len} tokens): {ms(wall0)} {run.measured}, roofline bound "
        f"{ms(p0.cost.roofline_time_s)} (modelled, {p0.cost.bound}-bound)."
    ]
    more = prefill_ridge_sentence(trace)
    index = median_decode_index(trace)
    median_s = charts.median_decode_s(trace)
    if index is not None and median_s is not None:
        d = trace.passes[index]  # the pass nearest the median: its modelled bound (every decode's is near the same)
        sentences.append(
            f"A decode pass: {ms(median_s)} {run.measured} (median), bound {ms(d.cost.roofline_time_s)} (modelled, "
            f"{d.cost.bound}-bound): it reads all {human_bytes(d.cost.weight_bytes_read)} of weights "
            "for one token."
        )
        more += (
            f" Per token, the prefill took {ms(wall0 / trace.prompt_len)} and a decode pass {ms(median_s)} "
            f"({run.measured}): the same weights, {median_s / (wall0 / trace.prompt_len):,.0f}× the time per token."
        )
    return _slide(
        4,
        sentences,
        charts.phase_time_chart(
            frame, max(60, (run.height_px - 200) // 2), NARROW_PANEL_WIDTH_PX if run.narrow else PANEL_WIDTH_PX
        ),
        frame,
        f"Each phase on its own scale: black is the {run.measured} time, blue the roofline's lower bound.",
        f"{run.measured} time · roofline bound modelled from the model's FLOPs and bytes and the device's figures "
        f"(peak compute: {device.peak_flops_source}; bandwidth: {device.bandwidth_source})",
        more,
    )


# --- 6: TTFT against ITL ---------------------------------------------------------------------------------------------
def latency_slide(run: Run) -> Slide:
    trace = run.trace
    frame = run_charts.timeline_frame(trace)
    share = trace.prefill.wall_s / trace.ttft_s if trace.ttft_s > 0 else 0.0
    sentences = [
        f"TTFT {ms(trace.ttft_s)} ({run.measured}), {share:.0%} of it the prefill pass: the wait after pressing Enter."
    ]
    if trace.decodes:
        sentences.append(
            f"Then a token every {ms(trace.itl_p50_s)} (ITL p50; p99 {ms(trace.itl_p99_s)}, {run.measured}): "
            f"{trace.decode_tokens_per_s or 0:,.1f} tokens/s, one decode pass each."
        )
    return _slide(
        5,
        sentences,
        charts.with_ttft(run_charts.timeline_chart(frame), trace.ttft_s * 1e3, run.height_px),
        frame,
        "One bar per pass on the request's clock: the prefill until the first token (dashed: TTFT), then one decode "
        "per token.",
        run.measured,
        decode_bytes_sentence(trace),
    )


# --- 7: why batching helps decode ------------------------------------------------------------------------------------
def ridge_words(ridge: int | None) -> str:
    return f"compute-bound from B = {ridge:,}" if ridge else f"memory-bound at every B up to {RIDGE_BATCH_LIMIT:,}"


def batching_slide(run: Run) -> Slide:
    trace = run.trace
    frame = charts.batch_frame(trace)
    one, big = frame.iloc[0], frame.iloc[-1]
    context = charts.decode_context(trace)

    def ridge(options: CacheOptions) -> int | None:
        return ridge_batch(lambda b: pass_cost(trace.model, trace.device, 1, context, batch=b, **options))

    weights = pass_cost(trace.model, trace.device, 1, context).weight_bytes_read
    modelled_for = f"Modelled: {ridge_words(ridge(trace.cache_options))} for {LAYOUT_NAMES[trace.cache_layout]}"
    if trace.cache_layout != "read_once":
        modelled_for += f", {ridge_words(ridge({'cache_layout': 'read_once'}))} for {LAYOUT_NAMES['read_once']}"
    sentences = [
        f"Modelled: one decode step reads all {human_bytes(weights)} of weights once, for 1 sequence or "
        f"{big.batch}: {big.batch} take {ms(big.step_ms / 1e3)}, not {big.batch} × {ms(one.step_ms / 1e3)}, "
        f"{big.tokens_per_s / one.tokens_per_s:,.1f}× the tokens/s.",
        modelled_for
        + f". This {_origin(run)}'s one sequence: {ms(charts.median_decode_s(trace))} per step ({run.measured}, "
        "black tick).",
    ]
    return _slide(
        6,
        sentences,
        charts.batch_chart(frame, run.height_px),
        frame,
        f"Modelled decode steps at this run's context ({context} cached positions per sequence), for "
        f"{LAYOUT_NAMES[trace.cache_layout]}: their time in the bars (left axis), the tokens/s they give as the line "
        "(right axis).",
        f"modelled (roofline: the run's model shapes and device figures) · black tick {run.measured}",
        "Each sequence brings its own KV cache, read every step, so the KV part grows with B while the weight read "
        f"does not. The bars model {LAYOUT_WORDS[trace.cache_layout]}; a serving engine's paged cache reads each "
        "sequence's cache once a step and writes only the new position, so its KV part is smaller and its step "
        "crosses the ridge at a smaller B. The Batching page measures real batched steps on this model.",
    )


# --- 8: what serving systems do --------------------------------------------------------------------------------------
def serving_slide(run: Run) -> Slide:
    trace = run.trace
    prefill_s = trace.pass_wall_spread(0).median
    decode_s = charts.median_decode_s(trace)
    decode_word = run.measured
    if decode_s is None:  # a one-token run: the modelled decode step at the prompt's length, scaled as the prefill
        decode_s = pass_cost(trace.model, trace.device, 1, trace.prompt_len).roofline_time_s
        decode_word = "modelled"
    chunks = charts.chunk_times_s(trace, charts.CHUNKS)
    machine = charts.machine_word(trace.device.kind)  # a run on a CPU is not drawn on GPUs
    frame = charts.serving_frame(prefill_s, decode_s, chunks, machine)
    lanes = frame.drop_duplicates("lane").set_index("lane")
    gaps, added = lanes["longest_gap_ms"], lanes["added_ms"]
    sentences = [
        f"This {trace.prompt_len}-token prefill took {ms(prefill_s)} ({run.measured}): {prefill_s / decode_s:,.1f} "
        f"decode steps' time ({decode_word}).",
        # One measure, the lanes' own: the running request's longest wait between two of its tokens.
        f"Modelled, a running request's longest wait between tokens: {short_time(gaps.iloc[0] / 1e3)} with the "
        f"prefill in one piece, {short_time(gaps.iloc[1] / 1e3)} chunked (Sarathi, vLLM), "
        f"{short_time(gaps.iloc[2] / 1e3)} (one decode step) with it on its own {machine} (DistServe), which ships "
        f"{human_bytes(trace.prefill.kv_cache_bytes)} of KV.",
    ]
    return _slide(
        7,
        sentences,
        charts.serving_chart(frame, run.height_px),
        frame,
        "Three ways to serve a new prompt while another request decodes; each lane's label: the longest wait "
        "between that request's tokens.",
        f"prefill and decode times {run.measured}; chunk + decode steps modelled (a decode step plus the chunk's "
        "share of the measured prefill, in the ratio of the chunks' FLOPs)",
        f"Run in one piece, the prefill holds a running request's next token back {added.iloc[0]:,.0f} ms: its gap "
        f"grows from one decode step ({decode_s * 1e3:,.0f} ms) to {gaps.iloc[0]:,.0f} ms. Split into {len(chunks)} "
        f"chunks that each share a step with that request's decode (chunked prefill: Sarathi-Serve, vLLM), each "
        f"step is the decode's own work plus the chunk's, and the longest gap is {gaps.iloc[1]:,.0f} ms "
        f"({added.iloc[1]:,.0f} ms more than a decode step); on separate prefill machines (disaggregation: "
        f"DistServe, Splitwise) decode keeps its {gaps.iloc[2]:,.0f} ms, and the prompt's KV cache "
        f"({human_bytes(trace.prefill.kv_cache_bytes)}) travels between machines. All modelled from the times "
        f"{run.measured} above. Sources: {SOURCES}.",
    )


BUILDERS: tuple[Callable[[Run], Slide], ...] = (
    tokens_slide,
    prefill_slide,
    decode_slide,
    cache_slide,
    time_slide,
    latency_slide,
    batching_slide,
    serving_slide,
)
