"""The Endpoint page's sections: the sweep form and what it measures or loads, the sweep against the SLOs, every
request, and the same prompt through the local instrumented run."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import pandas as pd
import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from explorer.charts import remote as charts
from explorer.core.errors import BadInput, ExplorerError
from explorer.hosting import settings
from explorer.labs import bundled
from explorer.remote import sweep, tokens, upload
from explorer.remote.endpoint import APIS, make_endpoint
from explorer.remote.records import ITL_RULE, SweepResult
from explorer.ui.admission import count_run
from explorer.ui.runner import execute_run
from explorer.ui.shared import hosting_policy, read_once
from explorer.ui.slo_state import slo_inputs
from explorer.ui.state import (
    APP_MAX_NEW_TOKENS,
    DEFAULT_PROMPT,
    ENDPOINT_LOADED_FILE,
    ENDPOINT_RESULT,
    ENDPOINT_TABLES,
    ENDPOINT_UPLOAD,
    RunInputs,
    current_run,
    last_inputs,
)
from explorer.ui.widgets import chart, escape_markdown, secondary, show_error, table

PERCENTILES_CAPTION = (
    "TTFT and ITL tails as concurrency rises: more requests in flight queue behind each other's prefills (TTFT) and "
    "share each decode step (ITL). Red dashed lines are the SLOs."
)
TRADEOFF_CAPTION = (
    "The throughput-latency trade-off: each point a concurrency level, labelled with its goodput. In general more "
    "requests in flight raise total tokens/s until the server saturates, each request waiting longer; an SLO does not "
    "cap that throughput, it caps goodput, the requests that meet it, which the labels count."
)
# The ITL rule in plain words first; its precise statement (`ITL_RULE`, also the CLI's and the JSON's) folds away.
ITL_PLAIN = (
    "A server often streams several tokens in one chunk: their wait is shared out evenly, so every token gets its "
    "own inter-token latency. TTFT counts from opening the connection, so it holds the network and the queue too."
)


@dataclass(frozen=True)
class SweepInputs:
    """What the form hands to a sweep, as typed: checked when the sweep is built."""

    base_url: str
    model: str
    api: str
    prompt: str
    max_tokens: int
    levels_text: str
    requests: int
    timeout_s: float
    api_key: str
    embedded_tokenizer: bool  # count each chunk's tokens locally instead of assuming one per chunk


def hosted_caption(policy: settings.EndpointPolicy) -> None:
    if not policy.hosted:
        return
    allowed = ", ".join(policy.allowed) or f"none (the operator sets {settings.ALLOWED_ENDPOINTS_ENV})"
    st.caption(
        f"Hosted mode: only these endpoints can be measured: {escape_markdown(allowed)}; a sweep is capped at "
        f"concurrency {settings.HOSTED_MAX_CONCURRENCY}, {settings.HOSTED_MAX_REQUESTS} requests per level and "
        f"{settings.HOSTED_MAX_TOKENS} max tokens; a sweep, and each new file loaded, counts against this session's "
        "run limit."
    )


def sweep_form(policy: settings.EndpointPolicy) -> SweepInputs | None:
    """The endpoint and the sweep's sizes; the inputs once Measure is pressed, else None."""
    with st.form("endpoint-form"):
        left, right = st.columns([3, 2])
        base_url = left.text_input(
            "Base URL",
            value=policy.allowed[0] if policy.allowed else "http://127.0.0.1:8000/v1",
            help="The server's OpenAI root, usually ending in /v1; /chat/completions or /completions is added.",
        )
        model = right.text_input("Model", value="", help="The name the server serves (GET <base URL>/models lists it).")
        api = st.radio("API", APIS, horizontal=True, help="chat sends the prompt as one user message.")
        prompt = st.text_area("Prompt", value=DEFAULT_PROMPT, height=80)  # its length is checked with a message
        cols = st.columns(4)
        max_tokens = cols[0].number_input(
            "Max tokens",
            min_value=1,
            max_value=settings.HOSTED_MAX_TOKENS if policy.hosted else sweep.MAX_TOKENS_LIMIT,
            value=sweep.DEFAULT_MAX_TOKENS,
        )
        levels_text = cols[1].text_input("Concurrency levels", value="1,4", help="Comma-separated, e.g. 1,2,4,8.")
        requests = cols[2].number_input(
            "Requests per level", min_value=1, max_value=64, value=sweep.DEFAULT_REQUESTS, help="Bounded: at most 64."
        )
        timeout_s = cols[3].number_input(
            "Timeout (s)",
            min_value=1.0,
            max_value=600.0,
            value=sweep.DEFAULT_TIMEOUT_S,
            help="The deadline of each request, from sending it to the end of its answer.",
        )
        api_key = st.text_input(
            "API key (optional)", type="password", help="Sent as a bearer token; never shown or written to a file."
        )
        embedded_tokenizer = st.toggle(
            "Count chunk tokens with the embedded tokenizer",
            help="Without the server's usage per chunk, each chunk counts as one token, which spreads ITLs wrongly "
            "when a chunk holds several. The embedded model's tokenizer counts them exactly for the embedded model "
            "(and closely for its family); the server's total is still taken from its usage.",
        )
        if not st.form_submit_button("Measure", type="primary"):
            return None
    return SweepInputs(
        base_url, model, api, prompt, int(max_tokens), levels_text, int(requests), float(timeout_s), api_key,
        embedded_tokenizer,
    )  # fmt: skip


def embedded_chunk_counter() -> tokens.ChunkCounter:
    """One per web process (`read_once`): read-only, and the counter serializes its own calls."""
    with st.spinner("Loading the embedded tokenizer…"):
        counter = read_once().get("embedded chunk counter", lambda: tokens.load_chunk_counter("embedded"))
    return counter  # type: ignore[return-value]


def measure_sweep(inputs: SweepInputs, policy: settings.EndpointPolicy) -> None:
    """Check, count the sweep against the session's run limit, send it with progress; errors are one line."""
    try:
        hosting_policy().check_prompt_chars(inputs.prompt)  # a pasted book gets a line, never silently dropped
        config = sweep.SweepConfig(
            endpoint=make_endpoint(inputs.base_url, inputs.model, inputs.api),
            prompt=inputs.prompt,
            max_tokens=inputs.max_tokens,
            concurrency_levels=sweep.parse_levels(inputs.levels_text),
            requests_per_level=inputs.requests,
            timeout_s=inputs.timeout_s,
            time_limit_s=sweep.DEFAULT_TIME_LIMIT_S,
        )
        config.validate()  # refused here, before the sweep counts against the limit (run_sweep checks again)
        policy.check(config.endpoint.base_url)
        policy.check_limits(config.concurrency_levels, config.requests_per_level, config.max_tokens)
        count_run()  # a sweep loads a server: it counts against this session's rate limit like a run
        counter = embedded_chunk_counter() if inputs.embedded_tokenizer else None
        bar = st.progress(0.0, text="Connecting…")
        result = sweep.run_sweep(
            config,
            api_key=inputs.api_key or None,
            counter=counter,
            on_progress=lambda f, text: bar.progress(f, text=text),
            policy=policy,
        )
        ENDPOINT_RESULT.set(result)
        bar.empty()
    except ExplorerError as exc:
        show_error(str(exc))


def load_recorded(uploaded: UploadedFile) -> None:
    """A recorded sweep, read once per upload: a rerun with the same file reads, checks and derives nothing again,
    and a refusal (one line) stays on the page while its file does."""
    seen = ENDPOINT_LOADED_FILE.get()
    if seen is not None and seen[0] == uploaded.file_id:
        if seen[1]:
            show_error(seen[1])
        return
    refusal = ""
    try:
        ENDPOINT_RESULT.set(read_upload(uploaded.getvalue()))
    except ExplorerError as exc:
        refusal = str(exc)
        show_error(refusal)
    ENDPOINT_LOADED_FILE.set((uploaded.file_id, refusal))


def read_upload(raw: bytes) -> SweepResult:
    """The sweep in an uploaded file's bytes, or its one-line ExplorerError. The same content is read once per
    session (keyed by its sha256); new content counts against the hosted rate limit like a run (reading a file is
    the server's CPU), then is checked field by field before anything is built (`explorer.remote.upload`)."""
    digest = hashlib.sha256(raw).hexdigest()
    cached = ENDPOINT_UPLOAD.get()
    if cached is None or cached[0] != digest:
        policy = hosting_policy()
        count_run(policy)  # a refusal here is not remembered: the same file may be tried again in a minute
        try:
            outcome: SweepResult | str = upload.read_sweep(raw, upload.UploadLimits.for_server(policy.hosted))
        except ExplorerError as exc:
            outcome = str(exc)
        cached = (digest, outcome)
        ENDPOINT_UPLOAD.set(cached)
    if isinstance(cached[1], str):
        raise BadInput(cached[1])
    return cached[1]


@dataclass(frozen=True)
class SweepTables:
    """What the page derives from a sweep at a pair of SLOs: built once, reused by every rerun that keeps both."""

    levels: pd.DataFrame
    percentiles: pd.DataFrame
    tradeoff: pd.DataFrame
    requests: pd.DataFrame


def sweep_tables(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> SweepTables:
    """The session's tables for this sweep and these SLOs, derived only when either changed."""
    slos = (ttft_slo_s, itl_slo_s)
    cached = ENDPOINT_TABLES.get()
    if cached is not None and cached[0] is result and cached[1] == slos:
        return cached[2]
    tables = SweepTables(
        levels=charts.levels_frame(result, *slos),
        percentiles=charts.percentiles_frame(result),
        tradeoff=charts.tradeoff_frame(result, *slos),
        requests=charts.requests_frame(result, *slos),
    )
    ENDPOINT_TABLES.set((result, slos, tables))
    return tables


def require_sweep(show_bundled: bool = True) -> SweepResult:
    """The sweep shown: measured or loaded in this session, else (when `show_bundled`: no file in the uploader, so a
    refused upload is never followed by charts of another sweep) the bundled recorded sweep under a banner saying so
    (`explorer.labs.bundled`); without either, a hint and the page stops here. A bundled file that cannot be read is
    one line."""
    hint = "No sweep yet: fill in an endpoint and press **Measure**, or load a recorded JSON."
    result: SweepResult | None = ENDPOINT_RESULT.get()
    if result is not None:
        return result
    if show_bundled:
        try:
            shown = bundled.read("endpoint")
        except BadInput as exc:
            st.caption(escape_markdown(str(exc)))
        else:
            st.info(f"{shown.banner} {hint} Either replaces this recorded one.", icon=":material/history:")
            return shown.result
    st.info(hint)
    st.stop()


def sweep_header(result: SweepResult) -> None:
    endpoint = result.endpoint
    st.text(  # text, never markdown: the URL, model and prompt are whatever was typed or uploaded
        f"{endpoint.base_url} · model {endpoint.model} · {endpoint.api} API · {result.requests_per_level} requests "
        f"per level, up to {result.max_tokens} tokens each · measured {result.created_at}"
    )
    st.info(ITL_PLAIN, icon=":material/straighten:")
    with st.expander("How ITL and TTFT are counted, precisely"):
        st.markdown(ITL_RULE)  # our rule, never the file's own copy of it
    if result.stopped:  # a sweep keeps the levels that finished; this says why there are no more
        st.warning(f"The sweep stopped early: {escape_markdown(result.stopped)}")  # it may quote a server
    if result.tokens_note:
        st.warning(escape_markdown(result.tokens_note))  # it names the file's token sources: text, never markdown


def against_slos(result: SweepResult) -> tuple[float, float]:
    """The levels table and the two charts against the session's SLOs; returns the SLOs (seconds)."""
    st.subheader("Against your SLOs")
    st.caption(
        "The session's one pair of SLOs, the same as on every other page. A request is good when its TTFT and the p99 "
        "of its ITLs are both strictly under them; changing an SLO re-reads the stored requests: nothing is sent again."
    )
    ttft_slo_s, itl_slo_s = slo_inputs()
    tables = sweep_tables(result, ttft_slo_s, itl_slo_s)
    table(
        tables.levels,
        "Per concurrency level: TTFT and per-token ITL percentiles over every request, total output tokens/s (all "
        "output tokens / the level's wall time) and goodput (requests meeting both SLOs).",
        f"measured · tokens counted by {escape_markdown(result.token_sources)}",  # the file's words: text
    )
    panels = [
        (tables.percentiles, charts.percentiles_chart, "endpoint-percentiles", PERCENTILES_CAPTION),
        (tables.tradeoff, charts.tradeoff_chart, "endpoint-throughput-latency", TRADEOFF_CAPTION),
    ]
    for frame, draw, name, caption in panels:
        source = "measured · percentiles interpolated linearly (numpy's default)"
        chart(draw(frame, ttft_slo_s, itl_slo_s), frame, name, caption, source)
    return ttft_slo_s, itl_slo_s


def every_request(result: SweepResult, ttft_slo_s: float, itl_slo_s: float) -> None:
    with secondary("Every request"):  # collapsed in presenter mode: the levels above carry the idea
        table(
            sweep_tables(result, ttft_slo_s, itl_slo_s).requests,
            "TPOT is (E2E − TTFT) / (tokens − 1), AIPerf's per-request ITL and vLLM's TPOT; “tokens from” says what "
            "counted the total / the tokens in each chunk (usage: the server's own count); “tokens disagree” marks "
            "a request whose chunk counts do not sum to the server's total.",
            "measured",
        )


def local_inputs(result: SweepResult) -> RunInputs:
    """The sidebar's last settings with the sweep's prompt: the chat API's prompt goes through the chat template."""
    last: RunInputs = last_inputs()
    return replace(
        last,
        prompt=result.prompt,
        use_chat_template=result.endpoint.api == "chat",
        max_new_tokens=min(result.max_tokens, APP_MAX_NEW_TOKENS),
    )


def same_prompt(inputs: RunInputs) -> bool:
    """Whether the session's current run is of this prompt, templated the same way."""
    run = current_run()
    return run is not None and (run.trace.prompt_text, run.trace.chat_template_used) == (
        inputs.prompt,
        inputs.use_chat_template,
    )


def beside_local_run(result: SweepResult) -> None:
    """The local instrumented run of the sweep's prompt beside the remote levels, or a clear word that it differs."""
    st.subheader("Beside the local instrumented run")
    inputs = local_inputs(result)
    if st.button(
        "Run this prompt locally",
        help="Runs the sweep's prompt through the local instrumented run (the sidebar's model, device and dtype), "
        "as the sidebar's Run does.",
    ):
        execute_run(inputs)
    local = current_run()
    if local is None:
        note = "Press **Run this prompt locally** to add the local instrumented run's TTFT and ITL here."
    elif same_prompt(inputs):
        note = (
            "The local row is this session's run of the sweep's prompt on the sidebar's model (another model, "
            "machine and batch: compare the shape, not the numbers)."
        )
    else:
        note = ""
        st.warning(
            "The local row is this session's last run, of a different prompt (or chat template) than the sweep's: "
            "press **Run this prompt locally** to compare like with like."
        )
    st.caption(
        "What the remote figures are made of: prefill ≈ remote TTFT minus queueing and the network; decode ≈ remote "
        "ITL. " + note
    )
    table(
        charts.local_vs_remote_frame(result, local.trace if local is not None else None),
        "TTFT p50 and ITL p50: local from the timed passes, remote from the stream's chunk arrivals.",
        "measured",
    )
