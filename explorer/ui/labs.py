"""The No-cache and Batching pages' inputs: each lab's settings with what it will cost, modelled from this session's
last run before anything runs (no model is loaded for it), the run on the device, and the batch's token check."""

from __future__ import annotations

import math

import streamlit as st

from explorer.charts.device import figures_used_sentence
from explorer.core.errors import BadInput
from explorer.core.request import MAX_NEW_TOKENS_LIMIT
from explorer.core.trace import DeviceProfile, ModelInfo
from explorer.core.units import human_bytes
from explorer.labs import batch_settings, nocache_result, sizes
from explorer.labs.batch_result import BatchResult
from explorer.labs.batch_settings import BatchConfig, parse_batch_sizes
from explorer.labs.nocache_result import DEFAULT_NEW_TOKENS, EDGE_STEPS, MIN_NEW_TOKENS, NoCacheResult
from explorer.ui.admission import ask_lab
from explorer.ui.page_start import under_load_warning
from explorer.ui.shared import hosting_policy
from explorer.ui.slo_state import current_slos_s, slo_source
from explorer.ui.state import BATCH_RESULT, NOCACHE_RESULT, Slot, current_run
from explorer.ui.widgets import escape_markdown, show_error

CHARS_PER_TOKEN = 4  # English runs ~4 characters a token: enough for an estimate before anything is tokenized
NOCACHE_MOST_S = 1800.0  # the largest time budget the page offers (a hosted server's cap, if lower)
DEFAULT_PROMPT = "The history of the printing press"


def last_figures() -> tuple[ModelInfo, DeviceProfile] | None:
    """The model and device figures of this session's last run: enough for a modelled estimate, loading nothing."""
    run = current_run()
    return None if run is None else (run.trace.model, run.trace.device)


def _modelled_for(info: ModelInfo, device: DeviceProfile) -> str:
    return escape_markdown(f"modelled for {info.display_name} on {device.name}")  # the model name is user text


# --- without a KV cache ----------------------------------------------------------------------------------------------
def nocache_estimate_line(prompt: str, new_tokens: int, budget_s: float, shown: NoCacheResult | None = None) -> str:
    """What the naive loop will cost, before it runs: from the last run's figures and an approximate prompt length.
    For the settings of the result shown below, that result's own estimate: one figure for one setting."""
    if shown is not None and (prompt, new_tokens) == (shown.cached_trace.prompt_text, len(shown.uncached)):
        return (
            f"For these settings the naive loop was modelled at ≈{shown.estimate_s:.1f} s "
            f"({_modelled_for(shown.cached_trace.model, shown.cached_trace.device)}, its {shown.prompt_len} prompt "
            "tokens): the estimate shown with the result below. Change a setting for a fresh estimate."
        )
    figures = last_figures()
    if figures is None:
        return (
            f"The naive loop's time is estimated (modelled) and checked against the {budget_s:.0f} s budget before it "
            "starts; run the model once from the sidebar to see the estimate here first."
        )
    info, device = figures
    prompt_tokens = max(1, math.ceil(len(prompt) / CHARS_PER_TOKEN))
    try:
        estimate_s = nocache_result.validate(info, device, prompt_tokens, new_tokens, budget_s)  # raises past a limit
    except BadInput as exc:
        return escape_markdown(f"As set, this would be refused: {exc}")
    return (
        f"Estimated before running ({_modelled_for(info, device)}, ≈{prompt_tokens} prompt tokens at ≈"
        f"{CHARS_PER_TOKEN} characters a token): the naive loop is modelled at ≈{estimate_s:.1f} s of the "
        f"{budget_s:.0f} s budget at this device's figures, a floor that overheads and a busier machine add to. The "
        "exact check runs on the tokenized prompt before anything starts."
    )


def nocache_inputs(shown: NoCacheResult | None = None) -> None:
    """The prompt, new tokens and budget (the shown result's, where one is shown), the modelled estimate for them,
    and the button that runs both loops."""
    prompt_default, tokens_default = DEFAULT_PROMPT, DEFAULT_NEW_TOKENS
    if shown is not None:
        prompt_default, tokens_default = shown.cached_trace.prompt_text, shown.cached_trace.new_tokens
        st.caption("The settings of the result shown below; change them and run for a new one.")
    prompt = st.text_input("Prompt (no chat template)", value=prompt_default)
    new_tokens = int(
        st.number_input(
            "New tokens",
            min_value=MIN_NEW_TOKENS,
            max_value=MAX_NEW_TOKENS_LIMIT,
            value=max(MIN_NEW_TOKENS, min(MAX_NEW_TOKENS_LIMIT, tokens_default)),
            help="Up to the model's context (prompt + new tokens), if the naive loop's estimate fits the budget. "
            f"The growth is compared over the first and last {EDGE_STEPS} decode steps: ask for "
            f"{2 * EDGE_STEPS + 1} or more.",
        )
    )
    most_s = int(hosting_policy().lab_budget_s(NOCACHE_MOST_S))
    budget_s = float(
        st.number_input(
            "Time budget (s)",
            min_value=min(10, most_s),
            max_value=most_s,
            value=min(300, most_s),
            help="A run whose modelled estimate is longer is refused before it starts.",
        )
    )
    st.caption(nocache_estimate_line(prompt, new_tokens, budget_s, shown))
    if st.button("Run both loops", type="primary", key="nocache-run"):
        body = {"prompt": prompt, "new_tokens": new_tokens, "budget_s": budget_s}
        size = sizes.nocache_size(prompt, new_tokens, budget_s)
        done = ask_lab("Running the cached and the naive loop", "nocache", body, size)
        if done is not None:  # refused or failed: one line said why, and the previous result stays
            NOCACHE_RESULT.set(NoCacheResult.from_dict(done))


# --- batching --------------------------------------------------------------------------------------------------------
def batch_plan_line(config: BatchConfig) -> str:
    """The caps and the sweep's modelled cost, before it runs."""
    caps = (
        f"Caps: the largest batch's KV cache at most {human_bytes(config.kv_cap_bytes)}, the sweep at most "
        f"{config.budget_s:.0f} s"
    )
    max_batch = hosting_policy().max_batch
    if max_batch is not None:
        caps += f", batches of at most {max_batch} on this server"
    figures = last_figures()
    if figures is None:
        return (
            f"{caps}. Both are checked (modelled) before the sweep starts; run the model once from the sidebar to see "
            "the estimate here first."
        )
    info, device = figures
    try:
        plan = batch_settings.validate(info, device, config)  # raises past a limit
    except BadInput as exc:
        return escape_markdown(f"{caps}. As set, this would be refused: {exc}")
    return (
        f"{caps}. Estimated before running ({_modelled_for(info, device)}): batch {max(config.batch_sizes)}'s KV "
        f"cache {human_bytes(plan.largest_kv_cache_bytes)}; the sweep ≈{plan.estimate_s:.1f} s for {plan.solo_runs} "
        f"solo reference run(s) and {len(config.batch_sizes)} batch size(s)."
    )


def batch_inputs(shown: BatchResult | None = None) -> None:
    """Batch sizes, prompt and new tokens, one prompt or many (the shown result's, where one is shown), the caps and
    estimate, and the button for the sweep."""
    start = shown.config if shown is not None else BatchConfig()
    if shown is not None:
        st.caption("The settings of the result shown below; change them and run for a new one.")
    sizes_typed = st.text_input("Batch sizes", value=",".join(map(str, start.batch_sizes)))
    left, right = st.columns(2)
    prompt_tokens = int(
        left.number_input("Prompt tokens", min_value=1, max_value=1024, value=min(1024, start.prompt_tokens))
    )
    new_tokens = int(
        right.number_input("New tokens", min_value=2, max_value=256, value=max(2, min(256, start.new_tokens)))
    )
    distinct = st.toggle("Different prompts of equal length (off: one prompt repeated)", value=start.distinct_prompts)
    budget_s = hosting_policy().lab_budget_s(batch_settings.DEFAULT_BUDGET_S)  # a hosted server's cap, if lower
    try:
        config = BatchConfig(parse_batch_sizes(sizes_typed), prompt_tokens, new_tokens, distinct, budget_s=budget_s)
    except BadInput as exc:
        st.caption(escape_markdown(f"As set, this would be refused: {exc}"))
        if st.button("Run the sweep", type="primary", key="batch-run"):
            show_error(str(exc))
        return
    st.caption(batch_plan_line(config))
    if st.button("Run the sweep", type="primary", key="batch-run"):
        body = {
            "batch_sizes": list(config.batch_sizes),
            "prompt_tokens": config.prompt_tokens,
            "new_tokens": config.new_tokens,
            "distinct_prompts": config.distinct_prompts,
            "budget_s": config.budget_s,
        }
        done = ask_lab("Running every batch size", "batch", body, sizes.batch_size(config))
        if done is not None:  # refused or failed: one line said why, and the previous result stays
            BATCH_RESULT.set(BatchResult.from_dict(done))


def batch_mismatches(result: BatchResult) -> None:
    """A request whose batched tokens differ from its solo run: which token, and why, instead of hiding it."""
    notes = [note for run in result.runs for note in run.mismatch_notes]
    if not notes:
        return
    st.warning(f"{len(notes)} batched request(s) differ from their solo run in the same dtype: which token, and why.")
    for note in notes:
        st.text(note)  # token texts come from the model: never markdown


def batch_itl_slo_s() -> tuple[float, str]:
    """The ITL SLO the Batching page checks each batch size against: the session's one SLO (the user's where set, else
    the same default every page uses), with the line that says which."""
    return current_slos_s()[1], slo_source()


def figures_used(result_device: DeviceProfile, key: Slot[object], result: object) -> None:
    """Which device figures the shown result's modelled numbers use (a recorded result's: the recording machine's),
    beside this session's live run's."""
    live = current_run()
    recorded = key.get() is not result
    under_load_warning(result_device)  # the page's one under-load line: its sentences state bounds plainly
    st.caption(figures_used_sentence(result_device, recorded, live.trace.device if live else None))
