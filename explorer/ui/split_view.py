"""At scale's "Split the phases" section: prefill and decode on separate GPUs (xPyD) against the same GPUs colocated,
under the session's SLO pair, from the page's scenario (model, GPU, dtype, GPUs per instance, prompt). The figures are
`explorer.scale.split_whatif`'s, the same record `python -m explorer whatif --split --json` writes."""

from __future__ import annotations

import streamlit as st

from explorer.charts import split as charts
from explorer.core.errors import BadInput
from explorer.scale.interconnect import INTERCONNECTS
from explorer.scale.split import ATTAINMENT_TARGET
from explorer.scale.split_explain import split_formula_lines
from explorer.scale.split_links import LINK_NAMES, split_link
from explorer.scale.split_measured import MeasuredSteps, run_fits
from explorer.scale.split_whatif import SplitInputs, SplitResult, split_what_if
from explorer.scale.whatif import WhatIf
from explorer.ui.slo_state import slo_inputs
from explorer.ui.state import current_run
from explorer.ui.widgets import chart, metrics, secondary

DEFAULT_OUTPUT_TOKENS = 256
DEFAULT_CHUNK_TOKENS = 512


@st.cache_data(max_entries=16, show_spinner="Simulating the layouts…")
def _split(inputs: SplitInputs) -> SplitResult:
    """One what-if per set of inputs (a few hundred ms of simulation): a rerun that changes nothing here reuses it."""
    return split_what_if(inputs)


@st.cache_data(max_entries=16, show_spinner="Simulating the layouts from your run…")
def _split_measured(inputs: SplitInputs, run_key: tuple[object, ...], _steps: MeasuredSteps) -> SplitResult:
    """The same from a run's measured times, keyed by the inputs and everything the steps take from the run
    (`MeasuredSteps.key`; the steps object itself is not hashed): a rerun does not simulate again."""
    return split_what_if(inputs, _steps)


def split_inputs(result: WhatIf) -> SplitInputs:
    """The split's own inputs, beside the page's scenario; the SLOs are the session's one pair."""
    s = result.scenario
    st.caption(
        f"Each instance is the scenario above: {s.arch.display_name} on {s.gpus} × {s.gpu.name} ({s.dtype}), "
        f"prompts of {s.prompt_tokens:,} tokens. The SLOs are the session's pair (the ITL SLO read as TPOT, a "
        "request's mean time per output token)."
    )
    ttft_slo_s, tpot_slo_s = slo_inputs()
    output, x, y, colocated = st.columns(4)
    output = output.number_input("Output tokens per request", 2, 32_768, DEFAULT_OUTPUT_TOKENS, key="split-output")
    x = x.number_input("Prefill instances (x)", 1, 16, 1, key="split-x")
    y = y.number_input("Decode instances (y)", 1, 16, 1, key="split-y")
    colocated = colocated.number_input(
        "Colocated instances (0: x + y)", 0, 32, 0, key="split-colocated", help="0: the same GPUs as x + y"
    )
    left, middle, right, far = st.columns(4)
    offered = [name for name in LINK_NAMES if name != "NVLink" or has_nvlink(s.gpu.name)]
    link = left.selectbox(
        "Link between them",
        offered,
        key=f"split-link-{len(offered)}",
        help="Each with its cited line rate, one way (the formulas below name the source).",
    )
    streamed = middle.toggle("Stream the KV layer by layer", True, key="split-streamed")
    chunk = right.number_input(
        "Chunked prefill: chunk (tokens, 0: none)", 0, 65_536, DEFAULT_CHUNK_TOKENS, 64, key="split-chunk"
    )
    rate = far.number_input(
        "Rate for the distributions (requests/s, 0: the disaggregated goodput)",
        0.0,
        1e6,
        0.0,
        key="split-rate",
        help="Where the TTFT and TPOT distributions below are drawn; 0: at the disaggregated layout's goodput.",
    )
    return SplitInputs(
        s, int(output), ttft_slo_s, tpot_slo_s, int(x), int(y), int(colocated) or None, link, streamed, int(chunk),
        float(rate) or None
    )  # fmt: skip


def measured_steps(inputs: SplitInputs) -> MeasuredSteps | None:
    """This session's run, where it ran the scenario's model and the user asks for it: its measured step times."""
    run = current_run()
    s = inputs.scenario
    if run is None or not run_fits(run.trace, s.arch.name):
        st.caption(
            f"Step times: the roofline's (modelled). A run of {s.arch.display_name} on the Run page lets this what-if "
            "start from its measured prefill and decode times instead."
        )
        return None
    if not st.toggle(f"Start from this run's measured times ({run.label})", True, key="split-measured"):
        return None
    steps = MeasuredSteps(run.trace, s.prompt_tokens, inputs.output_tokens, s)
    st.caption(
        f"Taken from your run (measured on {run.trace.device.name}): prefill "
        f"{steps.prefill_s_per_token * 1e3:.3g} ms per prompt token, decode step {steps.decode_step_s * 1e3:.3g} ms "
        "(the median). How a step grows with batch and context: the roofline (modelled). Memory and the link: the "
        f"{s.gpu.name}'s spec and the chosen link's."
        + (
            f" The tensor-parallel all-reduces of {s.gpus} GPUs an instance: the roofline's (modelled), added to each "
            "measured pass."
            if s.gpus > 1
            else ""
        )
    )
    return steps


def has_nvlink(gpu: str) -> bool:
    row = INTERCONNECTS.get(gpu)
    return row is not None and row.nvlink_bytes_per_s is not None


def command_line(inputs: SplitInputs) -> str:
    """The same what-if from the command line: `whatif --split --json` writes the very figures shown here."""
    s = inputs.scenario
    return (
        f"python -m explorer whatif --split --model {s.arch.name} --gpu '{s.gpu.name}' --gpus {s.gpus} --dtype "
        f"{s.dtype} --weights-dtype {s.weights_storage} --kv-dtype {s.kv_storage} --prompt-tokens {s.prompt_tokens} "
        f"--output-tokens {inputs.output_tokens} --ttft-slo-ms {inputs.ttft_slo_s * 1e3:g} --tpot-slo-ms "
        f"{inputs.tpot_slo_s * 1e3:g} --layout {inputs.prefill_instances}P{inputs.decode_instances}D --link "
        f"'{inputs.link}' --transfer {'streamed' if inputs.streamed else 'whole'} --chunk {inputs.chunk_tokens}"
        + (f" --experts-dtype {s.experts_storage}" if s.arch.is_moe else "")
        + (f" --colocated {inputs.colocated_instances}" if inputs.colocated_instances else "")
        + (f" --rate {inputs.rate_per_s:g}" if inputs.rate_per_s else "")
    )


def split_phases(result: WhatIf) -> None:
    """The section: inputs, the computed sentence, each layout's goodput, the curves, the distributions, the
    formulas."""
    st.subheader("Split the phases: prefill and decode on separate GPUs")
    try:
        inputs = split_inputs(result)
        split_link(inputs.link, inputs.scenario.gpu)  # a GPU without NVLink: one line, before any simulation
        steps = measured_steps(inputs)
        split = _split(inputs) if steps is None else _split_measured(inputs, steps.key, steps)
    except BadInput as exc:  # e.g. a model that does not fit one instance: said once, the rest of the page stands
        st.info(str(exc))
        return
    source = split.steps.source
    st.markdown(f"**{split.sentence}**")
    metrics(
        [
            (
                f"{c.layout.label} goodput",
                f"{c.goodput_per_gpu:.3g} /s per GPU",
                f"{source}: requests/s per GPU at which {ATTAINMENT_TARGET:.0%} of requests meet both SLOs "
                f"(DistServe's goodput), {c.gpus} GPUs; no-SLO capacity {c.capacity_per_gpu:.3g} /s per GPU; held "
                f"back by {c.limit}",
            )
            for c in split.curves
        ]
    )
    frame = charts.goodput_frame(split)
    crossing = (
        f"The better layout changes at {split.crossover_per_s:.3g} requests/s."
        if split.crossover_per_s is not None
        else "The better layout does not change over these rates."
    )
    chart(
        charts.goodput_chart(frame),
        frame,
        "split-goodput",
        f"Requests/s per GPU meeting both SLOs as arrivals rise, and the share meeting them against the "
        f"{ATTAINMENT_TARGET:.0%} target. {crossing}",
        f"{source} · Poisson arrivals, deterministic simulation (random seed {inputs.seed}, {split.requests} requests "
        "a rate) · link spec",
    )
    if split.fewer_requests:
        st.caption(f"Simulated: {split.fewer_requests}.")
    distributions(split)
    with secondary("The split's formulas, with these numbers"):
        st.code("\n".join(split_formula_lines(split)), language=None, wrap_lines=True)
        st.caption(f"The same from the command line (add `--json FILE` for every figure): `{command_line(inputs)}`")


def distributions(split: SplitResult) -> None:
    inputs = split.inputs
    frame = charts.distribution_frame(split)
    chart(
        charts.distribution_chart(frame, inputs.ttft_slo_s * 1e3, inputs.tpot_slo_s * 1e3, split.steps.source),
        frame,
        "split-distributions",
        f"Every request's TTFT and TPOT at {split.rate_per_s:.3g} requests/s ({split.rate_why}), against the "
        "session's SLOs (red).",
        f"{split.steps.source} · simulated requests",
    )
