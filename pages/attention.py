"""Attention: the prefill map under its causal mask, the decode rows that need none, and every head of a layer."""

import streamlit as st

from explorer import ui
from explorer.charts import attention as charts
from explorer.ui import attention_view as view

result = ui.page_with_run(
    "Attention",
    "Prefill scores a T × T matrix and must mask the future; decode scores one row against the cache, "
    "where the future does not exist yet.",
)
maps = result.attention
if maps is None:
    st.info(result.attention_note)
    st.stop()
trace = result.trace
layer, head = view.layer_and_head(maps, trace.model)
st.markdown(charts.NO_MASK_IN_DECODE)
view.replay_note(maps, trace)
view.prefill_section(maps, layer, head, trace.model.kv_heads)
view.decode_section(maps, layer, head)
view.heads_section(maps, trace.model, layer)
