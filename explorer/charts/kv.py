"""The KV cache page: measured cache bytes against the formula, layer by layer, next to the weights, and projected."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import MEASURED, MODELLED, phase_points
from explorer.core.report import cache_holds_text
from explorer.core.roofline import kv_cache_bytes, kv_reaches_weights_context
from explorer.core.trace import ModelInfo, Trace
from explorer.core.units import GB, KB, MB, human_bytes

DEFAULT_PROJECTION_CONTEXT = 8192
DEFAULT_PROJECTION_BATCH = 32
PROJECTION_BATCHES = (1, 8, 32)  # drawn as lines next to the batch the user picks
PROJECTION_POINTS = 64  # context lengths per line: the lines are straight, this only spaces the tooltips
FORMULA = f"{MODELLED}: the formula"
SOURCE_DOMAIN = [MEASURED, MODELLED]
SOURCE_RANGE = ["#1b9e77", "#7570b3"]


# --- one name, one figure: the cache's size against the bytes a pass moves through it -------------------------------
def kv_traffic_multiple(moved_bytes: int, cache_bytes: int) -> float | None:
    """How many times the cache's size a pass moved (read + written); None for an empty cache."""
    return moved_bytes / cache_bytes if cache_bytes > 0 else None


def kv_traffic_text(moved_bytes: int, cache_bytes: int) -> str:
    """A KV figure that is not the cache's size, named as what it is: '6.91 MB of KV traffic (= 3.0x the 2.30 MB
    cache)'. A concatenating cache re-reads and re-writes itself each pass, so its traffic is a multiple of what it
    holds: calling that figure "the KV cache" reads as a second, larger cache."""
    multiple = kv_traffic_multiple(moved_bytes, cache_bytes)
    beside = f" (= {multiple:,.1f}x the {human_bytes(cache_bytes)} cache)" if multiple is not None else ""
    return f"{human_bytes(moved_bytes)} of KV traffic{beside}"


# --- measured against the formula ------------------------------------------------------------------------------------
def growth_frame(trace: Trace) -> pd.DataFrame:
    """One row per pass: the cache bytes summed over the real tensors after it, and the formula at that length."""
    rows = []
    for p in trace.passes:
        modelled = kv_cache_bytes(trace.model, p.cache_len_after)
        rows.append(
            {
                "pass": p.index,
                "phase": p.phase,
                "cache_len": p.cache_len_after,
                "measured_bytes": p.kv_cache_bytes,
                "modelled_bytes": modelled,
                "measured_mb": p.kv_cache_bytes / MB,
                "modelled_mb": modelled / MB,
            }
        )
    return pd.DataFrame(rows)


def growth_chart(frame: pd.DataFrame, height_px: int = 380, legend_orient: str = "top") -> alt.LayerChart:
    """Points: the measured cache after each pass (coloured by phase). Line: the formula from an empty cache on,
    through every pass's length (straight for full attention; it bends where sliding layers reach their window).
    `legend_orient="bottom"` stacks the legends under the plot, for a chart half a projected screen wide."""
    formula = pd.DataFrame(
        {
            "cache_len": [0, *frame["cache_len"]],
            "modelled_mb": [0.0, *frame["modelled_mb"]],
            "source": FORMULA,
        }
    )
    line = (
        alt.Chart(formula)
        .mark_line(strokeWidth=2, color=SOURCE_RANGE[1])
        .encode(
            x=alt.X("cache_len:Q", title="positions in the cache after the pass", scale=alt.Scale(nice=False)),
            y=alt.Y("modelled_mb:Q", title="KV cache (MB)"),
            # A field-driven dash overrides the mark's, so the dash pattern lives in the scale (and the legend).
            strokeDash=alt.StrokeDash(
                "source:N",
                scale=alt.Scale(domain=[FORMULA], range=[[6, 3]]),
                title=None,
                legend=alt.Legend(orient=legend_orient, symbolStrokeWidth=2),
            ),
        )
    )
    byte_tips = [alt.Tooltip(f"{kind}_bytes:Q", format=",", title=f"{kind} bytes") for kind in (MEASURED, MODELLED)]
    tooltip = ["pass", "phase", "cache_len", *byte_tips]
    points = phase_points(
        alt.Chart(frame), 45, f"{MEASURED}:", legend_orient, x="cache_len:Q", y="measured_mb:Q", tooltip=tooltip
    )
    return alt.layer(line, points).resolve_scale(color="independent").properties(height=height_px)


def growth_check_text(frame: pd.DataFrame) -> str:
    """Whether the formula explains every measured point, in words."""
    gap = (frame["measured_bytes"] - frame["modelled_bytes"]).abs().max()
    if gap == 0:
        return f"Measured and modelled agree to the byte at all {len(frame)} passes."
    return f"Measured and modelled differ by up to {human_bytes(gap)} (padding or another dtype?)."


FULL_LAYERS = "full-attention layers"
SLIDING_LAYERS = "sliding-window layers"
KIND_COLOURS = {FULL_LAYERS: SOURCE_RANGE[0], SLIDING_LAYERS: "#d95f02"}


def layer_kind(model: ModelInfo, layer: int) -> str:
    return SLIDING_LAYERS if model.windows[layer] else FULL_LAYERS


def layers_frame(trace: Trace, pass_index: int) -> pd.DataFrame:
    """One row per layer for one pass: measured bytes of that layer's K and V, and the per-layer formula (a sliding
    layer holds at most window - 1 positions)."""
    p, m = trace.passes[pass_index], trace.model
    rows = []
    for layer, measured in enumerate(p.kv_layer_bytes):
        modelled = m.kv_bytes_per_token_per_layer * m.kv_positions_held(layer, p.cache_len_after)
        rows.append(
            {
                "layer": layer,
                "kind": layer_kind(m, layer),
                "window": m.windows[layer] or None,
                "measured_bytes": measured,
                "modelled_bytes": modelled,
                "measured_kb": measured / KB,
                "modelled_kb": modelled / KB,
            }
        )
    return pd.DataFrame(rows)


def kinds_frame(trace: Trace) -> pd.DataFrame:
    """One row per pass and kind of layer (full, sliding): the measured bytes those layers hold after the pass.
    Sliding layers plateau once they hold their window; full layers keep growing."""
    m = trace.model
    rows = []
    for p in trace.passes:
        for kind in (FULL_LAYERS, SLIDING_LAYERS):
            layers = [i for i in range(m.layers) if layer_kind(m, i) == kind]
            if not layers:
                continue
            measured = sum(p.kv_layer_bytes[i] for i in layers if i < len(p.kv_layer_bytes))
            rows.append(
                {
                    "pass": p.index,
                    "cache_len": p.cache_len_after,
                    "kind": f"{kind} ({len(layers)})",
                    "measured_bytes": measured,
                    "measured_kb": measured / KB,
                }
            )
    return pd.DataFrame(rows)


def kinds_chart(frame: pd.DataFrame) -> alt.Chart:
    """A line per kind of layer against the cache length: the sliding line goes flat, the full one climbs."""
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("cache_len:Q", title="positions in the cache after the pass", scale=alt.Scale(nice=False)),
            y=alt.Y("measured_kb:Q", title="K + V held (kB, measured)"),
            color=alt.Color("kind:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=["pass", "kind", "cache_len", alt.Tooltip("measured_bytes:Q", format=",", title="measured bytes")],
        )
        .properties(height=300)
    )


def layers_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """A bar per layer (measured; full and sliding layers in their own colours), a dash on each at the formula's
    bytes for that layer (modelled)."""
    # The legend names only the kinds this model has: "sliding-window layers" for a model with none misleads.
    kinds = [(kind, colour) for kind, colour in KIND_COLOURS.items() if kind in set(frame["kind"])]
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            # 30 layer numbers at presenter sizes overlap: the drawing keeps every other one
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0, labelOverlap="greedy")),
            y=alt.Y("measured_kb:Q", title="K + V (kB)"),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=[k for k, _ in kinds], range=[c for _, c in kinds]),
                title=None,
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                "layer",
                "kind",
                "window",
                alt.Tooltip("measured_bytes:Q", format=",", title="measured bytes"),
                alt.Tooltip("modelled_bytes:Q", format=",", title="modelled bytes"),
            ],
        )
    )
    ticks = (
        alt.Chart(frame).mark_tick(color=SOURCE_RANGE[1], thickness=3, size=28).encode(x="layer:O", y="modelled_kb:Q")
    )
    return alt.layer(bars, ticks).properties(height=300)


# --- the formula with this model's numbers -------------------------------------------------------------------------
def formula_text(model: ModelInfo, cache_len: int) -> str:
    """`2 × 30 × 3 × 64 × 4 B = 46,080 B per token` and the same times the current cache length; with sliding layers,
    the positions each kind of layer holds."""
    total = kv_cache_bytes(model, cache_len)
    if model.sliding_layers:
        return sliding_formula_text(model, cache_len)
    if model.kv_cache_key_width:
        return (
            f"({model.cache_key_width} + {model.cache_value_width} values) × {model.layers} layers × "
            f"{model.bytes_per_element} B ({model.dtype}) = {model.kv_bytes_per_token:,} B per token; × {cache_len:,} "
            f"cached positions = {total:,} B ({human_bytes(total)}). {cache_holds_text(model).capitalize()}."
        )
    return (
        f"2 (K and V) × {model.layers} layers × {model.kv_heads} KV heads × {model.head_dim} head dim × "
        f"{model.bytes_per_element} B ({model.dtype}) = {model.kv_bytes_per_token:,} B per token; "
        f"× {cache_len:,} cached positions = {total:,} B ({human_bytes(total)})"
    )


def sliding_formula_text(model: ModelInfo, cache_len: int) -> str:
    """Per layer 2 × kv_heads × head_dim × bytes per position held: every position in a full layer, at most
    window - 1 in a sliding one (the cache keeps no more: the next query brings the window's last position)."""
    per_layer = model.kv_bytes_per_token_per_layer
    parts = [f"{model.full_layers} full layers × {cache_len:,} positions"] if model.full_layers else []
    for window in sorted({w for w in model.windows if w}):
        count = sum(1 for w in model.windows if w == window)
        held = min(cache_len, window - 1)
        parts.append(f"{count} sliding layers × min({cache_len:,}, {window} - 1) = {held:,} positions")
    total = kv_cache_bytes(model, cache_len)
    return (
        f"per layer and position: 2 (K and V) × {model.kv_heads} KV heads × {model.head_dim} head dim × "
        f"{model.bytes_per_element} B ({model.dtype}) = {per_layer:,} B; held: " + " + ".join(parts) + f" → "
        f"{total:,} B ({human_bytes(total)}). Past the window a token adds {model.kv_bytes_per_token_full_layers:,} B "
        "(the full layers only)."
    )


def gqa_text(model: ModelInfo, cache_len: int) -> str:
    """What the cache would cost with one KV head per query head (plain multi-head attention)."""
    if model.latent_cache:
        per_head = model.layers * model.heads * (model.head_dim + model.sv_head_dim) * model.bytes_per_element
        return (
            f"Multi-head latent attention: caching every head's K and V ({model.heads} heads × (K {model.head_dim} + "
            f"V {model.sv_head_dim})) would take {per_head:,} B per token and {human_bytes(per_head * cache_len)} now: "
            f"{per_head / model.kv_bytes_per_token:.1f}× the latent this cache holds."
        )
    if not model.is_gqa:
        return "This model has one KV head per query head (multi-head attention): no sharing, no saving."
    mha_per_token = model.kv_bytes_per_token * model.heads // model.kv_heads  # one KV head per query head
    return (
        f"Grouped-query attention: {model.heads} query heads share {model.kv_heads} KV heads "
        f"({model.heads // model.kv_heads} each). With one KV head per query head it would be "
        f"{mha_per_token:,} B per token and {human_bytes(mha_per_token * cache_len)} now: "
        f"{model.heads / model.kv_heads:g}× as much."
    )


Row = tuple[str, int, str]  # a factor of the formula: its name, its value, a note


def factors_frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame({"factor": name, "value": value, "note": note} for name, value, note in rows)


def formula_frame(model: ModelInfo, cache_len: int) -> pd.DataFrame:
    """The formula's factors, each with its value, and the products for one token and for the current cache: per-head K
    and V, or a cache's two slots (MLA's latent and rotary key, read from its tensors)."""
    if model.sliding_layers:
        return sliding_formula_frame(model, cache_len)
    layers: Row = ("layers", model.layers, "every decoder block keeps its own cache")
    if model.kv_cache_key_width:  # not per-head K and V
        latent = model.latent_cache
        slots = "latent (kv_lora_rank), shared by every head" if latent else "K values"
        rows: list[Row] = [
            ("key slot", model.cache_key_width, slots),
            ("value slot", model.cache_value_width, "rotary key (qk_rope_head_dim), shared" if latent else "V values"),
            layers,
        ]
        product = "(key + value slot) × layers × bytes"
    else:
        gqa = f"not the {model.heads} query heads: GQA" if model.is_gqa else "= query heads"
        rows = [("K and V", 2, "two tensors per layer"), layers, ("KV heads", model.kv_heads, gqa)]
        rows.append(("head dim", model.head_dim, "values per head per position"))
        product = "the product of the five above"
    total = kv_cache_bytes(model, cache_len)
    return factors_frame(
        [
            *rows,
            ("bytes per element", model.bytes_per_element, model.dtype),
            ("= bytes per token", model.kv_bytes_per_token, product),
            ("× cached positions", cache_len, "prompt + generated tokens fed back"),
            ("= KV cache now", total, human_bytes(total)),
        ]
    )


def sliding_formula_frame(model: ModelInfo, cache_len: int) -> pd.DataFrame:
    """The per-layer formula's factors: bytes per layer and position, then the positions each kind of layer holds."""
    total = kv_cache_bytes(model, cache_len)
    rows = [
        ("K and V", 2, "two tensors per layer"),
        ("KV heads", model.kv_heads, f"not the {model.heads} query heads: GQA" if model.is_gqa else "= query heads"),
        ("head dim", model.head_dim, "values per head per position"),
        ("bytes per element", model.bytes_per_element, model.dtype),
        ("= bytes per layer and position", model.kv_bytes_per_token_per_layer, "the product of the four above"),
    ]
    if model.full_layers:
        rows.append(("× full layers × positions", model.full_layers * cache_len, f"{model.full_layers} layers"))
    for window in sorted({w for w in model.windows if w}):
        count = sum(1 for w in model.windows if w == window)
        held = min(cache_len, window - 1)
        rows.append((f"× sliding layers × min(positions, {window} - 1)", count * held, f"{count} layers"))
    rows.append(("= KV cache now", total, human_bytes(total)))
    return factors_frame(rows)


# --- next to the weights -------------------------------------------------------------------------------------------
def weights_frame(trace: Trace) -> pd.DataFrame:
    """The weights and the KV cache now (both counted from real tensors), and the cache at the full context."""
    m = trace.model
    rows = [
        ("weights", m.weight_bytes, MEASURED, "counted from the loaded parameters"),
        ("KV cache now", trace.final_kv_cache_bytes, MEASURED, f"{trace.passes[-1].cache_len_after:,} positions"),
        (f"KV cache at {m.max_context:,} tokens", kv_cache_bytes(m, m.max_context), MODELLED, "batch 1, full context"),
    ]
    return pd.DataFrame(
        {
            "item": item,
            "bytes": n,
            "shown": human_bytes(n),
            "mb": n / MB,
            "percent_of_weights": 100 * n / m.weight_bytes,
            "source": source,
            "note": note,
        }
        for item, n, source, note in rows
    )


def weights_chart(frame: pd.DataFrame) -> alt.LayerChart:
    base = alt.Chart(frame).encode(
        y=alt.Y("item:N", sort=frame["item"].tolist(), title=None, axis=alt.Axis(labelLimit=220)),
        x=alt.X("mb:Q", title="MB"),
    )
    bars = base.mark_bar().encode(
        color=alt.Color(
            "source:N", scale=alt.Scale(domain=SOURCE_DOMAIN, range=SOURCE_RANGE), legend=alt.Legend(orient="top")
        ),
        tooltip=["item", "shown", alt.Tooltip("percent_of_weights:Q", format=".2f"), "source", "note"],
    )
    labels = base.mark_text(align="left", dx=4).encode(text="shown:N")
    # In Streamlit the height includes the legend and axes: 300 px leaves ~150 px for the three bars.
    return alt.layer(bars, labels).properties(height=300)


def weights_ratio_text(trace: Trace) -> str:
    """The cache now against the weights, and the context at which one sequence's cache would hold as many bytes
    (`explorer.core.roofline.kv_reaches_weights_context`, per-layer windows applied)."""
    model = trace.model
    kv, weights = trace.final_kv_cache_bytes, model.weight_bytes
    now = f"The KV cache is {100 * kv / weights:.2f}% of the weights now ({human_bytes(kv)} vs {human_bytes(weights)})"
    tokens = kv_reaches_weights_context(weights, lambda positions: kv_cache_bytes(model, positions))
    if tokens is None:
        return now + ": every layer slides, so the cache stops growing at its windows and never matches them."
    if not model.sliding_layers:
        return now + f": it would match them at {tokens:,} cached tokens (batch × context)."
    return now + f": one sequence's cache would match them at {tokens:,} tokens (sliding layers capped)."


# --- the projection ------------------------------------------------------------------------------------------------
def projection_batches(batch: int) -> list[int]:
    return sorted({*PROJECTION_BATCHES, batch})


def projection_frame(model: ModelInfo, context: int, batch: int) -> pd.DataFrame:
    """KV bytes against context length, one line per batch size (the chosen batch among them), up to `context`."""
    step = max(1, context // PROJECTION_POINTS)
    lengths = sorted({*range(0, context, step), context})
    return pd.DataFrame(
        {
            "context_len": n,
            "batch": b,
            "kv_bytes": kv_cache_bytes(model, n, b),
            "kv_gb": kv_cache_bytes(model, n, b) / GB,
            "chosen": b == batch,
        }
        for b in projection_batches(batch)
        for n in lengths
    )


def projection_text(model: ModelInfo, context: int, batch: int, device_memory_bytes: int | None = None) -> str:
    kv = kv_cache_bytes(model, context, batch)
    text = (
        f"At {context:,} tokens × batch {batch} this model needs {human_bytes(kv)} of KV cache "
        f"(weights: {human_bytes(model.weight_bytes)}; the cache is {kv / model.weight_bytes:.1f}× the weights)"
    )
    if device_memory_bytes:
        share = 100 * (kv + model.weight_bytes) / device_memory_bytes
        text += f"; cache + weights would fill {share:.0f}% of this device's {human_bytes(device_memory_bytes)}"
    return text + "."


def references_frame(model: ModelInfo) -> pd.DataFrame:
    """The horizontal reference for the projection: the weights, counted from the loaded parameters."""
    return pd.DataFrame({"reference": ["weights"], "gb": [model.weight_bytes / GB], "source": [MEASURED]})


def projection_chart(frame: pd.DataFrame, references: pd.DataFrame) -> alt.LayerChart:
    """Straight lines (bytes grow linearly with context and with batch); dashed references for scale."""
    lines = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            x=alt.X("context_len:Q", title="context length (tokens)", scale=alt.Scale(nice=False)),
            y=alt.Y("kv_gb:Q", title="KV cache (GB, modelled)"),
            color=alt.Color(
                "batch:O", title="batch", scale=alt.Scale(scheme="category10"), legend=alt.Legend(orient="top")
            ),
            strokeWidth=alt.when(alt.datum.chosen).then(alt.value(3.5)).otherwise(alt.value(1.5)),
            tooltip=["context_len", "batch", alt.Tooltip("kv_gb:Q", format=".3f", title="GB")],
        )
    )
    rules = (
        alt.Chart(references)
        .mark_rule(strokeDash=[6, 3], color="#666666")
        .encode(y="gb:Q", tooltip=["reference", alt.Tooltip("gb:Q", format=".3f"), "source"])
    )
    names = (
        alt.Chart(references)
        .mark_text(align="left", dx=4, dy=-7, color="#444444")
        .encode(y="gb:Q", x=alt.value(0), text="reference:N")
    )
    return alt.layer(lines, rules, names).properties(height=400)
