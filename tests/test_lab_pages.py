"""The No-cache and Batching pages through AppTest on the tiny model: the modelled estimate shown before a run, the
run, every chart with its CSV, PNG and SVG downloads, the growth claim held to its margin, and one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile
from explorer.ui import labs
from explorer.ui import state as ui_state
from tests.apptest_support import labelled, navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture


@pytest.fixture
def lab_app(tiny_llama_dir: Path) -> AppTest:
    """The app with the tiny model as the sidebar's last choice (the labs run on it) and no run yet."""
    at = new_app()
    at.session_state[ui_state.LAST_INPUTS] = ui_state.RunInputs(model=str(tiny_llama_dir), device="cpu")
    return at


@pytest.fixture
def with_a_run(lab_app: AppTest, tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> AppTest:
    """As if the sidebar had run the tiny model once: its figures are what the estimates are modelled from."""
    request = Request("hi", max_new_tokens=2, use_chat_template=False)
    trace = generate(tiny_lm, check_request(tiny_lm, request), cpu_figures)
    lab_app.session_state[ui_state.RUN] = ui_state.RunResult(trace, None, "", "run 1: hi")
    return lab_app


def captions(at: AppTest) -> str:
    return " ".join(c.value for c in at.caption)


def assert_every_chart_has_its_downloads(at: AppTest, charts: int) -> None:
    assert len(at.get("vega_lite_chart")) == charts
    labels = [b.label for b in at.main.get("download_button")]
    assert labels.count("PNG") == labels.count("SVG") == charts
    assert sum(label.startswith("Download data:") for label in labels) >= charts  # and a CSV beside each


def labs_bundled_estimate_s() -> float:
    from explorer.labs import bundled

    return bundled.read("nocache").result.estimate_s


def test_the_no_cache_page_estimates_then_runs(with_a_run: AppTest) -> None:
    at = with_a_run.switch_page("pages/nocache.py").run()
    # The bundled result's settings: its own estimate, the one beside its measured time (one figure, not two).
    shown = labs_bundled_estimate_s()
    assert f"For these settings the naive loop was modelled at ≈{shown:.1f} s" in captions(at)
    assert {m.label: m.value for m in at.metric}["Naive loop, estimated"] == f"{shown:.1f} s"
    labelled(at.text_input, "Prompt (no chat template)").input("hello there").run()
    assert "Estimated before running" in captions(at) and "of the 300 s budget" in captions(at)
    assert labelled(at.number_input, "New tokens").min == 3
    labelled(at.number_input, "New tokens").set_value(20)
    at.button(key="nocache-run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert_every_chart_has_its_downloads(at, 4)
    labels = [m.label for m in at.metric]
    assert at.metric[0].value == "yes" and "Naive loop, estimated" in labels
    sentence = " ".join(m.value for m in at.markdown)
    assert "first 8 decode steps" in sentence and "over 2x the cached growth and over 1 ms" in sentence
    assert any("bytes moved" in d.value.columns for d in at.dataframe)  # the per-step table, modelled bytes
    result = at.session_state[labs.NOCACHE_RESULT]
    shown = captions(at)
    assert f"took {result.cached_scale:.2f}x their floor with the cache" in shown and "straight-line fit" not in shown
    assert result.estimate_note in shown
    kept = at.session_state[labs.NOCACHE_RESULT]
    at.switch_page("pages/batching.py").run().switch_page("pages/nocache.py").run()
    assert at.session_state[labs.NOCACHE_RESULT] is kept  # a view change never re-runs it


def test_a_short_no_cache_run_does_not_claim_a_first_8_last_8_comparison(lab_app: AppTest) -> None:
    at = lab_app.switch_page("pages/nocache.py").run()
    assert "For these settings the naive loop was modelled" in captions(at)  # the bundled result's own estimate
    labelled(at.number_input, "New tokens").set_value(5).run()
    assert "run the model once from the sidebar" in captions(at) and any("Run both loops" in i.value for i in at.info)
    at.button(key="nocache-run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sentence = " ".join(m.value for m in at.markdown)
    assert "only 4 decode steps" in sentence and "first 8 decode steps" not in sentence


def test_the_no_cache_page_refuses_past_the_context_in_one_line(with_a_run: AppTest) -> None:
    at = with_a_run.switch_page("pages/nocache.py").run()
    labelled(at.number_input, "New tokens").set_value(300)  # the tiny model's context is 256 tokens
    assert "As set, this would be refused" in captions(at.run())
    at.button(key="nocache-run").click().run()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "context" in errors[0] and labs.NOCACHE_RESULT not in at.session_state


def test_the_batching_page_shows_caps_and_estimate_then_runs(with_a_run: AppTest) -> None:
    at = with_a_run.switch_page("pages/batching.py").run()
    labelled(at.text_input, "Batch sizes").input("1,0")
    at.button(key="batch-run").click().run()
    refusals = [e.value for e in at.error]
    assert len(refusals) == 1 and "between 1 and" in refusals[0] and not at.exception
    labelled(at.text_input, "Batch sizes").input("1,2,4")
    labelled(at.number_input, "Prompt tokens").set_value(8)
    labelled(at.number_input, "New tokens").set_value(4)
    before = captions(at.run())
    assert "at most 2.00 GB" in before and "at most 600 s" in before
    assert "Estimated before running" in before and "4 solo reference run(s) and 3 batch size(s)" in before
    at.button(key="batch-run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert_every_chart_has_its_downloads(at, 4)
    assert at.metric[0].value == "yes" and not at.warning  # every request's tokens equal its solo tokens
    assert len(at.session_state[labs.BATCH_RESULT].runs) == 3


def test_a_batched_token_that_differs_is_shown_with_its_reason() -> None:
    def page() -> None:
        from types import SimpleNamespace

        from explorer.ui import labs  # AppTest runs this function's source alone: it imports what it uses

        note = "batch 4, request 2: token 3 is 7 'a' in the batch but 9 'b' alone. Same dtype, other kernel shapes."
        labs.batch_mismatches(SimpleNamespace(runs=[SimpleNamespace(mismatch_notes=(note,))]))

    at = AppTest.from_function(page).run()
    assert len(at.warning) == 1 and "1 batched request(s) differ" in at.warning[0].value
    assert [t.value for t in at.text] == [
        "batch 4, request 2: token 3 is 7 'a' in the batch but 9 'b' alone. Same dtype, other kernel shapes."
    ]


def test_the_batching_page_computes_its_claim_and_names_the_figures_it_used(with_a_run: AppTest) -> None:
    """The bundled result's step grew 56 → 97 ms from B = 1 to 2: the page says so from the numbers, never "barely
    slows", and names the recording's device figures beside this session's live run's."""
    from explorer.labs import bundled

    at = with_a_run.switch_page("pages/batching.py").run()
    recorded = bundled.read("batch").result
    runs = sorted(recorded.runs, key=lambda run: run.batch_size)
    text = " ".join(m.value for m in at.markdown) + captions(at)
    assert recorded.step_sentence() in text and "barely slows" not in text
    assert f"({runs[0].median_step_s * 1e3:,.0f} → {runs[1].median_step_s * 1e3:,.0f} ms)" in recorded.step_sentence()
    live = at.session_state[ui_state.RUN].trace.device
    assert f"the recording's, taken when it was made at {recorded.device.measured_at}" in captions(at)
    assert f"This session's live run uses ridge {live.ridge_point_flops_per_byte:,.1f} FLOP/B" in captions(at)
