"""At scale: the same lesson for the models and GPUs people run, a what-if roofline from config.json and the cited
spec tables, beside this machine's measured gap to its own floor."""

import streamlit as st

from explorer import ui
from explorer.ui import calibrated_view, split_view
from explorer.ui import scale_view as view

ui.page_title("At scale: your model on your GPU")
st.caption(
    "This machine measures a 135M model truthfully; the questions people bring are about 8B–70B models on A100s and "
    "H100s. Pick a model, GPUs, dtype, batch and context: the roofline says the fastest a decode step can be (every "
    "weight read once, every request's KV cache read once) and how batching buys tokens/s until memory runs out."
)
result = view.what_if_inputs()
view.headline(result)
gap = view.this_machine(ui.current_run())
calibrated_view.calibrated_section(result, ui.current_run())
view.measure_here(result)
view.decode_vs_context(result, gap)
view.tokens_vs_batch(result, gap)
view.memory(result)
view.formulas(result)
split_view.split_phases(result)
