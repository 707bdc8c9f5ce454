"""The app through AppTest: a run from the sidebar, every page from its trace, views that never call the model."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from explorer import ui
from explorer.core.device import FiguresStore
from explorer.ui import state as ui_state
from explorer.ui.device_link import device_link
from tests.apptest_support import (  # noqa: F401 - an autouse fixture
    navigation_like_a_server,
    new_app,
    open_page,
    release_once_someone_waits,
)
from tests.owner_support import OwnersOfATest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    "pages/run.py",
    "pages/attention.py",
    "pages/kv_cache.py",
    "pages/cost.py",
    "pages/latency.py",
    "pages/by_hand.py",
]
HOSTILE = "<img src=x onerror=alert(1)> **bold** <script>alert(2)</script>"


class ForwardCounter:
    """Counts real forward passes of the cached model: the proof that a view change did not run it."""

    def __init__(self) -> None:
        self.calls = 0
        self.handle = torch.nn.modules.module.register_module_forward_hook(self.count)  # any model, any session

    def count(self, *_: object) -> None:
        self.calls += 1

    def close(self) -> None:
        self.handle.remove()


def run_from_sidebar(at: AppTest, prompt: str | None = None, max_new_tokens: int = 8) -> AppTest:
    if prompt is not None:
        at.sidebar.text_area(key="sidebar-prompt").input(prompt)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(max_new_tokens)
    at.sidebar.button(key="sidebar-run").click().run()
    assert not at.exception, at.exception
    return at


def assert_page_renders(at: AppTest, page: str) -> None:
    at.switch_page(page).run()
    assert not at.exception, f"{page}: {at.exception}"
    assert not at.error, f"{page}: {[e.value for e in at.error]}"
    assert len(at.get("vega_lite_chart")) >= 1, f"{page} drew no chart"
    captions = " ".join(c.value for c in at.caption)
    assert any(word in captions for word in ("measured", "modelled", "spec")), f"{page} names no source"


@dataclass(frozen=True)
class FirstRun:
    """One real run with the default prompt, and what its page showed right after it."""

    result: ui_state.RunResult
    metric_labels: list[str]
    texts: list[str]


@pytest.fixture(scope="module")
def first_run() -> FirstRun:
    at = run_from_sidebar(new_app())
    return FirstRun(at.session_state[ui_state.RUN], [m.label for m in at.metric], [t.value for t in at.text])


@pytest.fixture
def ran(first_run: FirstRun) -> AppTest:
    """A new visitor's app holding that run, on its first page: every test starts from the same view, whatever the
    tests before it clicked (the run itself is made once per module)."""
    return open_page("pages/run.py", first_run.result, timeout_s=180)


def test_app_starts_without_a_run() -> None:
    at = new_app()
    assert any("No run yet" in i.value for i in at.info)
    assert at.sidebar.text_area(key="sidebar-prompt").value == ui_state.DEFAULT_PROMPT


def test_a_run_from_the_sidebar_produces_a_trace(first_run: FirstRun) -> None:
    result = first_run.result
    trace = result.trace
    assert trace.prompt_text == ui_state.DEFAULT_PROMPT and 1 <= trace.new_tokens <= 8
    assert trace.passes[0].phase == "prefill" and result.attention is not None
    assert first_run.metric_labels[:3] == ["Prompt tokens", "New tokens", "TTFT"]
    assert any(trace.passes[0].token_text.strip() in t for t in first_run.texts)  # the live stream's final state


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_its_charts_and_captions(ran: AppTest, page: str) -> None:
    assert_page_renders(ran, page)


def test_a_one_token_run_renders_every_page() -> None:
    at = run_from_sidebar(new_app(), max_new_tokens=1)
    assert at.session_state[ui_state.RUN].trace.new_tokens == 1
    for page in [p for p in PAGES if p != "pages/latency.py"]:
        assert_page_renders(at, page)
    at.switch_page("pages/latency.py").run()  # one token has a TTFT but no inter-token latency to chart
    assert not at.exception and not at.error
    assert any("no inter-token latency" in i.value for i in at.info)


def test_downloads_follow_the_run_that_just_finished() -> None:
    at = new_app()
    assert not at.get("download_button")
    run_from_sidebar(at, prompt="first prompt", max_new_tokens=2)
    labels = [b.label for b in at.sidebar.get("download_button")]
    assert labels == [
        "Download trace (JSON)",
        "Download passes (CSV)",
        "Download timeline (Perfetto JSON)",
        "Download recording (.pdx)",
    ]  # drawn in the very script run that ran
    run_from_sidebar(at, prompt="second prompt", max_new_tokens=2)
    assert at.session_state[ui_state.RUN].trace.prompt_text == "second prompt"
    assert [r.trace.prompt_text for r in at.session_state[ui_state.HISTORY]] == ["first prompt"]
    assert at.session_state[ui_state.HISTORY][0].attention is None  # earlier runs drop their maps


def test_changing_views_never_calls_the_model(ran: AppTest) -> None:
    counter = ForwardCounter()
    try:
        ran.switch_page("pages/run.py").run()
        ran.slider(key="run-pass").set_value(ran.session_state[ui_state.RUN].trace.new_tokens - 1).run()
        ran.switch_page("pages/attention.py").run()
        for box in ran.selectbox:
            if len(box.options) > 1:
                box.set_value(box.options[-1]).run()
        for page in PAGES:
            ran.switch_page(page).run()
        for number in ran.number_input:
            number.increment().run()
        assert not ran.exception
        assert counter.calls == 0
    finally:
        counter.close()


def test_empty_prompt_shows_an_error_and_starts_no_run() -> None:
    at = new_app()
    counter = ForwardCounter()
    try:
        run_from_sidebar(at, prompt="   ")
        assert any("prompt is empty" in e.value for e in at.error)
        assert ui_state.RUN not in at.session_state
        assert counter.calls == 0
    finally:
        counter.close()


def test_a_bad_model_is_one_line_and_keeps_the_last_run(ran: AppTest) -> None:
    before = ran.session_state[ui_state.RUN]
    ran.sidebar.text_input(key="sidebar-model").input("./no/such/model")
    ran.sidebar.button(key="sidebar-run").click().run()
    errors = [e.value for e in ran.error]
    assert len(errors) == 1 and "does not exist" in errors[0] and "\n" not in errors[0]
    assert "\\." in errors[0]  # the typed name is escaped: markdown in it is shown, not interpreted
    assert ran.session_state[ui_state.RUN] is before  # nothing lost
    ran.sidebar.text_input(key="sidebar-model").input("embedded").run()


def test_hostile_prompt_is_shown_as_text_on_every_page() -> None:
    at = run_from_sidebar(new_app(), prompt=HOSTILE, max_new_tokens=4)
    assert at.session_state[ui_state.RUN].trace.prompt_text == HOSTILE
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception
        for element in at.markdown:  # markdown is where HTML or markup could be interpreted
            assert "<img" not in element.value and "<script" not in element.value and "**bold**" not in element.value
    at.switch_page("pages/run.py").run()
    assert HOSTILE in [c.value for c in at.code]  # the prompt as typed, as plain text


def test_no_page_or_module_allows_raw_html() -> None:
    for path in [ROOT / "app.py", *ROOT.glob("pages/*.py"), *ROOT.glob("explorer/**/*.py")]:
        assert "unsafe_allow_html" not in path.read_text(), path


def test_only_the_ui_bridge_imports_streamlit() -> None:
    importers = set()
    for path in ROOT.glob("explorer/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "streamlit" or n.startswith("streamlit.") for n in names):
                importers.add(path.relative_to(ROOT).as_posix())
    assert importers and all(path.startswith("explorer/ui/") for path in importers)
    # every module outside explorer/ui imports with streamlit made unimportable
    code = (
        "import sys, importlib, pkgutil, explorer; sys.modules['streamlit'] = None; "
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(explorer.__path__, 'explorer.') "
        "if not m.name.startswith('explorer.ui') and m.name != 'explorer.__main__']"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr


def test_a_second_session_waits_for_the_device(fresh_device_owner: OwnersOfATest) -> None:
    at = new_app()
    device_link()  # the test's owner, started now
    queue = fresh_device_owner.latest.queue
    other = queue.enter("run", owner="other session")
    assert queue.wait(other, 30)
    releaser = release_once_someone_waits(queue, other)  # the "other session" finishes once this one waits
    try:
        run_from_sidebar(at, max_new_tokens=2)
    finally:
        releaser.join()
    assert any("Waited" in c.value and "other sessions used it" in c.value for c in at.caption)
    assert at.session_state[ui_state.RUN].trace.new_tokens <= 2


def test_every_chart_offers_png_and_svg(ran: AppTest) -> None:
    for page in PAGES:
        ran.switch_page(page).run()
        labels = [b.label for b in ran.main.get("download_button")]
        assert labels.count("PNG") == labels.count("SVG") == len(ran.get("vega_lite_chart")), page


def test_presenter_mode_sizes_every_chart_from_one_theme(ran: AppTest) -> None:
    import json

    from explorer.charts import theme

    ran.sidebar.toggle(key="explorer_presenter_toggle").set_value(True).run()
    for page in ["pages/cost.py", "pages/latency.py"]:
        ran.switch_page(page).run()
        assert not ran.exception
        for element in ran.get("vega_lite_chart"):
            config = json.loads(element.proto.spec)["config"]
            assert config["axis"]["labelFontSize"] == theme.PRESENTER.label_px >= 18
            assert config["axis"]["titleFontSize"] >= 18 and config["text"]["fontSize"] >= 18
        assert any(not e.proto.expanded for e in ran.get("expander"))  # secondary sections collapsed
    ran.sidebar.toggle(key="explorer_presenter_toggle").set_value(False).run()
    element = ran.get("vega_lite_chart")[0]
    assert json.loads(element.proto.spec)["config"]["axis"]["labelFontSize"] == theme.NORMAL.label_px


def test_compare_two_runs() -> None:
    at = run_from_sidebar(new_app(), prompt="short", max_new_tokens=2)
    at.switch_page("pages/compare.py").run()
    assert any("Only one run" in i.value for i in at.info)
    run_from_sidebar(at, prompt="a somewhat longer prompt than before", max_new_tokens=3)
    at.switch_page("pages/compare.py").run()
    assert not at.exception and not at.error
    assert len(at.get("vega_lite_chart")) == 1 and len(at.dataframe) == 1
    assert set(at.dataframe[0].value.columns) >= {"figure", *[s.label for s in [at.session_state[ui_state.RUN]]]}


def test_the_cost_page_profiles_a_pass_on_request(ran: AppTest) -> None:
    ran.switch_page("pages/cost.py").run()
    charts_before = len(ran.get("vega_lite_chart"))
    assert any("Profile this pass" in i.value for i in ran.info)
    next(b for b in ran.button if b.label == "Profile this pass").click().run()
    assert not ran.exception and not ran.error, [e.value for e in ran.error]
    assert len(ran.get("vega_lite_chart")) == charts_before + 2  # the profile, and its groups modelled beside measured
    labels = [m.label for m in ran.metric]
    assert {"Profiled wall", "Without the profiler", "In the run"} <= set(labels)
    profile = ran.session_state["explorer_profile"][1]
    groups = {g.name: g.self_s for g in profile.groups}
    assert any("KV" in name and self_s > 0 for name, self_s in groups.items())
    assert sum(groups.values()) <= profile.wall_s_profiled


def test_the_cost_page_states_bounds_from_intensity_for_a_short_raw_prompt() -> None:
    at = new_app()
    next(t for t in at.sidebar.toggle if t.label == "Use the chat template").set_value(False)
    run_from_sidebar(at, prompt="The old lighthouse keeper counted every passing ship", max_new_tokens=3)
    trace = at.session_state[ui_state.RUN].trace
    assert not trace.chat_template_used and trace.prompt_len <= 12  # a short raw prompt, about 9 tokens
    at.switch_page("pages/cost.py").run()
    text = " ".join(m.value for m in at.markdown)
    prefill = trace.prefill.cost
    right_of_ridge = prefill.arithmetic_intensity >= trace.device.ridge_point_flops_per_byte
    sentence = text.split("The prefill (pass 0)")[1].split("by the model")[0]  # the prefill's bound, as the page says
    assert ("compute-bound" in sentence) == right_of_ridge and ("memory-bound" in sentence) != right_of_ridge
    assert f"This prompt has {trace.prompt_len} tokens" in text  # and where the compute-bound length lies


def test_repeated_figures_show_their_min_max_and_the_slo_table_uses_them(tiny_llama_dir: Path) -> None:
    at = new_app()
    at.sidebar.text_input(key="sidebar-model").input(str(tiny_llama_dir))
    at.sidebar.selectbox(key="sidebar-device").set_value("cpu")
    at.sidebar.number_input(key="sidebar-repeats").set_value(3)  # Repeats
    run_from_sidebar(at, prompt="hello there", max_new_tokens=6)
    assert not at.error, [e.value for e in at.error]
    trace = at.session_state[ui_state.RUN].trace
    assert trace.repeat_count == 3
    at.switch_page("pages/latency.py").run()
    assert not at.exception and not at.error
    shown = {m.label: m for m in at.metric}
    for label in ["TTFT", "E2E", "ITL p50", "ITL p90", "ITL p99", "Decode tok/s"]:
        assert " – " in shown[label].proto.delta, label  # min–max in plain sight, not only on hover
        assert shown[label].proto.delta_description == "min–max of 3"
    table = at.dataframe[0].value.set_index("metric")
    for metric, figure in [("TTFT", "ttft_s"), ("ITL p50", "itl_p50_s"), ("ITL p99", "itl_p99_s")]:
        spread = getattr(trace.spreads, figure)
        assert table.loc[metric, "value (ms)"] == pytest.approx(spread.median * 1e3, rel=1e-3)  # its own figure
        assert table.loc[metric, "min (ms)"] == pytest.approx(spread.low * 1e3, rel=1e-3)  # shown to 4 digits
    assert shown["ITL p50"].value == ui.widgets.short_time(trace.spreads.itl_p50_s.median)


def test_remeasuring_without_a_run_measures_the_sidebars_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from explorer.core.errors import BadInput
    from explorer.models.loading import resolve_device

    seen: list[tuple[str, str]] = []

    def figures(_store: object, kind: str, dtype: str, fresh: bool = False, progress: object = None) -> object:
        seen.append((kind, dtype))
        raise BadInput("stop here")  # what was asked for is all this test needs

    monkeypatch.setattr(FiguresStore, "get", figures)  # the owner's store, in a thread of this process
    at = new_app()
    at.sidebar.selectbox(key="sidebar-dtype").set_value("bfloat16")
    run_from_sidebar(at, prompt="   ")  # commits the form; an empty prompt runs nothing
    next(b for b in at.sidebar.button if b.label == "Re-measure device figures").click().run()
    assert not at.exception and ui_state.RUN not in at.session_state
    assert seen == [(resolve_device("auto").type, "bfloat16")]
    assert [e.value for e in at.error] == ["stop here"]
