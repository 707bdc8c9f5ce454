"""The By hand page's sections: the vector editors, each row's arithmetic step by step, the two toy rows as a map,
and the same shapes with the model's real numbers from the session's run."""

from __future__ import annotations

import streamlit as st

from explorer.charts import by_hand as charts
from explorer.teach import by_hand
from explorer.ui.page_start import run_here
from explorer.ui.state import EDITOR_VERSION, RunResult
from explorer.ui.widgets import chart, escape_markdown, table


def reset() -> None:
    EDITOR_VERSION.set((EDITOR_VERSION.get() or 0) + 1)


def vector_editor(start: by_hand.RowInputs, title: str, version: int) -> by_hand.RowInputs:
    st.markdown(title)
    column = st.column_config.NumberColumn(
        min_value=-by_hand.VECTOR_LIMIT, max_value=by_hand.VECTOR_LIMIT, step=0.5, format="%g", required=True
    )
    edited = st.data_editor(
        charts.vectors_frame(start.vector_names, start.vectors),
        key=f"by-hand-{start.phase}-{version}",
        hide_index=True,
        disabled=["vector"],
        num_rows="fixed",
        column_config={axis: column for axis in charts.AXES},
    )
    return start.with_vectors(charts.vectors_from_frame(edited))


def inputs() -> tuple[by_hand.RowInputs, by_hand.RowInputs]:
    """The prefill and decode rows as edited (the worked example's until edited), the mask switch, Reset, and what
    changed. The decode row is built from the prefill's keys and values: the cache holds them, the decode only adds
    its own."""
    version = EDITOR_VERSION.get() or 0
    left, right = st.columns(2)
    with left:
        prefill = vector_editor(
            by_hand.EXAMPLE_PREFILL, "**Prefill**: query q1, the prompt's keys k0–k2 and values v0–v2", version
        )
    with right:
        new_token = vector_editor(
            by_hand.EXAMPLE_NEW_TOKEN,
            "**Decode**: the new token's query q3, key k3 and value v3 (k0–k2 and v0–v2 come from the cache: the "
            "prefill's, edited on the left)",
            version,
        )
    mask_on = st.toggle(
        "Causal mask on the prefill row",
        value=True,
        key=f"by-hand-mask-{version}",
        help="Switch it off to see what would leak.",
    )
    st.button("Reset to the example's vectors", on_click=reset, key="by-hand-reset")
    changed = by_hand.changes(prefill, new_token, mask_on)
    if changed:
        # Line breaks survive markdown as two trailing spaces; the escaping keeps the typed numbers literal.
        st.info("  \n".join(escape_markdown(line) for line in ["Changed from the worked example:", *changed]))
    else:
        st.caption("These are the worked example's vectors: the rows below reproduce its printed numbers.")
    return prefill.with_mask(mask_on), by_hand.decode_inputs(prefill, new_token)


def worked_section(row: by_hand.WorkedRow, example_probs: tuple[float, ...], heading: str, text: str) -> None:
    st.subheader(heading)
    st.markdown(text)
    table(
        charts.steps_frame(row),
        "Left to right: the dot product, the division by √d, the mask, the exponential, the probability. 'By hand' "
        f"divides the exponentials written to {by_hand.WRITTEN_EXP_DECIMALS} decimals by their sum, as on paper; "
        "'exact' keeps every digit. The output weighs each value by its exact probability.",
        "computed live with numpy from the vectors above",
    )
    phase = row.inputs.phase
    st.code(
        f"{charts.softmax_text(row)}\n"
        f"{phase} row, by hand: {by_hand.row_text(row.shown_probs)}   (example: {by_hand.row_text(example_probs)})\n"
        f"{phase} row, exact:   {by_hand.row_text(row.probs, 4)}",
        language=None,
    )


def toy_rows(prefill: by_hand.WorkedRow, decode: by_hand.WorkedRow) -> None:
    toy = charts.toy_rows_frame(prefill, decode)
    chart(
        charts.rows_chart(toy),
        toy,
        "by-hand-rows",
        "The two rows as attention maps draw them: each row sums to 1; grey is the masked future (exactly 0).",
        "computed live (by-hand probabilities; the tooltip has the exact ones)",
    )


def run_section(result: RunResult | None) -> None:
    """The toy's quantities beside the model's, and a real prefill row and decode row of the run."""
    if result is None:
        run_here("by-hand", "No run yet: run a prompt to see these shapes with the model's real numbers.")
        return
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
    table(
        charts.shape_links_frame(by_hand.shape_links(trace.model, trace.prompt_len, cache_len, decode_pass)),
        "Every toy quantity beside the model's: more heads, longer vectors, many layers, the same arithmetic.",
        "the model's config and the run's measured cache lengths",
    )
    maps = result.attention
    if maps is None:
        st.info(escape_markdown(result.attention_note))  # a recording file's own words: never markdown
        return
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
    chart(
        charts.rows_chart(real),
        real,
        f"by-hand-real-layer{layer}-head{head}",
        "Query position 1 in the prefill sees two keys, like q1, and every later key is masked; the decode row "
        "spans the whole cache with no mask, like q3's.",
        "measured (captured attention probabilities, float16)",
    )
