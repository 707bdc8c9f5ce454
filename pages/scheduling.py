"""Serving lab 2: a workload served by transformers' continuous batching engine, step by step, against the baselines."""

import pandas as pd
import streamlit as st

from explorer import ui
from explorer.charts import schedule as charts
from explorer.errors import BadInput
from explorer.hosting import LabSize
from explorer.schedule import ScheduleRun, run_schedule
from explorer.schedule_workload import SCHEDULERS, EngineSettings, Workload, parse_int_list, validate
from explorer.units import human_bytes

RUN_KEY = "explorer_schedule_run"  # the last ScheduleRun of this session (not a widget key)
DEFAULT_PREFIX = (
    "You are a careful assistant for a small public library. Answer in plain words, in two or three sentences, and "
    "say when you are not sure. Never invent book titles, authors or dates."
)

st.title("Scheduling: continuous batching, step by step")
st.caption(
    "A server runs one forward pass per step over every request it has admitted: some need their prompt computed "
    "(prefill), the others one new token each (decode). transformers' continuous batching engine decides who joins "
    "each step, splits long prompts to fit a token budget, keeps the KV cache in fixed-size blocks, and reuses the "
    "blocks of a shared prefix. This page runs it on the real model and records every step."
)

defaults, engine_defaults = Workload(), EngineSettings()
with st.form("schedule-form"):
    left, middle, right = st.columns(3)
    requests = left.number_input("Requests", min_value=1, max_value=32, value=defaults.requests, step=1)
    prompt_tokens = left.text_input(
        "Prompt tokens (cycled over the requests)",
        value=",".join(map(str, defaults.prompt_tokens)),
        help="Each request's own text, from a fixed corpus; a shared prefix is added in front.",
    )
    new_tokens = left.text_input("New tokens (cycled)", value=",".join(map(str, defaults.new_tokens)))
    stagger_ms = middle.number_input(
        "Arrivals every (ms)",
        min_value=0.0,
        max_value=10_000.0,
        value=defaults.stagger_ms,
        step=50.0,
        help="0 sends every request at once.",
    )
    use_prefix = middle.toggle("Shared system prompt", value=False)
    prefix = middle.text_area("System prompt", value=DEFAULT_PREFIX, height=100, max_chars=4000)
    compare = middle.toggle(
        "Compare 3 ways", value=True, help="Also serve it with static batching and one request at a time."
    )
    scheduler = right.selectbox("Scheduler", list(SCHEDULERS), index=0, help="fifo: decodes first; prefill-first")
    token_budget = right.number_input(
        "Token budget per step", min_value=4, max_value=8192, value=engine_defaults.token_budget, step=16
    )
    block_size = right.number_input(
        "KV block size (tokens)", min_value=4, max_value=256, value=engine_defaults.block_size
    )
    num_blocks = right.number_input("KV blocks", min_value=1, max_value=4096, value=engine_defaults.num_blocks)
    prefix_sharing = right.toggle("Prefix sharing", value=engine_defaults.prefix_sharing)
    submitted = st.form_submit_button("Run", type="primary")

if submitted:
    try:
        workload = Workload(
            requests=int(requests),
            prompt_tokens=parse_int_list(prompt_tokens, "Prompt tokens"),
            new_tokens=parse_int_list(new_tokens, "New tokens"),
            stagger_ms=float(stagger_ms),
            prefix=prefix.strip() if use_prefix else "",
        )
        settings = EngineSettings(scheduler, int(token_budget), int(block_size), int(num_blocks), prefix_sharing)
        validate(workload, settings)  # before the device is taken: bad input is refused in a blink
        ui.run_lab(
            RUN_KEY,
            "Serving the workload",
            lambda lm, device, progress: run_schedule(
                lm, device, workload, settings, compare=compare, on_progress=progress
            ),
            LabSize(
                prompt_tokens=max(workload.prompt_tokens),
                new_tokens=max(workload.new_tokens),
                batch_sizes=(workload.requests,),
                budget_s=ui.hosting_policy().lab_budget_s(600.0),
            ),
        )
    except BadInput as exc:
        ui.show_error(str(exc))

run: ScheduleRun | None = st.session_state.get(RUN_KEY)
if run is None:
    st.info("No scheduling run yet: set a workload above and press **Run** (the defaults take about a minute).")
    st.stop()

summary = run.summary()
same = {True: "yes", False: "NO", None: "n/a"}[summary["all_tokens_match_solo"]]
ui.metrics(
    [
        ("Steps", str(summary["steps"]), "engine steps: one forward pass each"),
        ("Mixed steps", str(summary["mixed_steps"]), "prefill and decode tokens in one forward pass"),
        ("Chunked steps", str(summary["steps_with_partial_prefill"]), "steps carrying part of a split prompt"),
        ("Prefill tokens", str(summary["prefill_tokens_computed"]), "prompt tokens the engine computed"),
        ("Tokens/s", f"{summary['tokens_per_s']:.1f}", "measured: all tokens / first arrival to last token"),
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

st.subheader("Engine steps")
steps = charts.steps_frame(run)
ui.chart(
    charts.steps_chart(steps),
    steps,
    "schedule-steps",
    "Each column is one forward pass: its tokens stacked by request (white seams), prefill orange, decode green. "
    "'mixed' steps carry both; 'chunk' marks a prompt split by the token budget. Below: each step's time.",
    "measured: tokens from the engine's scheduled batch, time around its forward and sampling",
)
ui.table(
    charts.step_table_frame(run),
    "Every step: p = prompt tokens computed for a request, d = its one decode token.",
    "measured",
)

st.subheader("Requests over time")
ids = [r.id for r in run.requests]
timeline = charts.timeline_frame(run)
ui.chart(
    charts.timeline_chart(timeline, ids),
    timeline,
    "schedule-timeline",
    "Queued from arrival until a step first computes its tokens, prefilling until its first token, then decoding "
    "(ticks: each token). TTFT = queued + prefilling.",
    "measured on the run's clock",
)
ttft_slo_s, itl_slo_s = ui.current_slos_s()
ui.table(
    charts.latency_frame(run, ttft_slo_s, itl_slo_s),
    f"Per request: TTFT split into queue and prefill, ITL p50/p99, E2E, against the Latency page's SLOs (TTFT "
    f"{ttft_slo_s * 1e3:.0f} ms, ITL {itl_slo_s * 1e3:.0f} ms; pass = strictly under).",
    "measured · SLOs from the Latency page",
)

st.subheader("The block table")
blocks = charts.blocks_frame(run)
ui.chart(
    charts.blocks_chart(blocks, ids, run.engine_num_blocks),
    blocks,
    "schedule-blocks",
    f"Which KV blocks ({run.settings.block_size} tokens, {human_bytes(run.block_bytes)} each) each request holds "
    "after each step is scheduled; black: a block held by several requests (a shared prefix).",
    "measured: the engine's block tables",
)
memory = charts.memory_frame(run)
peak = memory.groupby("layout")["mib"].max()
ui.chart(
    charts.memory_chart(memory),
    memory,
    "schedule-memory",
    f"Peak {peak[charts.LAYOUT_DOMAIN[0]]:.1f} MiB paged against {peak[charts.LAYOUT_DOMAIN[1]]:.1f} MiB if each "
    "admitted request reserved its prompt + max new tokens contiguously: paging allocates a block only when a "
    "token needs it and frees it when the request ends.",
    "modelled from the measured block tables and the KV bytes per token",
)

if run.baselines:
    st.subheader("Continuous batching, static batching, one at a time")
    modes = charts.modes_frame(run.modes)
    ui.table(
        modes,
        "The same workload three ways, one after another: static batching waits for the whole batch, then "
        "prefills and decodes it until the longest request ends; one at a time serves each request alone.",
        "measured",
    )
    ui.chart(
        charts.throughput_chart(modes),
        modes,
        "schedule-throughput",
        "Total generated tokens over the time from the first arrival to the last token.",
        "measured",
    )
    per_request = charts.mode_requests_frame(run.modes)
    ui.chart(
        charts.mode_requests_chart(per_request, "ttft_ms", "TTFT (ms, measured)"),
        per_request,
        "schedule-modes-ttft",
        "Time to first token of each request under each mode.",
        "measured",
    )
    for mode in run.baselines:
        for check in (c for c in mode.checks if not c.matches):
            st.text(f"{mode.mode}: {check.explanation}")

if run.prefix_off is not None:
    st.subheader("Prefix sharing on against off")
    prefix_rows = charts.prefix_frame(run)
    saved = run.prefix_off.prefill_tokens_computed - run.prefill_tokens_computed
    same = bool(prefix_rows["same_tokens"].all())
    ui.chart(
        charts.prefix_chart(prefix_rows, "prefill_tokens", "prompt tokens computed"),
        prefix_rows,
        "schedule-prefix-tokens",
        f"{saved} prompt tokens not computed with sharing on; identical tokens with and without: "
        f"{'yes' if same else 'NO'}. Reuse is in whole blocks, of blocks complete before the request is scheduled.",
        "measured: two runs of the same workload",
    )
    ui.chart(
        charts.prefix_chart(prefix_rows, "ttft_ms", "TTFT (ms, measured)"),
        prefix_rows,
        "schedule-prefix-ttft",
        "TTFT of each request with prefix sharing on and off.",
        "measured",
    )

st.subheader("Prompts")
ui.table(
    pd.DataFrame(
        {"request": r.id, "prompt_tokens": r.prompt_len, "new_tokens": len(r.token_ids), "prompt_text": r.prompt_text}
        for r in run.requests
    ),
    "Check one alone: `python -m explorer run --no-chat-template --max-new-tokens N --prompt TEXT` gives the same ids.",
    "as sent to the engine",
)
st.download_button(
    "Download the run (JSON)", run.to_json(), file_name="schedule.json", mime="application/json", on_click="ignore"
)
