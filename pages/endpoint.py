"""A real serving engine beyond this machine: TTFT, ITL and throughput of an OpenAI-compatible streaming endpoint
over a concurrency sweep, against the SLOs, beside the local instrumented run."""

import streamlit as st

from explorer import ui
from explorer.hosting.settings import EndpointPolicy
from explorer.ui import endpoint_view as view
from explorer.ui import glass_view as glass

ui.page_title("Endpoint: a real serving engine")
st.caption(
    "Point the explorer at any OpenAI-compatible streaming server (vLLM, SGLang, TGI, llama.cpp's server, "
    "`transformers serve`) and send the same prompt at rising concurrency: more requests in flight buy total "
    "throughput and cost each user latency. The SLO lines and goodput use the session's one pair of SLOs, the same "
    "as on every page."
)
policy = EndpointPolicy.from_env()
view.hosted_caption(policy)
inputs = view.sweep_form(policy)
uploaded = st.file_uploader(
    "…or show a recorded sweep (the JSON of `python -m explorer remote --json FILE`)", type=["json"]
)
if inputs is not None:
    view.measure_sweep(inputs, policy)
elif uploaded is not None:
    view.load_recorded(uploaded)

result = view.require_sweep(show_bundled=uploaded is None)  # the recorded sweep until one is measured or loaded
view.sweep_header(result)
glass.glass_box(result)  # the server's own /metrics over each level, where it publishes them
ttft_slo_s, itl_slo_s = view.against_slos(result)
glass.serving_sweep(result, ttft_slo_s, itl_slo_s)
view.every_request(result, ttft_slo_s, itl_slo_s)
glass.prefix_experiment(result, policy)
view.beside_local_run(result)
