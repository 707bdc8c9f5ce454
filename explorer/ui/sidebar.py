"""The shared sidebar: the run's inputs in a form (typing never reruns anything), re-measuring the device, and the
downloads of the current run."""

from __future__ import annotations

import streamlit as st

from explorer.engine import MAX_NEW_TOKENS_LIMIT, MAX_REPEATS
from explorer.loading import DEVICES, DTYPES, EMBEDDED
from explorer.perfetto import perfetto_json
from explorer.trace import Sampling
from explorer.ui.runner import remeasure_device
from explorer.ui.state import (
    APP_MAX_NEW_TOKENS,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_PROMPT,
    PROMPT_MAX_CHARS,
    RunInputs,
    current_run,
)


def sidebar() -> RunInputs | None:
    """The run's inputs, in a form so that typing never reruns anything; returns them when Run is pressed."""
    with st.sidebar.form("run-form"):
        st.markdown("**Run a prompt**")
        prompt = st.text_area("Prompt", value=DEFAULT_PROMPT, max_chars=PROMPT_MAX_CHARS, height=110)
        max_new_tokens = st.number_input(
            "Max new tokens",
            min_value=1,
            max_value=min(APP_MAX_NEW_TOKENS, MAX_NEW_TOKENS_LIMIT),
            value=DEFAULT_MAX_NEW_TOKENS,
            step=1,
        )
        use_chat_template = st.toggle("Use the chat template", value=True, help="Wrap the prompt as a user message.")
        attention = st.toggle(
            "Capture attention maps", value=True, help="An untimed replay of the same tokens with eager attention."
        )
        repeats = st.number_input(
            "Repeats",
            min_value=1,
            max_value=MAX_REPEATS,
            value=1,
            help="Run the same request N times in a row: figures become a median with their min and max.",
        )
        with st.expander("Model and device"):
            model = st.text_input("Model", value=EMBEDDED, help="'embedded' (SmolLM2-135M), a hub id or a folder")
            device = st.selectbox("Device", DEVICES, index=0)
            dtype = st.selectbox("Dtype", list(DTYPES), index=0, help="float16 runs on CUDA only")
        with st.expander("Sampling"):
            temperature = st.number_input("Temperature (0 = greedy)", min_value=0.0, max_value=5.0, value=0.0)
            top_k = st.number_input("Top-k (0 = off)", min_value=0, max_value=1000, value=0)
            seed = st.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0)
        submitted = st.form_submit_button("Run", type="primary", width="stretch")
    if not submitted:
        return None
    return RunInputs(
        model=model,
        device=device,
        dtype=dtype,
        prompt=prompt,
        max_new_tokens=int(max_new_tokens),
        use_chat_template=use_chat_template,
        capture_attention=attention,
        repeats=int(repeats),
        sampling=Sampling(temperature=float(temperature), top_k=int(top_k) or None, seed=int(seed)),
    )


def remeasure_button() -> None:
    if st.sidebar.button(
        "Re-measure device figures",
        help="Runs the matmul and copy microbenchmarks again (they are reused otherwise, and re-taken by themselves "
        "when a pass beats them), then divides the current run by the new figures.",
    ):
        remeasure_device()


def sidebar_downloads() -> None:
    """The current run's trace and passes; drawn after any run of this script, so they are never one run behind."""
    run = current_run()
    if run is None:
        return
    st.sidebar.download_button(
        "Download trace (JSON)", run.trace.to_json(), file_name="trace.json", mime="application/json", on_click="ignore"
    )
    st.sidebar.download_button(
        "Download passes (CSV)", run.trace.passes_csv(), file_name="passes.csv", mime="text/csv", on_click="ignore"
    )
    st.sidebar.download_button(
        "Download timeline (Perfetto JSON)",
        perfetto_json(run.trace),
        file_name="trace.perfetto.json",
        mime="application/json",
        on_click="ignore",
        help="Open in ui.perfetto.dev or chrome://tracing: passes as slices, tokens as instants, KV cache as a counter",
    )
