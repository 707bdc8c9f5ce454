"""A real serving engine beyond this machine: TTFT, ITL and throughput of an OpenAI-compatible streaming endpoint
over a concurrency sweep, against the SLOs, beside the local instrumented run."""

import streamlit as st

from explorer import remote, ui
from explorer.charts import remote as charts
from explorer.errors import ExplorerError

RESULT = "endpoint_result"  # the SweepResult shown: measured here or loaded from a file
LOADED_FILE = "endpoint_loaded_file"  # the uploaded file already read, so a rerun does not read it again

st.title("Endpoint: a real serving engine")
st.caption(
    "Point the explorer at any OpenAI-compatible streaming server (vLLM, SGLang, TGI, llama.cpp's server, "
    "`transformers serve`) and send the same prompt at rising concurrency: more requests in flight buy total "
    "throughput and cost each user latency. The SLO lines and goodput are those of the Latency page."
)
policy = remote.EndpointPolicy.from_env()
if policy.hosted:
    allowed = ", ".join(policy.allowed) or "none (the operator sets EXPLORER_ALLOWED_ENDPOINTS)"
    st.caption(
        f"Hosted mode: only these endpoints can be measured: {ui.escape_markdown(allowed)}; a sweep is capped at "
        f"concurrency {remote.HOSTED_MAX_CONCURRENCY}, {remote.HOSTED_MAX_REQUESTS} requests per level and "
        f"{remote.HOSTED_MAX_TOKENS} max tokens."
    )

with st.form("endpoint-form"):
    left, right = st.columns([3, 2])
    base_url = left.text_input(
        "Base URL",
        value=policy.allowed[0] if policy.allowed else "http://127.0.0.1:8000/v1",
        help="The server's OpenAI root, usually ending in /v1; /chat/completions or /completions is added.",
    )
    model = right.text_input("Model", value="", help="The name the server serves (GET <base URL>/models lists it).")
    api = st.radio("API", remote.APIS, horizontal=True, help="chat sends the prompt as one user message.")
    prompt = st.text_area("Prompt", value=ui.DEFAULT_PROMPT, height=80)  # its length is checked with a message
    cols = st.columns(4)
    max_tokens = cols[0].number_input(
        "Max tokens",
        min_value=1,
        max_value=remote.HOSTED_MAX_TOKENS if policy.hosted else remote.MAX_TOKENS_LIMIT,
        value=remote.DEFAULT_MAX_TOKENS,
    )
    levels_text = cols[1].text_input("Concurrency levels", value="1,4", help="Comma-separated, e.g. 1,2,4,8.")
    requests = cols[2].number_input(
        "Requests per level", min_value=1, max_value=64, value=remote.DEFAULT_REQUESTS, help="Bounded: at most 64."
    )
    timeout_s = cols[3].number_input("Timeout (s)", min_value=1.0, max_value=600.0, value=remote.DEFAULT_TIMEOUT_S)
    api_key = st.text_input(
        "API key (optional)", type="password", help="Sent as a bearer token; never shown or written to a file."
    )
    submitted = st.form_submit_button("Measure", type="primary")

uploaded = st.file_uploader(
    "…or show a recorded sweep (the JSON of `python -m explorer remote --json FILE`)", type=["json"]
)

if submitted:
    try:
        ui.hosting_policy().check_prompt_chars(prompt)  # a pasted book gets a line, never silently dropped
        config = remote.SweepConfig(
            endpoint=remote.make_endpoint(base_url, model, api),
            prompt=prompt,
            max_tokens=int(max_tokens),
            concurrency_levels=remote.parse_levels(levels_text),
            requests_per_level=int(requests),
            timeout_s=float(timeout_s),
            time_limit_s=remote.DEFAULT_TIME_LIMIT_S,
        )
        bar = st.progress(0.0, text="Connecting…")
        st.session_state[RESULT] = remote.run_sweep(
            config, api_key=api_key or None, on_progress=lambda f, text: bar.progress(f, text=text), policy=policy
        )
        bar.empty()
    except ExplorerError as exc:
        ui.show_error(str(exc))
elif uploaded is not None and st.session_state.get(LOADED_FILE) != uploaded.file_id:
    st.session_state[LOADED_FILE] = uploaded.file_id
    try:
        st.session_state[RESULT] = remote.SweepResult.from_json(uploaded.getvalue().decode("utf-8", "replace"))
    except ExplorerError as exc:
        ui.show_error(str(exc))

result: remote.SweepResult | None = st.session_state.get(RESULT)
if result is None:
    st.info("No sweep yet: fill in an endpoint and press **Measure**, or load a recorded JSON.")
    st.stop()

endpoint = result.endpoint
st.text(  # text, never markdown: the URL, model and prompt are whatever was typed
    f"{endpoint.base_url} · model {endpoint.model} · {endpoint.api} API · {result.requests_per_level} requests per "
    f"level, up to {result.max_tokens} tokens each · measured {result.created_at}"
)
st.info(result.itl_rule, icon=":material/straighten:")

st.subheader("Against your SLOs")
st.caption(
    "The same SLOs as the Latency page. A request is good when its TTFT and the p99 of its ITLs are both strictly "
    "under them; changing an SLO re-reads the stored requests: nothing is sent again."
)
ttft_slo_s, itl_slo_s = ui.slo_inputs()

levels = charts.levels_frame(result, ttft_slo_s, itl_slo_s)
ui.table(
    levels,
    "Per concurrency level: TTFT and per-token ITL percentiles over every request, total output tokens/s (all "
    "output tokens / the level's wall time) and goodput (requests meeting both SLOs).",
    f"measured · tokens counted by {result.token_sources}",
)
percentiles = charts.percentiles_frame(result)
ui.chart(
    charts.percentiles_chart(percentiles, ttft_slo_s, itl_slo_s),
    percentiles,
    "endpoint-percentiles",
    "TTFT and ITL tails as concurrency rises: more requests in flight queue behind each other's prefills (TTFT) and "
    "share each decode step (ITL). Red dashed lines are the SLOs.",
    "measured · percentiles interpolated linearly (numpy's default)",
)
tradeoff = charts.tradeoff_frame(result, ttft_slo_s, itl_slo_s)
ui.chart(
    charts.tradeoff_chart(tradeoff, ttft_slo_s, itl_slo_s),
    tradeoff,
    "endpoint-throughput-latency",
    "The throughput-latency trade-off: each point a concurrency level, labelled with its goodput. Batching more "
    "requests raises total tokens/s until the p99 latency crosses an SLO.",
    "measured",
)

st.subheader("Every request")
ui.table(
    charts.requests_frame(result, ttft_slo_s, itl_slo_s),
    "tpot_ms is (E2E − TTFT) / (tokens − 1), AIPerf's per-request ITL and vLLM's TPOT; tokens_from says what counted "
    "the total / the tokens in each chunk (usage: the server's own count).",
    "measured",
)

st.subheader("Beside the local instrumented run")
local = ui.current_run()
st.caption(
    "What the remote figures are made of: prefill ≈ remote TTFT minus queueing and the network; decode ≈ remote ITL. "
    + (
        "The local row is this session's last run on the sidebar's model (another model, machine and batch: compare "
        "the shape, not the numbers)."
        if local is not None
        else "Run a prompt from the sidebar to add the local instrumented run's TTFT and ITL here."
    )
)
ui.table(
    charts.local_vs_remote_frame(result, local.trace if local is not None else None),
    "TTFT p50 and ITL p50: local from the timed passes, remote from the stream's chunk arrivals.",
    "measured",
)
