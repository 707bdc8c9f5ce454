"""The At-scale page through AppTest, offline: every shipped config renders its three charts with sources; this
machine's last run adds its measured factor and the dashed assumption lines; hosted servers offer only the shipped
configs; a typed folder works locally and an uncached hub id is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.charts.cost import decode_median_text
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile
from explorer.scale.config import CONFIG_DIR, shipped
from explorer.ui import state as ui_state
from tests.apptest_support import keyed, navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

PAGE = "pages/at_scale.py"
CHART_NAMES = ("scale-decode-vs-context", "scale-tokens-vs-batch", "scale-memory")
SPLIT_CHART_NAMES = ("split-goodput", "split-distributions")  # issue 45, where the model fits one instance


def page_text(at: AppTest) -> str:
    return " ".join(e.value for e in [*at.caption, *at.markdown, *at.info, *at.warning])


def assert_drawn(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    labels = [b.label for b in at.main.get("download_button")]
    split = "Download data: split-goodput.csv" in labels  # the split what-if, where the model fits one instance
    names = CHART_NAMES + (SPLIT_CHART_NAMES if split else ())
    assert len(at.get("vega_lite_chart")) == len(names)
    assert all(f"Download data: {name}.csv" in labels for name in names)
    captions = " ".join(c.value for c in at.caption)
    assert "modelled" in captions and "spec" in captions


@pytest.fixture(scope="module")
def page() -> AppTest:
    return open_page(PAGE)


@pytest.mark.parametrize("key", list(shipped()))
def test_every_shipped_config_renders_offline(page: AppTest, key: str) -> None:
    at = page.selectbox(key="scale-model").set_value(key).run()
    assert_drawn(at)
    assert "No run on this machine yet" in page_text(at)
    assert [m.label for m in at.metric][:2] == ["Parameters", "Weights"]
    row, helps = shipped()[key], " ".join(m.help or "" for m in at.metric)
    assert (row.published_as if row.published_rel_tol else f"{row.published_params:,}") in helps


def test_the_must_show_scenario_reads_seed_4s_figure(page: AppTest) -> None:
    at = page.selectbox(key="scale-model").set_value("llama-3.1-8b").run()
    keyed(at.number_input, "scale-context-").set_value(1).run()
    values = {m.label: m.value for m in at.metric}
    # 223, not the back-of-envelope 209: a step gathers one row of the untied input table (the live run's convention)
    assert values["Parameters"] == "8.03 B" and values["Tokens/s ceiling"] == "223"
    # Issue 42: the familiar 209 beside it, in the first screen, not only in a grey caption and the last formula line
    assert "(209 if the 1.05 GB input table were read whole)" in [c.value for c in at.caption]
    assert "the input embedding table is gathered row by row" in page_text(at)
    # Issue 46: why not the rule of thumb, said under the ceiling, computed
    assert any(c.value.startswith("Tokens/s ceiling: 223 tokens/s, not the rule of thumb's 209") for c in at.caption)
    assert "the input embedding is a row lookup, reading one 8.19 kB row per token" in page_text(at)
    assert "KV per token" in values and values["KV per token"] == "131,072 B"


def test_a_model_that_does_not_fit_says_so_and_still_draws(page: AppTest) -> None:
    at = page.selectbox(key="scale-model").set_value("llama-3.1-70b").run()
    assert "Does not fit" in page_text(at)
    assert_drawn(at)


def test_this_machines_run_adds_its_factor_and_the_assumption_lines(
    tiny_lm: LoadedModel, cpu_figures: DeviceProfile
) -> None:
    trace = generate(tiny_lm, check_request(tiny_lm, Request("hi", 3, use_chat_template=False)), cpu_figures)
    at = open_page(PAGE, ui_state.RunResult(trace, None, "", "run 1: hi"))
    assert_drawn(at)
    text = page_text(at)
    assert "Decode ran at " in text and "x its memory floor here" in text and "assumption" in text
    assert f"A decode pass took {decode_median_text(trace)};" in text  # the decode median every page shows
    specs = [chart.proto.spec for chart in at.get("vega_lite_chart")]
    assert sum("this machine's gap (assumption)" in spec for spec in specs) == 2  # decode and batch charts
    # Issue 46: the what-if calibrated by this run's measured / floor, a column beside the modelled one
    calibrated = [df.value for df in at.dataframe if any("calibrated" in str(c) for c in df.value.columns)]
    assert len(calibrated) == 1 and list(calibrated[0]["figure"])[:2] == ["decode step", "tokens/s ceiling"]


def test_hosted_offers_only_the_shipped_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_HOSTED", "1")
    at = open_page(PAGE)
    assert_drawn(at)
    assert len(at.main.text_input) == 0 and "only the shipped configs" in page_text(at)
    assert at.selectbox(key="scale-model").options == [row.display_name for row in shipped().values()]


def test_locally_a_folder_works_and_an_offline_hub_id_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIG_DIR / "qwen2.5-0.5b.json").read_text())
    at = open_page(PAGE)
    at.main.text_input(key="scale-model-path").input(str(tmp_path)).run()
    assert_drawn(at)
    assert "494,032,768" in " ".join(m.help or "" for m in at.metric)
    at.main.text_input(key="scale-model-path").input("someone/not-cached-anywhere").run()
    assert not at.exception and len(at.error) == 1 and "hub is unreachable" in at.error[0].value
