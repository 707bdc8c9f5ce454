"""The At-scale page's sections: the what-if's inputs (shipped configs only on a hosted server), its headline figures,
this machine's last run as a measured gap to its own floor, the three charts, and the formulas."""

from __future__ import annotations

from dataclasses import asdict, replace

import altair as alt
import pandas as pd
import streamlit as st

from explorer.charts import scale as charts
from explorer.charts.cost import decode_median_text
from explorer.core.errors import BadInput
from explorer.core.gpu_specs import GPU_SPECS
from explorer.core.request import Request
from explorer.core.trace import Trace
from explorer.core.units import GB, human_bytes, ms, short_time
from explorer.hosting.settings import is_hosted
from explorer.scale.calibrated import CALIBRATED
from explorer.scale.config import DEFAULT_MODEL, Architecture, load_architecture, shipped, shipped_key
from explorer.scale.explain import ceiling_if_read_whole_text, ceiling_why_text, formula_lines, knee_text
from explorer.scale.local import LocalGap, local_gap
from explorer.scale.measured_here import HERE_NEW_TOKENS, HERE_PROMPT, compare_here, shape_name
from explorer.scale.params import DTYPE_BYTES, STORAGE_BITS
from explorer.scale.whatif import Scenario, WhatIf, find_gpu, what_if
from explorer.ui.admission import DeviceAsk, ask_owner
from explorer.ui.page_start import run_here, under_load_warning
from explorer.ui.state import SCALE_HERE, RunResult, last_inputs
from explorer.ui.widgets import chart, escape_markdown, metrics, secondary, show_error, table

DEFAULT_GPU = "H100 SXM"
TP_CHOICES = (1, 2, 4, 8)  # group sizes servers use; those that do not divide the model's heads are left out
DEFAULT_CONTEXT = 1024
DEFAULT_PROMPT_TOKENS = 512
MAX_BATCH_INPUT = 100_000


def _model_input() -> str:
    """The model to ask about: a shipped config, or (not hosted) a folder or hub id typed in."""
    rows = shipped()
    keys = list(rows)
    key = st.selectbox(
        "Model",
        keys,
        index=keys.index(DEFAULT_MODEL),
        format_func=lambda k: rows[k].display_name,
        key="scale-model",
        help="Configs shipped with the explorer (each one's public config.json): no weights, no network.",
    )
    if is_hosted():
        st.caption("This shared server offers only the shipped configs.")
        return key
    typed = st.text_input(
        "…or a folder holding a config.json, or a hub id",
        placeholder="e.g. ~/models/my-llama or Qwen/Qwen3-8B (a hub id needs network)",
        key="scale-model-path",
    )
    return typed.strip() or key


def _gpu_inputs(heads: int) -> tuple[str, int, str]:
    names = [spec.name for spec in GPU_SPECS]
    gpu = st.selectbox("GPU", names, index=names.index(DEFAULT_GPU), help="Rows of the cited spec table.")
    counts = [n for n in TP_CHOICES if heads % n == 0]
    gpus = st.selectbox(
        "GPUs (tensor parallel)",
        counts,
        key=f"scale-gpus-{counts}",
        help=f"Tensor parallelism splits the {heads} query heads evenly, so only these group sizes.",
    )
    spec = find_gpu(gpu)
    dtypes = [d for d in DTYPE_BYTES if spec.peak_flops(d) is not None]
    dtype = st.selectbox("dtype", dtypes, index=dtypes.index("bfloat16" if "bfloat16" in dtypes else "float16"))
    return gpu, int(gpus), dtype


def _storage_inputs(dtype: str, arch: Architecture) -> tuple[str, str, str | None]:
    """The quantization what-if: how the weights, the KV cache and (a mixture of experts) the experts are stored
    (compute stays in `dtype`); the experts default to how the model ships them (gpt-oss: MXFP4)."""
    kinds = list(STORAGE_BITS)
    left, right = st.columns(2)
    weights = left.selectbox("Weights stored as", kinds, index=kinds.index(dtype), key=f"scale-weights-{dtype}")
    kv = right.selectbox("KV cache stored as", kinds, index=kinds.index(dtype), key=f"scale-kv-{dtype}")
    if not arch.is_moe:
        return weights, kv, None
    shipped_as = arch.experts_shipped_as or weights
    experts = st.selectbox(
        "Experts stored as",
        kinds,
        index=kinds.index(shipped_as),
        key=f"scale-experts-{arch.name}-{shipped_as}",
        help="The experts' weights (their biases stay as the weights). Defaults to how the model ships them"
        + (f": {arch.experts_shipped_as}, as its config.json says." if arch.experts_shipped_as else "."),
    )
    return weights, kv, experts


def what_if_inputs() -> WhatIf:
    """The scenario from the page's widgets, and its what-if; a refusal is one line and the page stops there."""
    left, middle, right = st.columns(3)
    try:
        with left:
            arch = load_architecture(_model_input(), hosted=is_hosted())
        with middle:
            gpu, gpus, dtype = _gpu_inputs(arch.heads)
            weights_dtype, kv_dtype, experts_dtype = _storage_inputs(dtype, arch)
        with right:
            top = arch.max_context
            batch = st.number_input("Batch B (requests decoded together)", 1, MAX_BATCH_INPUT, 1)
            context = st.number_input(
                "Context T (tokens each request holds)", 1, top, min(DEFAULT_CONTEXT, top), key=f"scale-context-{top}"
            )
            prompt = st.number_input(
                "Prompt tokens (for the prefill)", 1, top, min(DEFAULT_PROMPT_TOKENS, top), key=f"scale-prompt-{top}"
            )
        scenario = Scenario(
            arch,
            find_gpu(gpu),
            dtype,
            gpus,
            int(batch),
            int(context),
            int(prompt),
            weights_dtype,
            kv_dtype,
            experts_dtype,
        )
        return what_if(scenario)
    except BadInput as exc:
        show_error(str(exc))
        st.stop()
        raise  # st.stop() ends the script; this line only tells type checkers so


def params_help(result: WhatIf) -> str:
    key = shipped_key(result.scenario.arch.name)
    row = shipped()[key] if key else None
    published = f"; published: {row.published_as}" if row is not None and row.published_rel_tol else ""
    note = row.note(result.params, row.published_params) if row else ""
    return f"modelled, exact from config.json: {result.params:,}{published}" + (f" ({note})" if note else "")


def active_help(result: WhatIf) -> str:
    a = result.scenario.arch
    note = result.published_active_note()
    return (
        f"modelled: {result.active_params:,}: every parameter outside the experts, and {a.experts_per_token} of "
        f"{a.n_experts} experts in each of {a.moe_layers} layers" + (f"; {note}" if note else "")
    )


def kv_help(result: WhatIf) -> str:
    a, s = result.scenario.arch, result.scenario
    if not a.sliding_layers:
        return "modelled: 2 x layers x kv_heads x head_dim x bytes"
    return (
        f"modelled: one request's cache at context {s.context:,} / {s.context:,}: {a.sliding_layers} of {a.layers} "
        f"layers slide and keep at most their window - 1 positions, as transformers' cache does (windows "
        f"{', '.join(f'{w:,}' for w in sorted(set(a.windows) - {0}))}); only the others grow with the context"
    )


CONVENTIONS = (
    "Counted as the live pages count a run: a sliding layer holds window - 1 positions (transformers' cache); the "
    "input embedding table is gathered row by row (the back-of-envelope 'weights / bandwidth' reads it whole: the "
    "formulas below give both); attention costs its useful causal pairs; the KV cache is read "
    "once a step, as a serving engine's paged cache (vLLM), where the explorer's own engine (transformers' "
    "DynamicCache) re-reads and re-writes it."
)


def stored_as(s: Scenario) -> str:
    return s.weights_storage + (f", the experts as {s.experts_storage}" if s.arch.is_moe else "")


def headline(result: WhatIf) -> None:
    s = result.scenario
    d = result.decode
    ridge = f"{result.ridge_batch:,}" if result.ridge_batch is not None else "none"
    figures = [
        ("Parameters", f"{result.params / 1e9:.3g} B", params_help(result)),
        ("Weights", human_bytes(result.weight_bytes), f"modelled: params stored as {stored_as(s)}"),
        ("KV per token", f"{result.kv_bytes_per_token:,} B", kv_help(result)),
        ("Max batch", f"{result.max_batch:,}", f"modelled: weights + KV at context {s.context:,} in GPU memory"),
    ]
    if s.arch.is_moe:
        figures.insert(2, ("Active per token", f"{result.active_params / 1e9:.3g} B", active_help(result)))
    metrics(figures)
    floors = st.columns([1, 1.4, 1, 1, 1])  # the ceiling's column holds its read-whole line too
    floors[0].metric("Decode step floor", ms(d.floor_s), help=f"modelled: {d.bound}-bound at batch {s.batch}")
    ceiling_metric(floors[1], result)
    floors[2].metric("Per stream", f"{result.decode_tokens_per_s_ceiling_per_stream:,.0f}", help="modelled: 1 / floor")
    floors[3].metric("Ridge batch", ridge, help="modelled: the smallest B whose decode step is compute-bound")
    floors[4].metric(
        "Prefill floor",
        short_time(result.prefill.floor_s),
        help=f"modelled: {s.prompt_tokens:,} tokens, TTFT floor",
    )
    if why := ceiling_why_text(result):
        st.caption(f"Tokens/s ceiling: {why}")  # numbers and fixed words only
    link = f"; {s.link.name} {s.link.bytes_per_s / GB:,.1f} GB/s both ways between them" if s.link else ""
    st.caption(
        f"Spec, per GPU: {s.gpu.name}, {s.peak_flops / 1e12:,.1f} TFLOP/s dense {s.dtype}, "
        f"{s.gpu.bandwidth_bytes_per_s / GB:,.0f} GB/s, {s.gpu.memory_text} ({s.gpu.source}){link}. Model: "
        f"{escape_markdown(s.arch.display_name)}, config from {escape_markdown(s.arch.source)}. {CONVENTIONS}"
    )
    if not result.fits:
        need = result.shard.weight_bytes + s.batch * result.shard.kv_bytes_at(s, s.context)
        st.warning(
            f"Does not fit: the weights and {s.batch:,} requests' KV at context {s.context:,} need "
            f"{human_bytes(need)} per GPU, more than its {s.gpu.memory_text}. Add GPUs, or lower the batch "
            "or the context; the floors below assume it fit."
        )


def ceiling_metric(column: st.delta_generator.DeltaGenerator, result: WhatIf) -> None:
    """The tokens/s ceiling, with under it what it would be if the untied input table were read whole (the familiar
    'weights / bandwidth' figure): a lookup reads one row per token, so the ceiling here is higher, and saying both in
    the first screen answers "why not 209?" where the question arises. A caption, not the metric's delta: a delta is
    cut to one line ("207 if the 1.05 GB in…") in a fifth of the page."""
    whole = ceiling_if_read_whole_text(result)
    column.metric(
        "Tokens/s ceiling",
        f"{result.decode_tokens_per_s_ceiling:,.0f}",
        help="modelled: all streams, B / floor"
        + ("; the input table gathered one row per token, as a lookup reads it" if whole else ""),
    )
    if whole:
        column.caption(f"({whole})")


def this_machine(run: RunResult | None) -> LocalGap | None:
    """This machine's last run as a measured factor over its own memory floor, or why there is none."""
    st.subheader("Beside it: this machine's last run")
    if run is None:
        run_here(
            "at-scale",
            "No run on this machine yet: run a prompt to measure how far its decode passes land from their own floor. "
            "Until then the charts show the model's floors only.",
        )
        return None
    gap = local_gap(run.trace)
    if gap is None:
        st.info("The current run has no decode pass (it made one token): run with more new tokens to compare.")
        return None
    under_load_warning(run.trace.device)  # this section's figures are this machine's: said once, here
    measured = "recorded" if run.recorded is not None else "measured"
    st.markdown(f"**{gap.sentence.capitalize()}.**")
    st.caption(
        f"A decode pass took {decode_median_text(run.trace, measured)}; modelled: its "
        f"memory floor (weights and KV traffic over this device's bandwidth) is {ms(gap.median_memory_floor_s)} — "
        f"{escape_markdown(gap.model)}, {gap.dtype}, on {escape_markdown(gap.device)}. The dashed lines below apply "
        "the same factor to the GPU: an **assumption**, not a measurement (a GPU's kernels and overheads differ)."
    )
    return gap


def decode_vs_context(result: WhatIf, gap: LocalGap | None) -> None:
    s = result.scenario
    factor = gap.factor if gap else None
    frame = charts.decode_context_frame(result, factor)
    crossover = result.kv_crossover_context
    if crossover is None:
        where = "never reaches them: every layer slides, so the cache stops growing at the window"
    elif crossover <= s.arch.max_context:
        where = f"reaches them at T = {crossover:,} (KV moved ≥ weights read)"
    else:
        where = f"would reach them only at T = {crossover:,}, beyond the model's {s.arch.max_context:,}"
    caption = (
        f"A decode step at batch {s.batch:,}: the weights are read once whatever the context; the KV cache grows with "
        f"it and {where}."
    )
    scaled_chart(charts.decode_context_chart(frame, result, factor), frame, "scale-decode-vs-context", caption, gap)


def scaled_chart(built: alt.LayerChart, frame: pd.DataFrame, name: str, caption: str, gap: LocalGap | None) -> None:
    """A chart of the GPU's modelled floor, with this machine's gap (when there is a run) drawn apart, dashed and thin:
    an assumption, said in its source line."""
    source = "modelled from config.json and spec figures"
    chart(built, frame, name, caption, source + (" · dashed: assumption (this machine's gap)" if gap else ""))


def tokens_vs_batch(result: WhatIf, gap: LocalGap | None) -> None:
    s = result.scenario
    factor = gap.factor if gap else None
    frame = charts.batch_frame(result, factor)
    knee = knee_text(result)
    experts = ""
    if s.arch.is_moe:
        a = s.arch
        first, last = frame.iloc[0], frame[frame["fits"]].iloc[-1] if frame["fits"].any() else frame.iloc[-1]
        lead = [row.tokens_per_s / row.tokens_per_s_every_expert for row in (first, last)]
        experts = (
            f" At B = 1 a layer reads {a.experts_per_token} of its {a.n_experts} experts, and each request added picks "
            f"more of them (expected distinct experts n (1 - (1 - k/n)^B) under uniform routing, an assumption), so "
            f"the weight read itself grows with B: {lead[0]:,.1f}× the tokens/s of reading every expert (the grey "
            f"dotted line) at B = 1, {lead[1]:,.1f}× at B = {int(last.batch):,}."
        )
    caption = (
        f"One weight read serves every request of a step, so tokens/s grows with B until memory runs out at "
        f"B = {result.max_batch:,}; {knee}.{experts}"
    )
    scaled_chart(charts.batch_chart(frame, result, factor), frame, "scale-tokens-vs-batch", caption, gap)


def memory(result: WhatIf) -> None:
    frame = charts.memory_frame(result)
    chart(
        charts.memory_chart(frame, result),
        frame,
        "scale-memory",
        f"One GPU's memory: the weights, then every request's KV cache at context {result.scenario.context:,}.",
        "modelled bytes · GPU memory spec",
    )


def formulas(result: WhatIf) -> None:
    s = result.scenario
    with secondary("The formulas, with these numbers"):
        st.code("\n".join(formula_lines(result)), language=None, wrap_lines=True)
        if s.arch.name in shipped():
            st.caption(
                f"The same from the command line: `python -m explorer whatif --model {s.arch.name} --gpu "
                f"'{s.gpu.name}' --gpus {s.gpus} --dtype {s.dtype} --weights-dtype {s.weights_storage} --kv-dtype "
                f"{s.kv_storage}{f' --experts-dtype {s.experts_storage}' if s.arch.is_moe else ''} --batch {s.batch} "
                f"--context {s.context} --prompt-tokens {s.prompt_tokens} --explain`"
            )


def measure_here(result: WhatIf) -> None:
    """ "Measure this here": the what-if's config built as a shape model (random weights) on the sidebar's device and
    dtype and run with a short request, through the one way onto the device like every run, then the what-if for
    that very request beside what was measured. A shape that cannot fit this device is refused in one line."""
    st.subheader("Measure this here")
    name = shape_name(result)
    if name is None:
        st.caption("Only a shipped config can be measured here: a folder or a hub id has no shape to build.")
        return
    inputs = replace(last_inputs(), model=name, capture_attention=False, repeats=1, use_chat_template=False)
    st.caption(
        f"Builds `{name}` on this machine with random weights (no download: timings, bytes and FLOPs are real, tokens "
        f"are not meaningful) on the sidebar's device ({inputs.device}) in {inputs.dtype}, and runs "
        f"{HERE_NEW_TOKENS} new tokens; it refuses in one line a shape whose weights do not fit this device's memory."
    )
    if st.button(f"Measure {result.scenario.arch.display_name} here", key="scale-measure-here"):
        request = Request(HERE_PROMPT, max_new_tokens=HERE_NEW_TOKENS, use_chat_template=False)
        done = ask_owner(DeviceAsk("run", "At scale's measurement", inputs, request), "measure-here", {})
        if done is not None:  # refused (a shape that does not fit here) or failed: one line said why
            SCALE_HERE.set(Trace.from_dict(done))
    trace = SCALE_HERE.get()
    if trace is not None and trace.model.name == name:
        _measured_beside(result, trace)


def _measured_beside(result: WhatIf, trace: Trace) -> None:
    here = compare_here(result, trace)
    s = here.what_if.scenario
    frame = pd.DataFrame([asdict(row) for row in here.rows]).rename(
        columns={
            "what_if": f"what-if: {s.gpu.name}, {s.dtype} (modelled)",
            "measured_here": f"here: {trace.device.name} (measured)",
            "floor_here": "here: its floor (modelled)",
            "calibrated": f"what-if x here's measured / floor ({CALIBRATED}: an assumption)",
        }
    )
    st.markdown(f"**{here.sentence}.**")
    table(frame, f"{trace.model.display_name}: {trace.model.shape_note}", "measured here · modelled · spec")
