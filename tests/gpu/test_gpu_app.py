"""The app on `cuda` through AppTest: a run from the sidebar with the Device box set to cuda, then every page."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit", reason="GPU APP TEST SKIPPED: streamlit is not installed in this GPU image")

from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.gpu import requires_cuda
from tests.test_app import PAGES, assert_page_renders, run_from_sidebar

pytestmark = requires_cuda


def test_the_app_runs_on_cuda_and_every_page_renders(gpu_model_name: str) -> None:
    at = new_app()
    at.sidebar.selectbox(key="sidebar-device").set_value("cuda")
    at.sidebar.text_input(key="sidebar-model").input(gpu_model_name)  # the embedded model, or its shape without it
    run_from_sidebar(at, max_new_tokens=8)
    assert not at.error, [e.value for e in at.error]
    trace = at.session_state[ui_state.RUN].trace
    assert trace.device.kind == "cuda" and trace.model.device == "cuda"
    assert trace.device.read_bandwidth_bytes_per_s is not None
    for page in PAGES:
        assert_page_renders(at, page)
    at.switch_page("pages/cost.py").run()
    figures = set().union(*(set(frame.value["figure"]) for frame in at.dataframe if "figure" in frame.value))
    assert {"read bandwidth (weights, KV cache reads)", "copy bandwidth (KV cache writes)"} <= figures
