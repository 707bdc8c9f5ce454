"""By hand: a three-token attention head worked step by step, editable, beside the same shapes in the run."""

import streamlit as st

from explorer import ui
from explorer.teach import by_hand
from explorer.ui import by_hand_view as view

ui.page_title("By hand: one attention head, three tokens")
st.caption(
    "A worked example (d = 2): the same softmax(q·kᵀ/√d)·V runs in both phases; only which keys exist differs. The "
    "decode step reuses the prefill's k0–k2 and v0–v2 from the cache and appends its own k3 and v3."
)
prefill_inputs, decode_inputs = view.inputs()
prefill_row = by_hand.work_row(prefill_inputs)
decode_row = by_hand.work_row(decode_inputs)
view.worked_section(
    prefill_row,
    by_hand.EXAMPLE_PREFILL_PROBS,
    "Prefill: q1 may not look at k2",
    "All three prompt tokens are in memory, so q1 is scored against k2 too; k2 is q1's future, so the mask sets "
    "its logit to −∞ before the softmax and it gets exactly 0."
    if any(prefill_inputs.masked)  # the mask switch is on
    else "**Mask off:** q1 now scores k2, a token after it, and gives it weight: prefill would peek at the future.",
)
view.worked_section(
    decode_row,
    by_hand.EXAMPLE_DECODE_PROBS,
    "Decode: q3 against the cache and its own key, no mask",
    "The cache holds the prefill's own k0, k1, k2 and v0, v1, v2, unchanged: the decode computes none of them again. "
    "It computes only the new token's q3, k3 and v3, appends k3 and v3 to the cache, and then q3 attends over all four "
    "keys, its own included. No future key exists yet, so there is nothing to mask.",
)
view.toy_rows(prefill_row, decode_row)

st.header("The same shapes in your run")
view.run_section(ui.current_run())
