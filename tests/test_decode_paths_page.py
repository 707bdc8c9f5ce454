"""The Cost page's decode-path comparison: the run's request decoded on every path this device offers, on request,
each path's median decode pass against its weight-read floor; on a CPU it says graphs need CUDA."""

from __future__ import annotations

import pytest

from explorer.charts import decode_paths as charts
from explorer.core.engine import Request, check_request, generate
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile
from explorer.labs.decode_paths import compare_decode_paths
from explorer.ui import state as ui_state
from explorer.ui.decode_paths_view import RUN_KEY
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture


def test_the_cost_page_decodes_the_run_on_each_path_on_request(
    real_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    request = Request("Name a colour.", max_new_tokens=4, stop_at_eos=False)
    trace = generate(real_lm, check_request(real_lm, request), cpu_figures)
    result = ui_state.RunResult(trace, None, "", "run 1: Name a colour.")
    at = open_page("pages/cost.py", result, timeout_s=240)
    captions = " ".join(c.value for c in at.caption)
    assert "CUDA graphs need a CUDA GPU: this run is on the CPU" in captions
    assert any("Decode this request on each path" in i.value for i in at.info)
    charts_before = len(at.get("vega_lite_chart"))
    at.button(key=RUN_KEY).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(at.get("vega_lite_chart")) == charts_before + 1
    label, traces = at.session_state[ui_state.DECODE_PATHS]
    assert label == result.label and [t.decode_path for t in traces] == ["eager", "static"]
    assert all(t.generated_token_ids == trace.generated_token_ids for t in traces)
    sentence = " ".join(c.value for c in at.caption)
    assert "eager (DynamicCache): " in sentence and "static cache: " in sentence and "weight-read floor" in sentence


def test_the_comparison_refuses_a_run_of_another_model_and_says_what_changed(
    tiny_lm: LoadedModel, real_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    trace = generate(tiny_lm, check_request(tiny_lm, Request("abc", max_new_tokens=3)), cpu_figures)
    with pytest.raises(BadInput, match="another model"):
        compare_decode_paths(real_lm, cpu_figures, trace)
    traces = compare_decode_paths(tiny_lm, cpu_figures, trace)
    frame = charts.decode_paths_frame(traces)
    assert list(frame["decode_path"]) == ["eager", "static"] and frame["same_tokens_as_first"].all()
    for row in frame.itertuples():  # the segments and the overhead add up to the measured pass
        parts = row.weight_read_ms + row.kv_ms + row.compute_not_hidden_ms + row.overhead_ms
        assert parts == pytest.approx(max(row.wall_ms, parts - row.overhead_ms))
    sentence = charts.decode_paths_sentence(frame)
    eager = frame.iloc[0]
    assert f"eager (DynamicCache): {eager.wall_ms:.2f} ms a token, {eager.times_weight_floor:.1f}×" in sentence
