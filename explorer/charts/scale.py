"""The At-scale page's builders: a decode step's floor against context (weight and KV shares), tokens/s against batch
up to the memory wall, and memory against batch. The frames come from `explorer.scale.whatif`; a factor measured on
this machine, when given, draws the same floor scaled as a separate dashed series labelled as an assumption."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import MODELLED, two_lines
from explorer.core.units import GB, to_ms
from explorer.scale.params import expected_experts_read
from explorer.scale.whatif import WhatIf, decode_step

PART_DOMAIN = ["weights", "KV cache"]
PART_RANGE = ["#7570b3", "#1b9e77"]  # weights purple; the KV cache decode green, as on the KV-cache page
FLOOR = "GPU floor (modelled)"
ASSUMPTION_WORD = "assumption"  # a series scaled by this machine's measured gap: never a measurement of the GPU
GRID_STEPS_PER_DOUBLING = 2  # points at 1, 1.4, 2, 2.8, 4, ... on the log axes


def geometric_grid(top: int, extra: tuple[int | None, ...] = ()) -> list[int]:
    """Whole numbers from 1 to `top`, evenly spaced on a log axis, with `extra` points (within range) added."""
    points, value = {1, top}, 1.0
    while value < top:
        points.add(round(value))
        value *= 2 ** (1 / GRID_STEPS_PER_DOUBLING)
    points |= {e for e in extra if e is not None and 1 <= e <= top}
    return sorted(points)


def log_scale(values: pd.Series) -> alt.Scale:
    """A log axis that ends where the data does (a nice round end would draw empty decades)."""
    return alt.Scale(type="log", domain=[int(values.min()), int(values.max())], nice=False)


def assumed_label(factor: float) -> str:
    return f"floor x {factor:.1f}: this machine's gap ({ASSUMPTION_WORD})"


def _series_encoding(factor: float | None) -> tuple[alt.Color, alt.StrokeDash, alt.StrokeWidth, alt.Opacity]:
    """The modelled floor bold and black; this machine's gap applied to the GPU thin, light and dashed: an assumption
    is never drawn as boldly as the model it scales."""
    domain = [FLOOR] + ([assumed_label(factor)] if factor else [])
    color = alt.Color("series:N", title=None, scale=alt.Scale(domain=domain, range=["#222222", "#e7298a"]))
    dash = alt.StrokeDash("series:N", title=None, scale=alt.Scale(domain=domain, range=[[1, 0], [6, 4]]))
    width = alt.StrokeWidth("series:N", scale=alt.Scale(domain=domain, range=[3, 1.2]), legend=None)
    opacity = alt.Opacity("series:N", scale=alt.Scale(domain=domain, range=[1.0, 0.55]), legend=None)
    return color.legend(orient="top", labelLimit=0), dash.legend(None), width, opacity


# --- the decode step against context -----------------------------------------------------------------------------
def decode_context_frame(result: WhatIf, factor: float | None = None) -> pd.DataFrame:
    """One row per context at the scenario's batch: the step's weight and KV times, compute, all-reduces, its floor,
    and (given this machine's factor) that floor scaled, marked as an assumption."""
    s = result.scenario
    rows = []
    for context in geometric_grid(s.arch.max_context, (s.context, result.kv_crossover_context)):
        step = decode_step(s, s.batch, context)
        rows.append(
            {
                "context": context,
                "weights_ms": to_ms(step.cost.t_weight_read_s),
                "kv_ms": to_ms(step.cost.t_kv_s),
                "compute_ms": to_ms(step.cost.t_compute_s),
                "allreduce_ms": to_ms(step.t_link_s),
                "floor_ms": to_ms(step.floor_s),
                "bound": step.bound,
                "scaled_floor_ms": to_ms(step.floor_s) * factor if factor else None,
                "source": MODELLED if not factor else f"{MODELLED}; scaled_floor_ms: {ASSUMPTION_WORD}",
            }
        )
    return pd.DataFrame(rows)


def _floor_lines(frame: pd.DataFrame, x: str, y: str, scaled: str, factor: float | None) -> alt.Chart:
    """The modelled floor as a solid line and, with a factor, the same scaled as a dashed one."""
    long = frame[[x, y]].rename(columns={y: "value"}).assign(series=FLOOR)
    if factor:
        assumed = frame[[x, scaled]].rename(columns={scaled: "value"}).assign(series=assumed_label(factor))
        long = pd.concat([long, assumed], ignore_index=True)
    color, dash, width, opacity = _series_encoding(factor)
    return (
        alt.Chart(long)
        .mark_line()
        .encode(
            x=alt.X(f"{x}:Q"),
            y=alt.Y("value:Q"),
            color=color,
            strokeDash=dash,
            strokeWidth=width,
            opacity=opacity,
            tooltip=[f"{x}:Q", "series:N", alt.Tooltip("value:Q", format=".4~g")],
        )
    )


def _rule(x: str, value: int, label: str, color: str, align: str = "left") -> alt.LayerChart:
    """A dashed vertical line at `value`, its label beside it (on its left where it stands at the chart's end)."""
    marker = pd.DataFrame({x: [value], "label": [label]})
    rule = alt.Chart(marker).mark_rule(color=color, strokeDash=[3, 3]).encode(x=f"{x}:Q", tooltip=["label:N"])
    text = (
        alt.Chart(marker)
        .mark_text(align=align, dx=4 if align == "left" else -4, dy=-6, color=color)
        .encode(x=f"{x}:Q", text="label:N")
    )
    return rule + text.encode(y=alt.value(8))


def decode_context_chart(frame: pd.DataFrame, result: WhatIf, factor: float | None = None) -> alt.LayerChart:
    parts = (
        alt.Chart(frame)
        .transform_fold(["weights_ms", "kv_ms"], as_=["part", "ms"])
        .transform_calculate(part="datum.part == 'weights_ms' ? 'weights' : 'KV cache'")
        .mark_area(opacity=0.55)
        .encode(
            x=alt.X("context:Q", scale=log_scale(frame["context"]), title="context T: tokens each request holds (log)"),
            y=alt.Y("ms:Q", stack="zero", title="decode step floor (ms, modelled)"),
            color=alt.Color("part:N", scale=alt.Scale(domain=PART_DOMAIN, range=PART_RANGE), title="memory time"),
            order=alt.Order("part:N", sort="descending"),
            tooltip=["context:Q", "part:N", alt.Tooltip("ms:Q", format=".4~g")],
        )
    )
    layers = [parts, _floor_lines(frame, "context", "floor_ms", "scaled_floor_ms", factor)]
    crossover = result.kv_crossover_context
    if crossover is not None and crossover <= result.scenario.arch.max_context:
        right_half = crossover**2 > result.scenario.arch.max_context  # past the middle of the log axis
        label = f"KV overtakes weights: T = {crossover:,}"
        layers.append(_rule("context", crossover, label, "#1b9e77", "right" if right_half else "left"))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=300)


# --- tokens/s against batch ----------------------------------------------------------------------------------------
def batch_frame(result: WhatIf, factor: float | None = None) -> pd.DataFrame:
    """One row per batch from 1 to `max_batch` at the scenario's context: the step floor and the tokens/s ceilings
    (aggregate and per stream); with a factor, the aggregate scaled down by it, marked as an assumption."""
    s = result.scenario
    rows = []
    for batch in geometric_grid(max(result.max_batch, s.batch), (s.batch, result.ridge_batch)):
        step = decode_step(s, batch, s.context)
        rows.append(
            {
                "batch": batch,
                "step_ms": to_ms(step.floor_s),
                "tokens_per_s": batch / step.floor_s,
                "tokens_per_s_per_stream": 1 / step.floor_s,
                "bound": step.bound,
                "fits": batch <= result.max_batch,
                "scaled_tokens_per_s": batch / step.floor_s / factor if factor else None,
                "source": MODELLED if not factor else f"{MODELLED}; scaled_tokens_per_s: {ASSUMPTION_WORD}",
            }
            | moe_columns(result, batch)
        )
    return pd.DataFrame(rows)


EVERY_EXPERT = "if every expert were read (a dense model of the same size)"


def moe_columns(result: WhatIf, batch: int) -> dict[str, float]:
    """A mixture of experts' extra columns: the experts a layer is expected to read at this batch, and the tokens/s
    the same step would give if every expert were read, as a dense model of the same total size must."""
    s = result.scenario
    if not s.arch.is_moe:
        return {}
    dense = decode_step(s, batch, s.context, every_expert=True)
    return {
        "experts_read_per_layer": expected_experts_read(s.arch, batch),
        "tokens_per_s_every_expert": batch / dense.floor_s,
    }


def batch_chart(frame: pd.DataFrame, result: WhatIf, factor: float | None = None) -> alt.LayerChart:
    lines = _floor_lines(frame, "batch", "tokens_per_s", "scaled_tokens_per_s", factor).encode(
        x=alt.X("batch:Q", scale=log_scale(frame["batch"]), title="batch B: requests decoded together (log)"),
        y=alt.Y(
            "value:Q", scale=alt.Scale(type="log"), title=two_lines("decode tokens/s, all streams (modelled ceiling)")
        ),
    )
    layers = [lines]
    if "tokens_per_s_every_expert" in frame:  # the dense curve an MoE bends away from as B touches more experts
        every = frame.assign(series=EVERY_EXPERT)
        layers.append(
            alt.Chart(every)
            .mark_line(color="#999999", strokeDash=[2, 2])
            .encode(
                x="batch:Q",
                y="tokens_per_s_every_expert:Q",
                tooltip=["batch:Q", "series:N", alt.Tooltip("tokens_per_s_every_expert:Q", format=".4~g")],
            )
        )
    if result.ridge_batch is not None and result.ridge_batch <= frame["batch"].max():
        layers.append(
            _rule("batch", result.ridge_batch, f"ridge: compute-bound from B = {result.ridge_batch:,}", "#d95f02")
        )
    if result.max_batch >= 1:
        layers.append(_rule("batch", result.max_batch, f"memory full: B = {result.max_batch:,}", "#e41a1c", "right"))
    return alt.layer(*layers).properties(height=300)


# --- memory against batch ------------------------------------------------------------------------------------------
MEMORY_POINTS = 40


def memory_frame(result: WhatIf) -> pd.DataFrame:
    """One GPU's memory (GB) for batches from 0 past `max_batch`: the weights and the KV cache at the context."""
    s, part = result.scenario, result.shard
    top = max(s.batch, result.max_batch, 1)
    top = int(top * 1.25) + 1
    batches = sorted({round(top * i / MEMORY_POINTS) for i in range(MEMORY_POINTS + 1)} | {s.batch})
    return pd.DataFrame(
        {
            "batch": b,
            "weights_gb": part.weight_bytes / GB,
            "kv_gb": b * part.kv_bytes_at(s, s.context) / GB,
            "gpu_memory_gb": s.memory_bytes / GB,
            "fits": b <= result.max_batch,
            "source": f"{MODELLED}; gpu_memory_gb: spec",
        }
        for b in batches
    )


def memory_chart(frame: pd.DataFrame, result: WhatIf) -> alt.LayerChart:
    areas = (
        alt.Chart(frame)
        .transform_fold(["weights_gb", "kv_gb"], as_=["part", "gb"])
        .transform_calculate(part="datum.part == 'weights_gb' ? 'weights' : 'KV cache'")
        .mark_area(opacity=0.55)
        .encode(
            x=alt.X("batch:Q", title=f"batch B at context {result.scenario.context:,}"),
            y=alt.Y("gb:Q", stack="zero", title="one GPU's memory (GB)"),
            color=alt.Color("part:N", scale=alt.Scale(domain=PART_DOMAIN, range=PART_RANGE), title="held"),
            order=alt.Order("part:N", sort="descending"),
            tooltip=["batch:Q", "part:N", alt.Tooltip("gb:Q", format=".2f")],
        )
    )
    s = result.scenario
    label = f"GPU memory: {s.gpu.memory_text}"
    capacity = pd.DataFrame({"gb": [s.memory_bytes / GB], "label": [label]})
    wall = alt.Chart(capacity).mark_rule(color="#e41a1c").encode(y="gb:Q", tooltip=["label:N", "gb:Q"])
    text = (
        alt.Chart(capacity)
        .mark_text(align="left", dx=4, dy=-8, color="#e41a1c")
        .encode(y="gb:Q", x=alt.value(4), text="label:N")
    )
    layers = [areas, wall, text]
    if result.max_batch >= 1:
        layers.append(_rule("batch", result.max_batch, f"max batch {result.max_batch:,}", "#e41a1c"))
    return alt.layer(*layers).properties(height=260)
