"""Attention: the prefill map under its causal mask, the decode rows that need none, and every head of a layer."""

import streamlit as st

from explorer import ui
from explorer.ui import attention_view as view

result, layout = ui.chart_first_page(
    "Attention",
    "Prefill scores a T × T matrix and must mask the future; decode scores one row against the cache.",
    "In decode the future does not exist yet.",
)
result = view.captured(result)  # a capture a click cut short runs again here
maps = result.attention
if maps is None:
    st.info(ui.escape_markdown(result.attention_note))  # a recording file's own words: never markdown
    st.stop()
trace = result.trace
layer, head = view.layer_and_head(maps, trace.model, layout)
view.why_no_mask(maps, trace, layout)
view.prefill_section(maps, layer, head, trace.model.kv_heads, layout)
view.decode_section(maps, layer, head)
view.heads_section(maps, trace.model, layer)
