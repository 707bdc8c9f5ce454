"""Inside one inference: the tokens, the timeline of passes, and a step-through of any single pass."""

import streamlit as st

from explorer import ui
from explorer.charts import run as charts
from explorer.charts.common import display_token
from explorer.core.units import human_bytes, ms

result, layout = ui.chart_first_page(
    "Inside one inference",
    "One prefill pass reads the whole prompt at once; then one decode pass per token.",
    "The prefill also builds the KV cache that every decode pass reads.",
)
trace = result.trace
layout.run_metrics(trace)

with layout.explanation("Tokens"):
    st.markdown("**Prompt**, as typed:")
    st.code(trace.prompt_text, language=None, wrap_lines=True)
    template = "with the chat template" if trace.chat_template_used else "raw, no chat template"
    st.markdown(f"…and as the model sees it ({template}): **{trace.prompt_len} tokens**, all computed by the prefill:")
    st.code(" │ ".join(display_token(t) for t in trace.prompt_tokens_text), language=None, wrap_lines=True)
    st.markdown("**Generated** (one per pass, with the gap since the previous token):")
    ui.table(
        charts.generated_frame(trace), "The first token arrives after TTFT; each later one after one ITL.", "measured"
    )

frame = charts.timeline_frame(trace)
layout.chart(
    charts.timeline_chart(frame),
    frame,
    "timeline",
    "One long prefill bar, then a train of short decode bars: each decode re-reads every weight for one token.",
    "measured",
    "Timeline of passes",
)

st.subheader("Step through one pass")
k = 0
if trace.new_tokens > 1:  # a one-token run has only the prefill, and a slider needs two ends
    k = st.slider(
        "Pass", 0, trace.new_tokens - 1, 0, help="0 is the prefill; every later pass is a decode.", key="run-pass"
    )
p = trace.passes[k]
st.markdown(
    f"Pass **{k}** is a **{p.phase}** pass: {p.tokens_in} token(s) computed, {p.cache_len_before} read from the "
    f"KV cache, cache {p.cache_len_before} → {p.cache_len_after} positions ({human_bytes(p.kv_cache_bytes)}), "
    f"measured {ms(p.wall_s)}."
)
tokens = charts.step_tokens_frame(trace, k)
ui.chart(
    charts.step_tokens_chart(tokens),
    tokens,
    f"pass-{k}-tokens",
    "Orange is computed now, blue is only read from the KV cache, green is the token this pass samples.",
    "measured (the run's tokens and cache lengths)",
)
ui.table(
    charts.shapes_frame(trace, k),
    "Prefill: Q has T rows and the scores are T x T under a causal mask. Decode: Q has one row and the "
    "scores one row over the cache: nothing in the future exists to mask.",
    "the shapes of this pass, from the model's config and the measured cache length",
)
