"""The Cost page's operator view: any pass's modelled cost operator by operator (by kind, then per layer), and on the
profiled pass each profiler group's modelled floor beside its measured time."""

from __future__ import annotations

import streamlit as st

from explorer.charts import operators as charts
from explorer.charts.cost import median_decode_index
from explorer.core import operators
from explorer.core.pass_profile import MODELLED_KINDS, PassProfile
from explorer.core.roofline import LAYOUT_WORDS
from explorer.core.trace import Trace
from explorer.core.units import human_bytes, human_flops
from explorer.ui.state import PROFILE, RunResult
from explorer.ui.widgets import chart, secondary, table

SOURCE = (
    "modelled: FLOPs and bytes from the model's shapes, the cache length and the experts routed to; times = FLOPs / "
)
SOURCE += "peak, bytes read / read bandwidth, bytes written / copy bandwidth"


def operators_section(trace: Trace) -> None:
    """A pass chosen by the reader, its operators grouped by kind and summed over layers, its per-layer rows on
    request, the operators added up beside the pass's totals, and the data as CSV."""
    st.subheader("Operator by operator (modelled)")
    st.caption(
        "The same roofline model, split by what each layer runs: q, k, v, o, QKᵀ, softmax, SV, the cache update, "
        "the MLP (or the experts routed to, and the router), then the embedding and the LM head. Each operator's "
        "floor is the slower of its maths and its bytes; the floors add up to at least the pass's floor, where one "
        "operator's maths may hide behind another's reads. QKᵀ and SV count the useful (causal) pairs; the cache "
        f"update and attention's reads follow {LAYOUT_WORDS[trace.cache_layout]}."
    )
    index = st.selectbox(
        "Pass",
        [p.index for p in trace.passes],
        index=median_decode_index(trace) or 0,  # the page's decode pass, or the prefill of a one-token run
        format_func=lambda k: (
            f"pass {k} ({trace.passes[k].phase}, {trace.passes[k].tokens_in} tokens in, "
            f"{trace.passes[k].cache_len_before} cached)"
        ),
        key="operators-pass",
        help="0 is the prefill; defaults to the page's decode pass (the median measured time). The table is modelled: "
        "no run needed for any pass.",
    )
    record = trace.passes[index]
    ops = operators.pass_operators(trace.model, trace.device, record)
    total = operators.summed(ops)
    st.markdown(
        f"Pass {index}: {human_flops(total.flops)} and {human_bytes(total.bytes_moved)} moved, *modelled*."
    )  # numbers and fixed words only
    table(
        charts.kinds_frame(ops),
        "Each operator kind summed over the layers. Softmax and norms cost nothing in this model (the scores stay in "
        "the fused attention kernel; elementwise work is small): the profile below shows what they really take.",
        SOURCE,
    )
    table(
        charts.totals_frame(ops, record.cost),
        "The operators added up against the pass's own modelled totals (the time split above): the same figures.",
        SOURCE,
    )
    frame = charts.operators_frame(ops)
    st.download_button(
        "Download data: operators.csv (every operator, every layer)",
        frame.to_csv(index=False),
        file_name=f"operators-pass-{index}.csv",
        mime="text/csv",
        key="download-operators",
        on_click="ignore",
    )
    with secondary("Per layer"):
        layer = st.selectbox(
            "Layer",
            range(trace.model.layers),
            key="operators-layer",
            format_func=lambda i: (
                f"layer {i}" + (f" (sliding window {trace.model.windows[i]})" if trace.model.windows[i] else "")
            ),
        )
        table(charts.layer_frame(ops, layer), f"Layer {layer}'s operators in pass {index}.", SOURCE)


def beside_the_profile(result: RunResult) -> None:
    """Under the profile section: the profiled pass of this run (if one was taken), modelled beside measured."""
    kept = st.session_state.get(PROFILE)  # (run label, PassProfile), as the profile section keeps it
    if kept and kept[0] == result.label:
        st.markdown(f"**Pass {kept[1].pass_index}, operator by operator: modelled floor beside measured time**")
        modelled_beside_measured(result.trace, kept[1])


def modelled_beside_measured(trace: Trace, profiled: PassProfile) -> None:
    """Each profiler group's measured time beside the modelled floor of the operators that run in it."""
    ops = operators.pass_operators(trace.model, trace.device, trace.passes[profiled.pass_index])
    frame = charts.side_by_side_frame(ops, profiled, MODELLED_KINDS)
    chart(
        charts.side_by_side_chart(frame),
        frame,
        "operators-modelled-vs-measured",
        "Per group of the profile, the floor its operators could run at (blue) beside what they took (orange): the "
        "longer the line between them, the further that group is from its floor (log scale: each gridline is 10×). "
        "A group without a blue dot has nothing in the model (other ops).",
        f"modelled: the operators' roofline floors · measured: {profiled.time_kind} per op (torch.profiler)",
    )
    st.markdown(charts.furthest_sentence(frame))  # numbers and fixed group names only
    mapping = "; ".join(f"**{group}** ↔ {', '.join(kinds)}" for group, kinds in MODELLED_KINDS.items())
    st.caption(f"Which operators each profiler group holds: {mapping}.")  # fixed words only
