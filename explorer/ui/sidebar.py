"""The shared sidebar: the run's inputs in a form (typing never reruns anything), re-measuring the device, and the
downloads of the current run. Every script run passes here, so it is also where idle stepped requests are swept."""

from __future__ import annotations

import streamlit as st

from explorer.core.errors import BadInput
from explorer.core.model_info import DEVICES, DTYPE_NAMES
from explorer.core.paths import EMBEDDED
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, MAX_REPEATS
from explorer.core.trace import DecodePath, Sampling
from explorer.hosting.settings import HOSTED_ENV, HostedPolicy
from explorer.recording.perfetto import perfetto_json
from explorer.ui.recordings import as_recording_bytes
from explorer.ui.runner import remeasure_device
from explorer.ui.shared import hosting_policy
from explorer.ui.state import (
    APP_MAX_NEW_TOKENS,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_PROMPT,
    LEFT_QUEUE,
    PROMPT_TYPED,
    RunInputs,
    current_run,
)
from explorer.ui.warm_start import warming_line

SERVER_DEFAULTS = RunInputs()
# The form's own keys: read (a form's widgets hold what was last submitted, their defaults before), never written
# once drawn; the prompt is written only before its box is drawn, to what a page's own Run ran (`page_start.run_here`).
PROMPT_KEY = "sidebar-prompt"
NEW_TOKENS_KEY = "sidebar-max-new-tokens"
TEMPLATE_KEY = "sidebar-chat-template"
ATTENTION_KEY = "sidebar-attention"
REPEATS_KEY = "sidebar-repeats"
MODEL_KEY = "sidebar-model"
DEVICE_KEY = "sidebar-device"
DTYPE_KEY = "sidebar-dtype"
DECODE_PATH_KEY = "sidebar-decode-path"
DECODE_PATH_CHOICES = ("auto", "eager", "static", "graph")
DECODE_PATH_LABELS = {"auto": "auto: graph on CUDA, eager on a CPU"}
MODEL_KEY = "sidebar-model"
ANY_MODEL = (
    "'embedded' (SmolLM2-135M), a hub id, a folder, or shape:NAME: a shipped At-scale config (e.g. shape:llama-3.1-8b) "
    "built with random weights, its timings real and its tokens not meaningful"
)
TEMPERATURE_KEY = "sidebar-temperature"
TOP_K_KEY = "sidebar-top-k"
SEED_KEY = "sidebar-sampling-seed"  # a sampling seed: the random one that makes a run replayable
RUN_KEY = "sidebar-run"


def sidebar_policy() -> HostedPolicy:
    """The server's warm-up at start (what it is doing while it runs, when it was done once it has), then its
    limits, said when any apply; a malformed setting is said and locks the caps."""
    warming_line()
    try:
        policy = hosting_policy()
    except BadInput as exc:
        st.sidebar.error(str(exc))
        return HostedPolicy.from_env({HOSTED_ENV: "1"})  # the defaults, for drawing; runs are refused anyway
    lines = policy.caps_lines()
    if policy.hosted:
        st.sidebar.caption(
            "Shared demo: one run at a time on one device, so every timing is clean. Limits on this server: "
            + "; ".join(lines)
            + "."
        )
    elif lines:
        st.sidebar.caption("This server only runs " + lines[0] + ".")
    return policy


def sidebar() -> RunInputs | None:
    """The run's inputs, in a form so that typing never reruns anything; returns them when Run is pressed."""
    if LEFT_QUEUE.pop():
        st.sidebar.info("You left the queue: nothing ran.")
    policy = sidebar_policy()
    tokens_cap = min(APP_MAX_NEW_TOKENS, MAX_NEW_TOKENS_LIMIT, policy.max_new_tokens or MAX_NEW_TOKENS_LIMIT)
    repeats_cap = min(MAX_REPEATS, policy.max_repeats or MAX_REPEATS)
    typed = PROMPT_TYPED.pop()
    # The box's value lives in the state (no `value=`): a page's own Run writes the prompt it ran there, before the
    # box is drawn in this run, so the sidebar always shows the prompt of the last run.
    if typed is not None or PROMPT_KEY not in st.session_state:
        st.session_state[PROMPT_KEY] = DEFAULT_PROMPT if typed is None else typed
    with st.sidebar.form("run-form"):
        st.markdown("**Run a prompt**")
        # No max_chars: a browser drops a paste over it without a word, and Run would run the previous prompt. The
        # length is checked on the server instead, with a message.
        st.text_area(
            "Prompt",
            height=110,
            help=f"At most {policy.max_prompt_chars:,} characters.",
            key=PROMPT_KEY,
        )
        st.number_input(
            "Max new tokens",
            min_value=1,
            max_value=tokens_cap,
            value=min(DEFAULT_MAX_NEW_TOKENS, tokens_cap),
            step=1,
            key=NEW_TOKENS_KEY,
        )
        st.toggle("Use the chat template", value=True, help="Wrap the prompt as a user message.", key=TEMPLATE_KEY)
        st.toggle(
            "Capture attention maps",
            value=True,
            help="An untimed replay of the same tokens with eager attention.",
            key=ATTENTION_KEY,
        )
        st.number_input(
            "Repeats",
            min_value=1,
            max_value=repeats_cap,
            value=1,
            help="Run the same request N times in a row: figures become a median with their min and max.",
            key=REPEATS_KEY,
        )
        model_and_sampling_inputs(policy)
        submitted = st.form_submit_button("Run", type="primary", width="stretch", key=RUN_KEY)
    return sidebar_inputs() if submitted else None


def sidebar_prompt() -> str:
    """The prompt the sidebar's box holds (as last submitted; the default before)."""
    return str(st.session_state.get(PROMPT_KEY, DEFAULT_PROMPT))


def sidebar_inputs(prompt: str | None = None) -> RunInputs:
    """The run the sidebar's form describes, as last submitted (each box's default before), with `prompt` instead of
    the box's when given: what Run in the sidebar runs, and what a page's own Run runs with its prompt."""
    state = st.session_state
    defaults = SERVER_DEFAULTS
    top_k = int(state.get(TOP_K_KEY, 0))
    return RunInputs(
        model=str(state.get(MODEL_KEY, defaults.model)),
        device=str(state.get(DEVICE_KEY, defaults.device)),
        dtype=str(state.get(DTYPE_KEY, defaults.dtype)),
        prompt=sidebar_prompt() if prompt is None else prompt,
        max_new_tokens=int(state.get(NEW_TOKENS_KEY, defaults.max_new_tokens)),
        use_chat_template=bool(state.get(TEMPLATE_KEY, defaults.use_chat_template)),
        capture_attention=bool(state.get(ATTENTION_KEY, defaults.capture_attention)),
        repeats=int(state.get(REPEATS_KEY, defaults.repeats)),
        sampling=Sampling(
            temperature=float(state.get(TEMPERATURE_KEY, 0.0)), top_k=top_k or None, seed=int(state.get(SEED_KEY, 0))
        ),
        decode_path=decode_path_chosen(),
    )


def model_and_sampling_inputs(policy: HostedPolicy) -> None:
    """The form's two folded sections: the model with its device and dtype, and sampling."""
    with st.expander("Model and device"):
        model_help = f"This server runs: {', '.join(policy.allowed_models)}" if policy.allowed_models else ANY_MODEL
        st.text_input("Model", value=EMBEDDED, help=model_help, key=MODEL_KEY)
        device_inputs(policy)
        decode_path_input()
    with st.expander("Sampling"):
        st.number_input("Temperature (0 = greedy)", min_value=0.0, max_value=5.0, value=0.0, key=TEMPERATURE_KEY)
        st.number_input("Top-k (0 = off)", min_value=0, max_value=1000, value=0, key=TOP_K_KEY)
        st.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, key=SEED_KEY)


def device_inputs(policy: HostedPolicy) -> None:
    """The device and dtype boxes: free locally, fixed at the server's defaults on a hosted server unless its
    operator allows a choice (`HostedPolicy.device_choice`)."""
    if not policy.device_choice:
        fixed = "Fixed on this shared server: another device or dtype would load a second model and evict the one "
        fixed += "other visitors are using."
        st.selectbox("Device", [SERVER_DEFAULTS.device], disabled=True, help=fixed, key=DEVICE_KEY)
        st.selectbox("Dtype", [SERVER_DEFAULTS.dtype], disabled=True, help=fixed, key=DTYPE_KEY)
        return
    st.selectbox("Device", DEVICES, index=0, key=DEVICE_KEY)
    st.selectbox("Dtype", list(DTYPE_NAMES), index=0, help="float16 runs on CUDA only", key=DTYPE_KEY)


def decode_path_chosen() -> DecodePath | None:
    """The decode path the form's box holds (as last submitted; auto before): None for auto."""
    choice = st.session_state.get(DECODE_PATH_KEY, "auto")
    return None if choice == "auto" else choice


def decode_path_input() -> DecodePath | None:
    """The decode path box: auto (the device's default) or one of the three; None for auto."""
    choice = st.selectbox(
        "Decode path",
        DECODE_PATH_CHOICES,
        format_func=lambda choice: DECODE_PATH_LABELS.get(choice, choice),
        key=DECODE_PATH_KEY,
        help="eager: a growing KV cache, every kernel launched from Python; static: a cache reserving every position; "
        "graph: the static cache with the decode step replayed as one captured CUDA graph (CUDA only). The Cost "
        "page compares them on the same request.",
    )
    return None if choice == "auto" else choice


def remeasure_button() -> None:
    if st.sidebar.button(
        "Re-measure device figures",
        help="Runs the matmul, copy and read-only microbenchmarks again (they are reused otherwise, and re-taken "
        "when a pass beats them), then divides the current run by the new figures.",
    ):
        # The device the next Run would use: the boxes as last submitted with Run (a form commits only then).
        remeasure_device(
            st.session_state.get(DEVICE_KEY, SERVER_DEFAULTS.device),
            st.session_state.get(DTYPE_KEY, SERVER_DEFAULTS.dtype),
        )


def sidebar_downloads() -> None:
    """The current run's trace and passes; drawn after any run of this script, so they are never one run behind. A
    shape model's run says first, on every page, that its tokens are not meaningful."""
    run = current_run()
    if run is None:
        return
    if run.trace.model.random_weights:
        st.sidebar.warning(f"Shape model: {run.trace.model.shape_note}.", icon=":material/shape_line:")
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
    st.sidebar.download_button(
        "Download recording (.pdx)",
        lambda: as_recording_bytes(run),  # built only when clicked
        file_name=f"{run.recorded.name if run.recorded else 'explorer-run'}.pdx",
        mime="application/zip",
        on_click="ignore",
        help="The trace and its attention maps in one file (under 5 MB): open it here later, with no model loaded",
    )
