"""The Cost page through AppTest: any pass's operator table (by kind, per layer, the sum beside the pass's totals) and,
once a pass is profiled, its operator groups modelled beside measured."""

from __future__ import annotations

from pathlib import Path

from explorer.core.engine import Request, check_request, generate
from explorer.core.profiler import profile_pass
from explorer.core.trace import DeviceProfile
from explorer.models.loading import load_model
from explorer.ui import state as ui_state
from explorer.ui.state import PROFILE
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.tiny_zoo import BY_NAME, save_tiny

HAND = DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")


def test_the_cost_page_tables_any_pass_by_operator_and_the_profiled_pass_beside_its_floor(tmp_path: Path) -> None:
    lm = load_model(str(save_tiny(BY_NAME["mixtral"], tmp_path / "mixtral")), device="cpu")
    request = Request("a prompt of some tokens", max_new_tokens=3, use_chat_template=False)
    trace = generate(lm, check_request(lm, request), HAND)
    result = ui_state.RunResult(trace=trace, attention=None, attention_note="not requested", label="moe")
    at = open_page("pages/cost.py", result)
    assert not at.error, [e.value for e in at.error]
    assert "Operator by operator (modelled)" in [h.value for h in at.subheader]
    at.selectbox(key="operators-pass").set_value(0).run()
    at.selectbox(key="operators-layer").set_value(1).run()
    assert not at.exception and not at.error
    assert any("Pass 0:" in m.value for m in at.markdown)
    kinds = next(d.value for d in at.dataframe if "operator kind" in d.value.columns)
    assert "experts routed to" in kinds["operator kind"].tolist()
    assert int(kinds["FLOPs"].sum()) == trace.passes[0].cost.flops

    at.session_state[PROFILE] = ("moe", profile_pass(lm, trace, 1))
    at.run()
    assert not at.exception and not at.error
    assert any("modelled floor beside measured time" in m.value for m in at.markdown)
    assert any("Which operators each profiler group holds" in c.value for c in at.caption)
