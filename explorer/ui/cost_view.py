"""The Cost page's sections: its takeaway, the utilisation comparison, the per-op profile of one pass, and the device
figures; every section that shows a decode pass defaults to the page's one (`charts.cost.median_decode_index`)."""

from __future__ import annotations

import textwrap

import altair as alt
import streamlit as st

from explorer.charts import cost as charts
from explorer.charts import device as device_charts
from explorer.charts import floor_share as share_charts
from explorer.charts import profile as profile_charts
from explorer.charts import roofline as roofline_charts
from explorer.core.floor_share import REFERENCES_NOTE, pass_share, peaks_sentence
from explorer.core.pass_profile import PassProfile
from explorer.core.trace import Trace
from explorer.core.units import human_bandwidth, human_bytes, human_flops, ms, percent
from explorer.labs import sizes
from explorer.ui.admission import ask_lab
from explorer.ui.chart_first import ChartFirst
from explorer.ui.presenter import presenting
from explorer.ui.recordings import needs_live_run
from explorer.ui.shared import hosting_policy
from explorer.ui.state import PROFILE, RunResult, current_run
from explorer.ui.widgets import chart, metrics, secondary, table


def kept_profile(result: RunResult) -> PassProfile | None:
    """The profile taken of this run (any pass), None before one is taken."""
    kept = PROFILE.get()  # (run label, PassProfile)
    return kept[1] if kept and kept[0] == result.label else None


def lead_line() -> str:
    """The page's first line: each phase's time per token, from the session's run (before the page asks for it). On a
    laptop, where what explains and picks comes before the charts, it also says the clinching line (`ridge_line`), so
    the decode's FLOP per byte against the ridge is in the first screen there too; when presenting, the line is the
    title of the roofline beside the split, which is in the first screen."""
    run = current_run()
    if run is None:
        return "Time per token of each phase, then where a pass's time goes: by the roofline model, and measured."
    per_token = charts.per_token_sentence(run.trace, "recorded" if run.recorded is not None else "measured")
    return per_token if presenting() else f"{per_token} {charts.ridge_line(run.trace)}"


def takeaway_section(result: RunResult, layout: ChartFirst) -> None:
    """What the first line means, overhead's share and where it goes, and the decode's bound as the model's floor:
    above the main chart on a laptop, right under it when presenting (the chart stays in the first screen)."""
    aside = layout.controls()
    for sentence in charts.takeaway(result.trace, kept_profile(result)):
        aside.markdown(sentence)  # numbers and fixed words only (profiler group names are ours)


RIDGE_LINE_CHARS = 24  # the clinching line's title lines: a third of a 1280 px page at presenter sizes


def ridge_beside(
    column: st.delta_generator.DeltaGenerator, trace: Trace, presenting: bool, height_px: int | None
) -> None:
    """The page's clinching line (`charts.cost.ridge_line`) as the title of the roofline beside the time split, in the
    first screen: the decode's FLOP per byte against the ridge, then every pass at its intensity. A title inside the
    chart rather than a line above it: the chart then takes the split's height and both end together, however many
    lines the narrow column wraps it to. When presenting, the heading leads the caption below, as the split's does."""
    frame = roofline_charts.roofline_frame(trace)
    lines = textwrap.wrap(charts.ridge_line(trace), RIDGE_LINE_CHARS, break_on_hyphens=False)  # numbers, fixed words
    built = roofline_charts.roofline_chart(frame, narrow=True).properties(
        title=alt.TitleParams(lines, anchor="start", fontWeight="bold", limit=0)  # 0: never cut
    )
    if height_px is not None:
        built = built.properties(height=height_px)
    title = "Against the ridge"
    caption = (
        "Each pass sits at its modelled intensity: left of the dashed ridge a pass can only be memory-bound, right of "
        "it compute-bound. More prompt tokens per read of the weights move a prefill right."
    )
    source = (
        f"x modelled (FLOPs / bytes moved) · y = modelled FLOPs / measured time · roof from peak compute "
        f"[{trace.device.peak_flops_source}] and bandwidth [{trace.device.bandwidth_source}]"
    )
    with column:
        if not presenting:
            st.subheader(title)
        chart(built, frame, "roofline", f"**{title}.** {caption}" if presenting else caption, source)


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
            key="utilisation-pass",
            help="Defaults to the page's decode pass: the one with the median measured time.",
        )
        shown.append(trace.passes[decode_index])
    utilisation = roofline_charts.utilisation_frame(shown, device)
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
        roofline_charts.utilisation_chart(utilisation),
        utilisation,
        "utilisation",
        "Each pass's achieved compute as a share of the peak, and its achieved bandwidth as a share of the device's "
        "(at most 100 %), measured on this run.",
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
        index=charts.median_decode_index(trace) or 0,  # the page's decode pass, or the prefill of a one-token run
        key="profile-pass",
        format_func=lambda k: f"pass {k} ({trace.passes[k].phase}, {ms(trace.passes[k].wall_s)} in the run)",
        help="0 is the prefill; defaults to the page's decode pass (the median measured time). The run's tokens are "
        "replayed up to this pass (untimed); the pass then runs once to warm up, three times timed without the "
        "profiler and once timed under it.",
    )
    if st.button("Profile this pass", help="Runs the model again: the replay and five runs of this pass."):
        body = {"trace": trace.to_dict(), "pass_index": profile_index}
        size = sizes.profile_size(trace, profile_index, hosting_policy())
        done = ask_lab(f"Profiling pass {profile_index}", "profile", body, size)
        if done is not None:  # refused or failed: one line said why, and the previous profile stays
            PROFILE.set((result.label, PassProfile.from_dict(done)))
    kept = PROFILE.get()  # (run label, PassProfile): shown only for the run and pass it was taken for
    profiled = kept[1] if kept and kept[0] == result.label and kept[1].pass_index == profile_index else None
    if profiled is None:
        st.info("Press **Profile this pass** to see where its time goes, op by op.")
    else:
        profiled_pass(trace, profiled)


def profiled_pass(trace: Trace, profiled: PassProfile) -> None:
    """A profiled pass: its three timings, its time by what ran beside its roofline bar, and every op."""
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
    same_pass_bar = profile_charts.roofline_parts(charts.time_split_frame(trace), profiled.pass_index)
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


def device_section(trace: Trace) -> None:
    """The figures the roofline divides by, each with its source (a secondary section)."""
    with secondary("The device figures"):
        table(
            device_charts.device_frame(trace.device),
            "What the roofline divides by, with where each figure came from.",
            "measured: best of 5 fixed-size microbenchmarks, taken when the 'measured at' row says · spec: datasheet · "
            "nvml: the driver's clocks · achieved: raised to what a pass of this run did",
        )
        st.caption(device_charts.DEVICE_NOTE[trace.device.kind])


def floor_share_section(trace: Trace) -> None:
    """How close each pass came to this device's floor: its share of the measured read bandwidth (decode) or matmul
    peak (prefill), the median decode pass and the prefill said in words, and the published shares of real systems
    marked on the chart; then which peaks the roofline divides by (measured, the datasheet's beside them on a GPU)."""
    st.subheader("How close to the floor: each pass as a share of the device")
    index = charts.median_decode_index(trace)
    for p in [trace.prefill] + ([trace.passes[index]] if index is not None else []):
        said = pass_share(p, trace.device).sentence()
        st.markdown(said[:1].upper() + said[1:])  # numbers and fixed words only
    frame = share_charts.share_frame(trace)
    references = share_charts.references_frame()
    chart(
        share_charts.share_chart(frame, references),
        frame,
        "floor-share",
        "Each pass's achieved rate as a share of what this device measured: a decode pass's bytes read (weights + "
        "KV) per second against the read bandwidth, the prefill's FLOPs per second against the matmul peak. The "
        f"dashed lines are published decode shares at batch 1. {REFERENCES_NOTE}",
        "bytes and FLOPs modelled · times measured · device figures measured (microbenchmarks) · references "
        "reported, sources in the table below",
    )
    table(
        references,
        "The published shares the chart marks, each with what it was measured on and its source.",
        "reported by each source; gpt-fast's share computed from its reported GB/s and the A100 datasheet",
    )
    st.markdown(peaks_sentence(trace.device))  # numbers and fixed words only
