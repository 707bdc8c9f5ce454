"""The Run page: the timeline of passes, the step-through of one pass's tokens, and its tensor shapes."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import PHASE_COLOR, display_token
from explorer.core.trace import ModelInfo, Trace
from explorer.core.units import to_ms

TOKENS_PER_ROW = 12
ROLE_DOMAIN = ["read from the KV cache", "computed by this pass", "sampled by this pass"]
ROLE_RANGE = ["#9ecae1", "#d95f02", "#1b9e77"]


def timeline_frame(trace: Trace) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pass": p.index,
            "phase": p.phase,
            "start_ms": to_ms(p.start_s),
            "end_ms": to_ms(p.start_s + p.wall_s),
            "wall_ms": to_ms(p.wall_s),
            "tokens_in": p.tokens_in,
            "cache_len_after": p.cache_len_after,
            "token": display_token(p.token_text),
        }
        for p in trace.passes
    )


def timeline_chart(frame: pd.DataFrame) -> alt.Chart:
    """One bar per pass on the request's clock: a long prefill bar, then a train of short decode bars."""
    return (
        alt.Chart(frame)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("start_ms:Q", title="time since the request started (ms, measured)"),
            x2="end_ms:Q",
            y=alt.Y("phase:N", sort=["prefill", "decode"], title=None),
            color=alt.Color("phase:N", scale=PHASE_COLOR, legend=None),
            tooltip=["pass", "phase", "tokens_in", "cache_len_after", alt.Tooltip("wall_ms:Q", format=".2f"), "token"],
        )
        .properties(height=170)  # Streamlit's height includes the axes
    )


def step_tokens_frame(trace: Trace, pass_index: int) -> pd.DataFrame:
    """Every position the pass touches: cached ones it reads, new ones it computes, and the token it samples."""
    p = trace.passes[pass_index]
    texts = list(trace.prompt_tokens_text) + [q.token_text for q in trace.passes]
    rows = []
    for position in range(p.cache_len_after + 1):
        if position < p.cache_len_before:
            role = ROLE_DOMAIN[0]
        elif position < p.cache_len_after:
            role = ROLE_DOMAIN[1]
        else:
            role = ROLE_DOMAIN[2]
        rows.append(
            {
                "position": position,
                "token": display_token(texts[position]),
                "role": role,
                "row": position // TOKENS_PER_ROW,
                "column": position % TOKENS_PER_ROW,
            }
        )
    return pd.DataFrame(rows)


def step_tokens_chart(frame: pd.DataFrame) -> alt.LayerChart:
    rows = int(frame["row"].max()) + 1
    base = alt.Chart(frame).encode(
        x=alt.X("column:O", axis=None),
        y=alt.Y("row:O", axis=None),
        tooltip=["position", "token", "role"],
    )
    boxes = base.mark_rect(stroke="white", strokeWidth=2, cornerRadius=3).encode(
        color=alt.Color(
            "role:N",
            scale=alt.Scale(domain=ROLE_DOMAIN, range=ROLE_RANGE),
            title=None,
            legend=alt.Legend(orient="top", columns=1),  # one row overflowed a slide
        )
    )
    labels = base.mark_text(limit=80).encode(text="token:N")
    return (boxes + labels).properties(height=max(120, 36 * rows) + 40)  # + the legend above


def kv_shape_rows(m: ModelInfo, T: int, C: int, before: int, gqa: str) -> list[tuple[str, list[int], str]]:
    """What the cache takes in and hands attention: per-head K and V, or (MLA) the latent transformers caches and the
    per-head K and V it expands into on every pass."""
    H, Hkv, d = m.heads, m.kv_heads, m.head_dim
    if not m.latent_cache:
        return [
            ("K, V (new)", [1, Hkv, T, d], f"written to the cache; {gqa}"),
            ("K, V (cache, read)", [1, Hkv, C, d], f"every position so far, {before} of them from before"),
        ]
    return [
        (
            "latent (new, cached)",
            [1, 1, T, m.cache_key_width],
            "kv_lora_rank: K and V compressed, shared by every head",
        ),
        ("rotary key (new, cached)", [1, 1, T, m.cache_value_width], "qk_rope_head_dim: shared by every head"),
        (
            "K (expanded, read)",
            [1, H, C, d],
            f"kv_b_proj on all {C} cached positions, every pass ({before} from before)",
        ),
        ("V (expanded, read)", [1, H, C, m.sv_head_dim], "the same expansion: v_head_dim per head"),
    ]


def shapes_frame(trace: Trace, pass_index: int) -> pd.DataFrame:
    """This pass's real tensor shapes, with the model's numbers (B = 1 request)."""
    m, p = trace.model, trace.passes[pass_index]
    T, C, H, Hkv, d = p.tokens_in, p.cache_len_after, m.heads, m.kv_heads, m.head_dim
    gqa = f"{H} query heads share {Hkv} KV heads ({H // Hkv} each)" if m.is_gqa else "one KV head per query head"
    mask = (
        "lower-triangular (T x T): future positions get probability exactly 0"
        if p.is_prefill
        else ("none needed: the cache holds only the past")
    )
    rows = [
        ("input tokens", [1, T], "all prompt tokens at once" if p.is_prefill else "only the token sampled last"),
        ("Q", [1, H, T, d], "queries for the tokens computed now"),
        *kv_shape_rows(m, T, C, p.cache_len_before, gqa),
        ("scores = Q·Kᵀ", [1, H, T, C], "one row per query, one column per cached key"),
        ("mask", [T, C], mask),
        ("logits kept", [1, m.vocab_size], "last position only: the next token's distribution"),
    ]
    return pd.DataFrame(
        {"tensor": name, "shape": "[" + ", ".join(map(str, shape)) + "]", "note": note} for name, shape, note in rows
    )


def generated_frame(trace: Trace) -> pd.DataFrame:
    """Each generated token with the latency before it and the model's top alternatives."""
    gaps = [trace.ttft_s, *trace.itl_s]
    return pd.DataFrame(
        {
            "pass": p.index,
            "phase": p.phase,
            "token": display_token(p.token_text),
            "latency": "TTFT" if p.is_prefill else "ITL",
            "latency_ms": round(to_ms(gap), 2),
            "top-5 next tokens (probability)": "  ".join(f"{display_token(t.text)} {t.prob:.2f}" for t in p.top_tokens),
        }
        for p, gap in zip(trace.passes, gaps)
    )
