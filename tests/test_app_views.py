"""Pages through AppTest on tiny random models: the Attention page for a 32-head model (grouped and not), every chart
of the Step and Compare pages with its PNG, SVG and CSV downloads, and presenter mode's tables and sections."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest
from transformers import AutoModelForCausalLM, LlamaConfig

from explorer.ui import state as ui_state
from explorer.ui.widgets import PRESENTER_KEY
from tests.apptest_support import navigation_like_a_server, new_app, open_page  # noqa: F401 - an autouse fixture
from tests.tiny import save_tiny_llama

HEADS = 32
HIDDEN = 128  # head_dim 4


def save_many_heads_llama(folder: Path, kv_heads: int) -> Path:
    """The tiny Llama (and its byte tokenizer) with 32 query heads of dimension 4 over `kv_heads` KV heads."""
    save_tiny_llama(folder)
    config = LlamaConfig.from_pretrained(folder)
    config.update({"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": kv_heads})
    config.head_dim = HIDDEN // HEADS
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def run_model(at: AppTest, model: str, prompt: str, max_new_tokens: int = 4) -> AppTest:
    """A run from the sidebar on `model` (a folder), as a visitor would start it."""
    at.sidebar.text_area(key="sidebar-prompt").input(prompt)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(max_new_tokens)
    next(t for t in at.sidebar.text_input if t.label == "Model").input(model)
    next(b for b in at.sidebar.button if b.label == "Run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at


def page_text(at: AppTest) -> str:
    """Everything a page says in words: markdown, captions, notes, expander titles and picker options."""
    parts = [e.value for kind in (at.markdown, at.caption, at.info, at.text) for e in kind]
    parts += [e.proto.label for e in at.main.get("expander")]
    parts += [o for box in at.selectbox for o in box.options]
    return "\n".join(parts)


@pytest.mark.parametrize("kv_heads", [8, HEADS])
def test_attention_page_shows_all_32_heads_and_speaks_of_gqa_only_when_heads_share(
    tmp_path: Path, kv_heads: int
) -> None:
    folder = save_many_heads_llama(tmp_path / f"llama-32-heads-{kv_heads}-kv", kv_heads)
    at = run_model(new_app(), str(folder), "Thirty-two heads, one page.")
    result = at.session_state[ui_state.RUN]
    assert (result.trace.model.heads, result.trace.model.kv_heads) == (HEADS, kv_heads)
    assert result.attention is not None and result.attention.heads == HEADS
    at.switch_page("pages/attention.py").run()
    assert not at.exception and not at.error, at.exception
    assert any(f"All {HEADS} heads of layer" in e.proto.label for e in at.main.get("expander"))
    heads_chart = next(c for c in at.get("vega_lite_chart") if '"facet"' in c.proto.spec)
    for head in (0, HEADS - 1):
        assert f"head {head}" in heads_chart.proto.spec
    text = page_text(at)
    if kv_heads < HEADS:
        assert f"under grouped-query attention {HEADS // kv_heads} query heads read each KV head" in text
        assert f"head {HEADS - 1} (reads KV head {kv_heads - 1})" in text
    else:
        assert "grouped-query" not in text.lower() and "KV head" not in text
        at.switch_page("pages/kv_cache.py").run()
        assert not at.exception and "grouped-query" not in page_text(at).lower()


def chart_downloads(at: AppTest) -> tuple[int, dict[str, int]]:
    """(charts on the page, how many download buttons of each kind its main area offers)."""
    labels = [b.label for b in at.main.get("download_button")]
    kinds = {"csv": sum(label.startswith("Download data:") for label in labels)}
    kinds |= {kind: labels.count(kind.upper()) for kind in ("png", "svg")}
    return len(at.get("vega_lite_chart")), kinds


@pytest.fixture(scope="module")
def tiny_app(tiny_llama_dir: Path) -> AppTest:
    """The app with the tiny model as the sidebar's choice and two finished runs on it."""
    at = new_app()
    run_model(at, str(tiny_llama_dir), "first run", max_new_tokens=2)
    return run_model(at, str(tiny_llama_dir), "a second, longer prompt than the first", max_new_tokens=3)


def test_every_chart_of_the_compare_page_offers_png_svg_and_csv(tiny_app: AppTest) -> None:
    at = tiny_app.switch_page("pages/compare.py").run()
    assert not at.exception and not at.error
    charts, downloads = chart_downloads(at)
    assert charts >= 1 and downloads == {"csv": charts, "png": charts, "svg": charts}


def test_every_chart_of_the_step_page_offers_png_svg_and_csv(tiny_app: AppTest) -> None:
    at = tiny_app.switch_page("pages/step.py").run()
    at.text_input(key="step-prompt").input("Step me")
    at.button(key="step-prefill").click().run()
    at.button(key="step-next").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    charts, downloads = chart_downloads(at)
    assert charts >= 3 and downloads == {"csv": charts, "png": charts, "svg": charts}  # attention, KV, times
    at.button(key="step-reset").click().run()


def test_presenter_mode_shows_large_tables_and_collapses_secondary_sections(tiny_app: AppTest) -> None:
    at = tiny_app.switch_page("pages/kv_cache.py").run()
    assert len(at.dataframe) == 1 and not at.table  # a laptop: the scrollable grid
    expanders = at.main.get("expander")
    assert {"Layer by layer", "Next to the weights"} <= {e.proto.label for e in expanders}  # else all() holds on none
    assert all(e.proto.expanded for e in expanders)
    at.sidebar.toggle(key=PRESENTER_KEY).set_value(True).run()
    try:
        assert not at.exception
        assert len(at.table) == 1 and not at.dataframe  # a projector: a static table the stylesheet enlarges
        sections = [e.proto.label for e in at.main.get("expander")]
        assert {"Layer by layer", "Next to the weights"} <= set(sections)
        assert not any(e.proto.expanded for e in at.main.get("expander"))
        at.switch_page("pages/attention.py").run()
        assert any(e.proto.label.startswith("All ") and not e.proto.expanded for e in at.main.get("expander"))
        at.switch_page("pages/by_hand.py").run()
        assert len(at.table) == 3  # two worked rows and the shapes beside the run's
        assert [d.key for d in at.dataframe] == ["by-hand-prefill-0", "by-hand-decode-0"]  # only the vector editors
    finally:
        at.sidebar.toggle(key=PRESENTER_KEY).set_value(False).run()


def test_the_latency_page_computes_what_a_decode_gap_waits_on_instead_of_asserting_a_trend(tiny_app: AppTest) -> None:
    from explorer.charts.latency import decode_bytes_sentence

    at = tiny_app.switch_page("pages/latency.py").run()
    assert not at.exception and not at.error
    text = page_text(at)
    sentence = decode_bytes_sentence(at.session_state[ui_state.RUN].trace)
    assert text.count(sentence) == 2  # under the ITL chart and under the runs compared
    assert "roughly flat" not in text and "barely depend" not in text
    # Issue 46: the run's decode passes together, as a share of this device's measured read bandwidth
    from explorer.core.floor_share import run_decode_share

    share = run_decode_share(at.session_state[ui_state.RUN].trace)
    assert share is not None and "of this device's measured read bandwidth" in share.sentence()
    said = share.sentence()
    assert said[:1].upper() + said[1:] in text


def test_the_endpoint_trade_off_says_an_slo_caps_goodput_not_throughput() -> None:
    from explorer.ui.endpoint_view import TRADEOFF_CAPTION

    assert "caps goodput" in TRADEOFF_CAPTION and "until the p99 latency crosses an SLO" not in TRADEOFF_CAPTION


def test_the_kv_page_says_what_a_latent_cache_holds(tmp_path: Path) -> None:
    """A tiny DeepSeek-V3 from the sidebar: the KV cache page draws, its formula counts the latent and the rotary
    key that transformers caches, and says so in words."""
    from tests.tiny_zoo import BY_NAME, save_tiny

    folder = save_tiny(BY_NAME["deepseek-v3"], tmp_path / "deepseek")
    at = run_model(new_app(), str(folder), "latent attention", max_new_tokens=2)
    at = at.switch_page("pages/kv_cache.py").run()
    assert not at.exception and not at.error
    code = " ".join(c.value for c in at.code)
    assert "(12 + 8 values) × 3 layers × 4 B" in code and "compressed latent" in code
    assert "Multi-head latent attention" in page_text(at)
