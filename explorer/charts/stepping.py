"""The step mode's builders: the request so far, its attention rows appended pass by pass, its cache and pass times."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.charts.attention import ATTENDED, MASKED, WINDOW_POSITIONS
from explorer.charts.common import display_token, position_label
from explorer.core.attention_maps import AttentionMaps
from explorer.core.trace import PassRecord, Trace
from explorer.core.units import human_bytes, short_time


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
    `prefill_chart` draws: one cell per (query, key). Long requests keep their last WINDOW_POSITIONS positions."""
    T = maps.prompt_len
    rows = [(q, maps.prefill[layer][head, q, :T]) for q in range(T)]
    rows += [(T + k, row[head]) for k, row in enumerate(maps.decode[layer])]  # decode pass k+1 feeds position T + k
    last = rows[-1][0]
    start = max(0, last + 1 - WINDOW_POSITIONS)
    records = []
    for query, probs in rows:
        if query < start:
            continue
        for key in range(start, T if query < T else len(probs)):
            masked = key > query
            records.append(
                {
                    "query_pos": query,
                    "key_pos": key,
                    "query": position_label(query, maps.tokens_text[query]),
                    "key": position_label(key, maps.tokens_text[key]),
                    "prob": float(np.float32(probs[key])),
                    "masked": masked,
                    "cell": MASKED if masked else ATTENDED,
                    "phase": "prefill" if query < T else "decode",
                }
            )
    return pd.DataFrame(records)
