"""The Scheduling page's sections: the workload form (served on the device when submitted) and the views of the
session's stored `ScheduleRun`, each a chart or table built by `explorer.charts.schedule`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import streamlit as st

from explorer.charts import schedule as charts
from explorer.core.errors import BadInput
from explorer.core.units import human_bytes
from explorer.labs import sizes
from explorer.labs.schedule.paging import paging_sentence
from explorer.labs.schedule.records import ScheduleRun
from explorer.labs.schedule.sharing import explain_sharing
from explorer.labs.schedule.workload import (
    MAX_REQUESTS,
    SCHEDULERS,
    EngineSettings,
    Workload,
    check_prompt_chars,
    parse_float_list,
    parse_int_list,
    validate,
)
from explorer.ui.admission import ask_lab
from explorer.ui.shared import hosting_policy
from explorer.ui.slo_state import current_slos_s
from explorer.ui.state import SCHEDULE_RUN
from explorer.ui.widgets import chart, metrics, show_error, table

DEFAULT_PREFIX = (
    "You are a careful assistant for a small public library. Answer in plain words, in two or three sentences, and "
    "say when you are not sure. Never invent book titles, authors or dates."
)


# --- the workload ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadForm:
    """The workload form's values as submitted: numbers, and lists still as the text typed."""

    requests: int
    prompt_tokens: str  # comma-separated, cycled over the requests
    new_tokens: str  # comma-separated, cycled
    stagger_ms: float
    arrivals: str  # comma-separated ms, one per request, or empty for the stagger
    prompts: str  # one prompt per line, or empty for the corpus
    prefix: str  # the shared system prompt, or empty

    def workload(self) -> Workload:
        """The form's text as a Workload; what cannot be parsed is one line (validation comes after)."""
        return Workload(
            requests=self.requests,
            prompt_tokens=parse_int_list(self.prompt_tokens, "Prompt tokens"),
            new_tokens=parse_int_list(self.new_tokens, "New tokens"),
            stagger_ms=self.stagger_ms,
            arrivals_ms=parse_float_list(self.arrivals, "Arrival times") if self.arrivals.strip() else (),
            prompts=tuple(line.strip() for line in self.prompts.splitlines() if line.strip()),
            prefix=self.prefix,
        )


def serve(workload: Workload, settings: EngineSettings, compare: bool) -> None:
    """Refuse bad input in a blink, then serve the workload on the device owner in turn (kept under SCHEDULE_RUN)."""
    validate(workload, settings)
    policy = hosting_policy()
    check_prompt_chars(workload, policy.max_prompt_chars)
    body = {"workload": asdict(workload), "settings": asdict(settings), "compare": compare}
    done = ask_lab("Serving the workload", "schedule", body, sizes.schedule_size(workload, policy))
    if done is not None:  # refused or failed: one line said why, and the previous run stays
        SCHEDULE_RUN.set(ScheduleRun.from_dict(done))


def workload_form(shown: ScheduleRun | None = None) -> None:
    """The workload, the engine's settings and the comparisons (the shown run's, where one is shown), folded away so
    the page leads with its result; submitting serves it."""
    defaults, engine = (shown.workload, shown.settings) if shown is not None else (Workload(), EngineSettings())
    compare_default = bool(shown.baselines) if shown is not None else True
    label = "Workload and engine settings" + (": the shown run's (change them and Run)" if shown is not None else "")
    with st.expander(label, expanded=shown is None), st.form("schedule-form"):
        left, middle, right = st.columns(3)
        requests = left.number_input(
            "Requests", min_value=1, max_value=MAX_REQUESTS, value=min(MAX_REQUESTS, defaults.requests), step=1
        )
        prompt_tokens = left.text_input(
            "Prompt tokens (cycled over the requests)",
            value=",".join(map(str, defaults.prompt_tokens)),
            help="Each request's own text, from a fixed corpus; a shared prefix is added in front.",
        )
        new_tokens = left.text_input("New tokens (cycled)", value=",".join(map(str, defaults.new_tokens)))
        prompts = left.text_area(
            "Prompt texts (optional, one per line)",
            value="\n".join(defaults.prompts),
            height=100,
            help="One line per request, sent as typed (no chat template); replaces the prompt-token targets.",
        )
        stagger_ms = middle.number_input(
            "Arrivals every (ms)", 0.0, 10_000.0, defaults.stagger_ms, 50.0, help="0 sends every request at once."
        )
        arrivals = middle.text_input(
            "Arrival times (ms, optional)",
            value=", ".join(f"{a:g}" for a in defaults.arrivals_ms),
            help="One per request, comma-separated, earliest first (e.g. 0, 0, 250, 400): replaces the stagger.",
        )
        use_prefix = middle.toggle("Shared system prompt", value=bool(defaults.prefix))
        prefix = middle.text_area("System prompt", value=defaults.prefix or DEFAULT_PREFIX, height=100)
        compare = middle.toggle(
            "Compare 3 ways", compare_default, help="Also serve it with static batching and one at a time."
        )
        schedulers = list(SCHEDULERS)
        scheduler = right.selectbox(
            "Scheduler",
            schedulers,
            index=schedulers.index(engine.scheduler) if engine.scheduler in schedulers else 0,
            help="fifo: decodes first; prefill-first",
        )
        budget = right.number_input("Token budget per step", 4, 8192, min(8192, max(4, engine.token_budget)), 16)
        block_size = right.number_input("KV block size (tokens)", 4, 256, min(256, max(4, engine.block_size)))
        num_blocks = right.number_input("KV blocks", 1, 4096, min(4096, max(1, engine.num_blocks)))
        prefix_sharing = right.toggle("Prefix sharing", value=engine.prefix_sharing)
        if not st.form_submit_button("Run", type="primary"):
            return
    try:
        shared = prefix.strip() if use_prefix else ""
        form = WorkloadForm(int(requests), prompt_tokens, new_tokens, float(stagger_ms), arrivals, prompts, shared)
        workload = form.workload()
        settings = EngineSettings(scheduler, int(budget), int(block_size), int(num_blocks), prefix_sharing)
        serve(workload, settings, compare)
    except BadInput as exc:
        show_error(str(exc))


# --- the views of a stored run ---------------------------------------------------------------------------------------
def summary_section(run: ScheduleRun) -> None:
    same = {True: "yes", False: "NO", None: "n/a"}[run.served.all_tokens_match]
    metrics(
        [
            ("Steps", str(len(run.steps)), "engine steps: one forward pass each"),
            ("Mixed steps", str(run.mixed_steps), "prefill and decode tokens in one forward pass"),
            ("Chunked steps", str(run.steps_with_partial_prefill), "steps carrying part of a split prompt"),
            ("Prefill tokens", str(run.prefill_tokens_computed), "prompt tokens the engine computed"),
            ("Tokens/s", f"{run.served.tokens_per_s:.1f}", "measured: all tokens / first arrival to last token"),
            ("Same as solo", same, "every request's greedy tokens equal the explorer's solo run of its prompt"),
        ]
    )
    st.text(  # text, not markdown: the model name is whatever the user typed
        f"{run.model} · {run.dtype} on {run.device} · transformers {run.transformers_version} · scheduler "
        f"{run.settings.scheduler}, budget {run.settings.token_budget} tokens/step, {run.engine_num_blocks} blocks x "
        f"{run.settings.block_size} tokens · measured on a machine other sessions may share"
    )
    mismatches = [c for c in run.checks if not c.matches]
    if mismatches:
        st.warning(f"{len(mismatches)} of {len(run.checks)} requests differ from their solo greedy run (why, below).")
        for check in mismatches:
            st.text(check.explanation)  # token texts come from the model: never markdown


def steps_section(run: ScheduleRun) -> None:
    st.subheader("Engine steps")
    steps = charts.steps_frame(run)
    chart(
        charts.steps_chart(steps),
        steps,
        "schedule-steps",
        "Each column is one forward pass: its tokens stacked by request (white seams), prefill orange, decode green. "
        "'mixed' steps carry both; 'chunk' marks a prompt split by the token budget. Below: each step's time.",
        "measured: tokens from the engine's scheduled batch, time around its forward and sampling",
    )
    with st.expander("Every step as a table"):
        table(
            charts.step_table_frame(run),
            "Every step: p = prompt tokens computed for a request, d = its one decode token.",
            "measured",
        )


def other_views(run: ScheduleRun) -> None:
    """Everything after the main chart, one tab each, so the page is one screen of result and not a long scroll."""
    views = [("Requests over time", requests_section), ("KV blocks", blocks_section)]
    if run.baselines:
        views.append(("Three ways", modes_section))
    if run.prefix_off is not None:
        views.append(("Prefix sharing", prefix_section))
    views.append(("Prompts", prompts_section))
    for tab, (_, draw) in zip(st.tabs([name for name, _ in views]), views):
        with tab:
            draw(run)


def requests_section(run: ScheduleRun) -> None:
    st.subheader("Requests over time")
    timeline = charts.timeline_frame(run)
    chart(
        charts.timeline_chart(timeline, [r.id for r in run.requests]),
        timeline,
        "schedule-timeline",
        "Queued from arrival until a step first computes its tokens, prefilling until its first token, then decoding "
        "(ticks: each token). TTFT = queued + prefilling.",
        "measured on the run's clock",
    )
    ttft_slo_s, itl_slo_s = current_slos_s()
    table(
        charts.latency_frame(run, ttft_slo_s, itl_slo_s),
        f"Per request: TTFT split into queue and prefill, ITL p50/p99, E2E, against the Latency page's SLOs (TTFT "
        f"{ttft_slo_s * 1e3:.0f} ms, ITL {itl_slo_s * 1e3:.0f} ms; pass = strictly under).",
        "measured · SLOs from the Latency page",
    )
    goodput_section(run, ttft_slo_s, itl_slo_s)


def goodput_section(run: ScheduleRun, ttft_slo_s: float, tpot_slo_s: float) -> None:
    """Goodput under the session's SLO pair: each request met or missed TTFT and TPOT, and the count, per mode."""
    for mode in run.modes:
        st.markdown(f"**{mode.mode}**: {mode.goodput(ttft_slo_s, tpot_slo_s).sentence()} (measured).")
    table(
        charts.goodput_frame(run.modes, ttft_slo_s, tpot_slo_s),
        "Each request against the session's SLO pair: TTFT, and TPOT = (last token - first token) / (tokens - 1), "
        "checked against the ITL SLO; met = strictly under.",
        "measured · SLOs from the Latency page",
    )


def blocks_section(run: ScheduleRun) -> None:
    st.subheader("The block table")
    blocks = charts.blocks_frame(run)
    chart(
        charts.blocks_chart(blocks, [r.id for r in run.requests], run.engine_num_blocks),
        blocks,
        "schedule-blocks",
        f"Which KV blocks ({run.settings.block_size} tokens, {human_bytes(run.block_bytes)} each) each request "
        "holds after each step is scheduled; black: a block held by several requests (a shared prefix).",
        "measured: the engine's block tables",
    )
    memory = charts.memory_frame(run)
    chart(
        charts.memory_chart(memory),
        memory,
        "schedule-memory",
        paging_sentence(run),
        "modelled from the measured block tables and the KV bytes per token",
    )


def modes_section(run: ScheduleRun) -> None:
    """Continuous batching against static batching and one at a time: totals, then each request's TTFT and ITL."""
    if not run.baselines:
        return
    st.subheader("Continuous batching, static batching, one at a time")
    modes = charts.modes_frame(run.modes)
    table(
        modes,
        "The same workload three ways, one after another: static batching waits for the whole batch, then "
        "prefills and decodes it until the longest request ends; one at a time serves each request alone.",
        "measured",
    )
    chart(
        charts.throughput_chart(modes),
        modes,
        "schedule-throughput",
        "Total generated tokens over the time from the first arrival to the last token.",
        "measured",
    )
    per_request = charts.mode_requests_frame(run.modes)
    table(per_request, "Each request under each mode: TTFT, ITL p50 and p99, E2E.", "measured")
    for metric, title, meaning in (
        ("ttft_ms", "TTFT (ms, measured)", "Time to first token of each request under each mode."),
        ("itl_p50_ms", "ITL p50 (ms, measured)", "Each request's median gap between its tokens under each mode."),
    ):
        name = f"schedule-modes-{metric.split('_')[0]}"
        chart(charts.mode_requests_chart(per_request, metric, title), per_request, name, meaning, "measured")
    for mode in run.baselines:
        for check in (c for c in mode.checks if not c.matches):
            st.text(f"{mode.mode}: {check.explanation}")


def prefix_section(run: ScheduleRun) -> None:
    if run.prefix_off is None:
        return
    st.subheader("Prefix sharing on against off")
    rows = charts.prefix_frame(run)
    saved = run.prefix_off.prefill_tokens_computed - run.prefill_tokens_computed
    same = "yes" if bool(rows["same_tokens"].all()) else "NO"
    chart(
        charts.prefix_chart(rows, "prefill_tokens", "prompt tokens computed"),
        rows,
        "schedule-prefix-tokens",
        f"{saved} prompt tokens not computed with sharing on; identical tokens with and without: {same}. Why: "
        f"{explain_sharing(run).sentence}",
        "measured: two runs of the same workload",
    )
    chart(
        charts.prefix_chart(rows, "ttft_ms", "TTFT (ms, measured)"),
        rows,
        "schedule-prefix-ttft",
        "TTFT of each request with prefix sharing on and off.",
        "measured",
    )


def prompts_section(run: ScheduleRun) -> None:
    st.subheader("Prompts")
    table(
        charts.prompts_frame(run),
        "Check one alone: `python -m explorer run --no-chat-template --max-new-tokens N --prompt TEXT` gives the same "
        "ids.",
        "as sent to the engine",
    )
    st.download_button(
        "Download the run (JSON)", run.to_json(), file_name="schedule.json", mime="application/json", on_click="ignore"
    )
