"""The Cost page through AppTest: it leads with each phase's time per token, overhead's share and the model's floor,
and every section that shows a decode pass starts from the same one (the median measured pass)."""

from __future__ import annotations

import json

from explorer.charts.cost import median_decode_index
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.rendered_text import walk


def test_the_cost_page_leads_with_time_per_token_and_keeps_one_default_decode_pass(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    request = Request("a prompt of some tokens", max_new_tokens=6, use_chat_template=False)
    trace = generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)
    at = open_page("pages/cost.py", ui_state.RunResult(trace, None, "", "run 1: tokens"))
    assert not at.error, [e.value for e in at.error]
    assert at.caption[0].value.startswith(f"A prefill: {trace.prompt_len} tokens in ")  # the page's first line
    assert "a token; a decode pass: " in at.caption[0].value
    assert f" (measured, median of {len(trace.decodes)})." in at.caption[0].value
    text = [m.value for m in at.markdown]
    why = next(i for i, t in enumerate(text) if t.startswith("Per token, a decode pass"))
    assert text[why + 1].startswith("Overhead, the measured time the roofline does not explain, is ")
    assert "That is the model's floor" in text[why + 2]
    index = median_decode_index(trace)
    assert index is not None
    for key in ("utilisation-pass", "profile-pass", "operators-pass"):
        assert at.selectbox(key=key).value == index, key
    # Issue 42: its bound by its intensity, the page's clinching line, titles the roofline beside the time split (the
    # second chart, in the main chart's slot), not below the fold
    intensity = trace.passes[index].cost.arithmetic_intensity
    line = f"Decode (pass {index}): {intensity:,.2f} FLOP per byte against a ridge of "
    # on a laptop, where the explanations and the slider come before the charts, the first line says it too
    assert line in at.caption[0].value and f"{trace.passes[index].cost.bound}-bound (modelled)." in at.caption[0].value
    main = at.main.children[next(k for k, b in at.main.children.items() if getattr(b, "key", None) == "main-chart")]
    charts = [json.loads(e.proto.spec) for e in walk(main) if getattr(e, "type", None) == "vega_lite_chart"]
    assert len(charts) == 2 and "time (ms)" in json.dumps(charts[0])
    said = " ".join(charts[1]["title"]["text"])
    assert said.startswith(line) and said.endswith(f"{trace.passes[index].cost.bound}-bound (modelled).")
    assert any(f"Pass {index}:" in c.value for c in at.caption)  # its KV term written out
    # Issue 46: the median decode pass and the prefill as shares of the device's measured figures, the chart with the
    # published references, and which peaks the roofline divides by
    assert any(
        t.startswith(f"Decode pass {index} read ") and "of this device's measured read bandwidth" in t for t in text
    )
    assert any(t.startswith("Prefill (pass 0) computed ") and "measured matmul peak" in t for t in text)
    assert any(t.startswith("The roofline here divides by the ") and "A CPU has no datasheet" in t for t in text)
    shown = [json.loads(e.proto.spec) for e in walk(at.main) if getattr(e, "type", None) == "vega_lite_chart"]
    assert any("(of the measured peak)" in json.dumps(spec) for spec in shown)  # the data travels as Arrow
