"""Page sections too long for a thin page file: the Latency page's SLO checks, the Cost page's utilisation
comparison and its per-op profile, and the Step page's view of the request so far."""

from __future__ import annotations

import streamlit as st

from explorer.charts import attention as attention_charts
from explorer.charts import cost as charts
from explorer.charts import kv as kv_charts
from explorer.charts import latency as latency_charts
from explorer.charts import profile as profile_charts
from explorer.charts import stepping as step_charts
from explorer.core.profiler import profile_pass
from explorer.core.trace import Trace
from explorer.core.units import human_bandwidth, human_bytes, human_flops, ms, percent
from explorer.hosting.settings import LabSize
from explorer.labs.stepping import SteppedRequest
from explorer.ui.recordings import needs_live_run
from explorer.ui.runner import run_lab
from explorer.ui.shared import hosting_policy
from explorer.ui.state import RunResult
from explorer.ui.widgets import chart, current_slos_s, metrics, secondary, slo_inputs, table

PROFILE = "explorer_profile"  # (run label, PassProfile) of the last "Profile this pass"
PROFILE_BUDGET_S = 120.0


def slo_section(trace: Trace) -> tuple[float, float]:
    """The SLO inputs, a badge each for TTFT and p99 ITL, and the table; returns the SLOs (seconds)."""
    ttft_slo_s, itl_slo_s = slo_inputs()
    slos = latency_charts.repeat_slo_frame(trace, ttft_slo_s, itl_slo_s)
    # A badge, not st.error: a missed SLO is a finding about this run, not an error of the app.
    for column, check in zip(st.columns(2), slos[slos["metric"].isin(["TTFT", "ITL p99"])].itertuples(index=False)):
        verdict = latency_charts.slo_verdict(check.metric, check.value_ms, check.slo_ms)  # numbers: safe as markdown
        if check.passes is None:
            column.badge(verdict, icon=":material/remove:", color="gray")
        elif check.passes:
            column.badge(verdict, icon=":material/check_circle:", color="green")
        else:
            column.badge(verdict, icon=":material/cancel:", color="red")
    table(
        slos,
        "TTFT and the ITL percentiles, each against its SLO (pass = strictly under): the same figures as the metrics "
        "above, each taken per repeat, then the median with its min and max.",
        "values measured · SLOs set above",
    )
    return ttft_slo_s, itl_slo_s


def utilisation_section(trace: Trace) -> None:
    """The prefill against one decode: compute and bandwidth each as a share of the device's."""
    device = trace.device
    st.subheader("Utilisation: the prefill against one decode")
    median_index = charts.median_decode_index(trace)
    shown = [trace.prefill]
    if median_index is None:
        st.info("This run made one token, so there is no decode pass: raise Max new tokens and run again.")
    else:
        decode_indices = [p.index for p in trace.decodes]
        decode_index = st.selectbox(
            "Decode pass",
            decode_indices,
            index=decode_indices.index(median_index),
            format_func=lambda k: f"pass {k} ({ms(trace.passes[k].wall_s)})",
            help="Defaults to the decode pass with the median measured time.",
        )
        shown.append(trace.passes[decode_index])
    utilisation = charts.utilisation_frame(shown, device)
    for column, row in zip(st.columns(len(shown)), utilisation.itertuples(index=False)):
        with column:
            st.markdown(f"**{row.label}**")  # built from the phase and the index: no user text
            peak = f"{human_flops(device.peak_flops)}/s, {device.peak_flops_source}"
            moved = f"modelled {human_bytes(row.bytes_moved)} moved (weights + KV read and write)"
            device_bandwidth = (
                f"{human_bandwidth(row.device_bandwidth_bytes_per_s)} for this pass's reads (at the read bandwidth) "
                "and writes (at the copy bandwidth)"
            )
            metrics(
                [
                    ("Compute utilisation", percent(row.compute_utilisation), f"achieved FLOP/s / peak ({peak})"),
                    ("Achieved compute", human_flops(row.achieved_flops_per_s) + "/s", f"/ measured {ms(row.wall_s)}"),
                    ("Achieved bandwidth", human_bandwidth(row.achieved_bandwidth_bytes_per_s), f"{moved} / wall"),
                    ("Of the device bandwidth", percent(row.bandwidth_utilisation), f"device: {device_bandwidth}"),
                    ("Tokens/s in this pass", f"{row.tokens_per_s:,.0f}", "tokens computed / measured time"),
                ],
                columns=1,
            )
    chart(
        charts.utilisation_chart(utilisation),
        utilisation,
        "utilisation",
        "Each pass's achieved compute as a share of the peak, and its achieved bandwidth as a share of the device's "
        "(at most 100 %): the essay's widget, measured on this run.",
        "achieved = modelled FLOPs or bytes / measured time · device figures as in the table below",
    )


def profile_section(result: RunResult) -> None:
    """One pass of the run replayed under the profiler, on request; kept for the run and pass it was taken for."""
    trace = result.trace
    st.subheader("The overhead explained: one pass under the profiler")
    if needs_live_run(result, "Profiling a pass"):
        return
    st.caption(
        "The roofline model cannot say what the grey overhead is; the profiler can. It replays one pass of this run "
        "and adds up each op's own time by the module it ran in. What no op accounts for is Python and framework "
        "dispatch (on a GPU: the GPU idling between kernel launches)."
    )
    profile_index = st.selectbox(
        "Pass to profile",
        [p.index for p in trace.passes],
        index=min(3, trace.new_tokens - 1),
        format_func=lambda k: f"pass {k} ({trace.passes[k].phase}, {ms(trace.passes[k].wall_s)} in the run)",
        help="0 is the prefill. The run's tokens are replayed up to this pass (untimed); the pass then runs once to "
        "warm up, three times timed without the profiler and once timed under it.",
    )
    if st.button("Profile this pass", help="Runs the model again: the replay and five runs of this pass."):
        run_lab(
            PROFILE,
            f"Profiling pass {profile_index}",
            lambda lm, _device, _progress: (result.label, profile_pass(lm, trace, profile_index)),
            # A replay up to the pass and five runs of it: seconds; a hosted server's lab cap still applies.
            LabSize(trace.prompt_len, None, profile_index + 1, (), hosting_policy().lab_budget_s(PROFILE_BUDGET_S)),
        )
    kept = st.session_state.get(PROFILE)  # (run label, PassProfile): shown only for the run and pass it was taken for
    profiled = kept[1] if kept and kept[0] == result.label and kept[1].pass_index == profile_index else None
    if profiled is None:
        st.info("Press **Profile this pass** to see where its time goes, op by op.")
    else:
        metrics(
            [
                ("Profiled wall", ms(profiled.wall_s_profiled), "measured: the pass under the profiler"),
                (
                    "Without the profiler",
                    ms(profiled.wall_s_unprofiled),
                    "measured: same pass, no profiler, median of 3",
                ),
                ("In the run", ms(profiled.wall_s_run), "measured: the pass as the run timed it (median over repeats)"),
            ]
        )
        parts = profile_charts.profile_frame(profiled)
        same_pass_bar = profile_charts.roofline_parts(charts.time_split_frame(trace), profile_index)
        chart(
            profile_charts.profile_chart(parts, same_pass_bar),
            parts,
            "profile",
            "Bottom: the profiled pass by what ran; the dark grey remainder is time in no op. The gap between the "
            "black and red ticks is what profiling itself added. Top: the same pass's bar from the chart above.",
            f"groups measured ({profiled.time_kind} per op, torch.profiler) · remainder = profiled wall − every op's "
            "self time · top bar modelled, its overhead = measured − modelled",
        )
        with secondary("Every op in the profiled pass"):
            table(
                profile_charts.ops_frame(profiled),
                "Each op the profiler saw, with the group of the module it ran in, its calls and its own time.",
                f"measured: {profiled.time_kind}, summed over the op's calls in the pass",
            )


def step_view(current: SteppedRequest) -> None:
    """The stepped request so far: its figures and tokens, the last pass's top five, its attention rows, its KV cache
    (growing, and per layer), the gaps between its tokens and each pass's time against the roofline."""
    trace = current.to_trace()
    metrics(step_charts.running_figures(trace, current.done))
    st.code(step_charts.tokens_line(trace), language=None, wrap_lines=True)
    last = trace.passes[-1]
    table(step_charts.top5_frame(last), f"Pass {last.index} sampled its token from these five.", "measured")
    step_attention(current)
    step_kv_cache(trace)
    step_itl(trace)
    timing = charts.time_split_frame(trace)
    chart(
        charts.time_split_chart(timing),
        timing,
        "step-times",
        "Each pass's measured time (black tick) against the roofline model's weight, KV and compute times, as on the "
        "Cost page.",
        "wall measured · weight, KV and compute modelled · overhead = measured − modelled",
    )


def step_attention(current: SteppedRequest) -> None:
    maps = current.attention()
    layer_col, head_col = st.columns(2)
    layer = layer_col.selectbox("Layer", maps.layers, index=len(maps.layers) // 2, key="step-layer")
    head = head_col.selectbox("Head", list(range(maps.heads)), key="step-head")
    frame = step_charts.attention_rows_frame(maps, layer, head)
    chart(
        attention_charts.prefill_chart(frame),
        frame,
        "step-attention",
        "The prefill's T × T map with its causal mask (grey), then one row per decode pass appended below it: one "
        "key longer each time, no mask needed.",
        "measured (captured attention probabilities, untimed eager shadow)",
    )


def step_kv_cache(trace: Trace) -> None:
    """The cache as it grew pass by pass, and what the last pass left in each layer (the prefill: what it wrote)."""
    growth = kv_charts.growth_frame(trace)
    chart(
        kv_charts.growth_chart(growth),
        growth,
        "step-kv",
        f"Each decode pass adds exactly one position: {trace.model.kv_bytes_per_token:,} B across all layers.",
        "measured: bytes of the real cache tensors",
    )
    last = trace.passes[-1]
    layers = kv_charts.layers_frame(trace, last.index)
    written = (
        f"What the prefill wrote: {last.cache_len_after} positions in every layer"
        if last.is_prefill
        else f"After pass {last.index}: the prefill's positions plus one per decode, {last.cache_len_after} in all"
    )
    chart(
        kv_charts.layers_chart(layers),
        layers,
        "step-kv-layers",
        f"{written}, each layer the same size (the dashed line is the formula's per-layer bytes).",
        "bars measured: bytes of each layer's K and V tensors · line modelled",
    )


def step_itl(trace: Trace) -> None:
    """The gaps between the tokens so far, against the session's ITL SLO (set on the Latency page)."""
    if not trace.itl_s:
        st.info("One token so far, so no inter-token latency yet: press **Next token** for the first decode pass.")
        return
    itl_slo_s = current_slos_s()[1]
    itl = latency_charts.itl_frame(trace, itl_slo_s)
    chart(
        latency_charts.itl_chart(itl, itl_slo_s),
        itl,
        "step-itl",
        "Each decode pass's gap since the previous token, against the ITL SLO of the Latency page: the pause between "
        "clicks is not counted (the request's clock stops between passes).",
        "measured: the time between consecutive sampled tokens",
    )
