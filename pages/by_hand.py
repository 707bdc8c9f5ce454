"""By hand: seed 1's three-token attention head worked step by step, editable, beside the same shapes in the run."""

import streamlit as st

from explorer import by_hand, ui
from explorer.charts import by_hand as charts

EDITOR_VERSION = "by_hand_editor_version"  # bumped by Reset: new widget keys start from the seed's values


def reset() -> None:
    st.session_state[EDITOR_VERSION] = st.session_state.get(EDITOR_VERSION, 0) + 1


def vector_editor(seed: by_hand.RowInputs, title: str, version: int) -> by_hand.RowInputs:
    st.markdown(title)
    column = st.column_config.NumberColumn(
        min_value=-by_hand.VECTOR_LIMIT, max_value=by_hand.VECTOR_LIMIT, step=0.5, format="%g", required=True
    )
    edited = st.data_editor(
        charts.vectors_frame(seed.vector_names, seed.vectors),
        key=f"by-hand-{seed.phase}-{version}",
        hide_index=True,
        disabled=["vector"],
        num_rows="fixed",
        column_config={axis: column for axis in charts.AXES},
    )
    return seed.with_vectors(charts.vectors_from_frame(edited))


def worked_section(row: by_hand.WorkedRow, seed_probs: tuple[float, ...], heading: str, text: str) -> None:
    st.subheader(heading)
    st.markdown(text)
    ui.table(
        charts.steps_frame(row),
        "Left to right: the dot product, the division by √d, the mask, the exponential, the probability. 'By hand' "
        f"divides the exponentials written to {by_hand.WRITTEN_EXP_DECIMALS} decimals by their sum, as the seed does; "
        "'exact' keeps every digit.",
        "computed live with numpy from the vectors above",
    )
    phase = row.inputs.phase
    st.code(
        f"{charts.softmax_text(row)}\n"
        f"{phase} row, by hand: {by_hand.row_text(row.shown_probs)}   (seed 1: {by_hand.row_text(seed_probs)})\n"
        f"{phase} row, exact:   {by_hand.row_text(row.probs, 4)}",
        language=None,
    )


st.title("By hand: one attention head, three tokens")
st.caption(
    "Seed 1's worked example (d = 2): the same softmax(q·kᵀ/√d) runs in both phases; only which keys exist differs."
)

version = st.session_state.get(EDITOR_VERSION, 0)
left, right = st.columns(2)
with left:
    prefill_inputs = vector_editor(
        by_hand.SEED_PREFILL, "**Prefill**: query q1 and the prompt's keys k0, k1, k2", version
    )
with right:
    decode_inputs = vector_editor(
        by_hand.SEED_DECODE, "**Decode**: the new query q3 and the cached keys k0, k1, k2", version
    )
mask_on = st.toggle(
    "Causal mask on the prefill row",
    value=True,
    key=f"by-hand-mask-{version}",
    help="Switch it off to see what would leak.",
)
st.button("Reset to the seed's vectors", on_click=reset)

changed = by_hand.changes(prefill_inputs, decode_inputs, mask_on)
if changed:
    # Line breaks survive markdown as two trailing spaces; the escaping keeps the typed numbers literal.
    st.info("  \n".join(ui.escape_markdown(line) for line in ["Changed from seed 1's example:", *changed]))
else:
    st.caption("These are seed 1's vectors: the rows below reproduce its worked example.")

prefill_row = by_hand.work_row(prefill_inputs.with_mask(mask_on))
decode_row = by_hand.work_row(decode_inputs)
worked_section(
    prefill_row,
    by_hand.SEED_PREFILL_PROBS,
    "Prefill: q1 may not look at k2",
    "All three prompt tokens are in memory, so q1 is scored against k2 too; k2 is q1's future, so the mask sets "
    "its logit to −∞ before the softmax and it gets exactly 0."
    if mask_on
    else "**Mask off:** q1 now scores k2, a token after it, and gives it weight: prefill would peek at the future.",
)
worked_section(
    decode_row,
    by_hand.SEED_DECODE_PROBS,
    "Decode: q3 against the cache, no mask",
    "The cache holds only the keys of earlier tokens: no future key exists yet, so there is nothing to mask.",
)
toy = charts.toy_rows_frame(prefill_row, decode_row)
ui.chart(
    charts.rows_chart(toy),
    toy,
    "by-hand-rows",
    "The two rows as attention maps draw them: each row sums to 1; grey is the masked future (exactly 0).",
    "computed live (by-hand probabilities; the tooltip has the exact ones)",
)

st.header("The same shapes in your run")
result = ui.current_run()
if result is None:
    st.info("No run yet: press **Run** in the sidebar to see these shapes with the model's real numbers.")
else:
    trace = result.trace
    decodes = [p.index for p in trace.decodes]
    decode_pass = None
    if decodes:
        decode_pass = st.selectbox(
            "Decode pass",
            decodes,
            format_func=lambda k: f"pass {k} ({trace.passes[k].cache_len_after} positions in the cache)",
            key=f"by-hand-decode-{len(decodes)}",
        )
    cache_len = trace.passes[decode_pass].cache_len_after if decode_pass is not None else None
    ui.table(
        charts.shape_links_frame(by_hand.shape_links(trace.model, trace.prompt_len, cache_len, decode_pass)),
        "Every toy quantity beside the model's: more heads, longer vectors, many layers, the same arithmetic.",
        "the model's config and the run's measured cache lengths",
    )
    maps = result.attention
    if maps is None:
        st.info(result.attention_note)
    else:
        layer_col, head_col = st.columns(2)
        layer = layer_col.selectbox(
            "Layer",
            maps.layers,
            index=maps.layers.index(charts.default_layer(maps.layers)),
            key=f"by-hand-layer-{len(maps.layers)}",
        )
        head = head_col.selectbox("Head", list(range(maps.heads)), key=f"by-hand-head-{maps.heads}")
        step = decode_pass - 1 if decode_pass is not None else None  # decode step k is pass k + 1
        real = charts.real_rows_frame(maps, layer, head, step)
        ui.chart(
            charts.rows_chart(real),
            real,
            f"by-hand-real-layer{layer}-head{head}",
            "Query position 1 in the prefill sees two keys, like q1, and every later key is masked; the decode row "
            "spans the whole cache with no mask, like q3's.",
            "measured (captured attention probabilities, float16)",
        )
