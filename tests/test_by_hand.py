"""The worked attention head: exact arithmetic, the printed rows, the decode reusing the prefill's cached keys and
values, edits, the real shapes, and the page."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import altair as alt
import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from explorer.charts import by_hand as charts
from explorer.core.attention import AttentionMaps, capture_attention
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, Trace
from explorer.teach import by_hand
from explorer.ui import state as ui_state
from explorer.ui.widgets import escape_markdown
from tests.apptest_support import keyed, navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

PAGE = "pages/by_hand.py"
SQRT2 = math.sqrt(2)


# --- the arithmetic -------------------------------------------------------------------------------------------------
def masked_mass(row: by_hand.WorkedRow) -> float:
    """Probability on future keys: exactly 0 whenever the mask is on."""
    return float(sum(p for p, m in zip(row.probs, row.inputs.masked) if m))


def test_prefill_row_step_by_step() -> None:
    row = by_hand.work_row(by_hand.EXAMPLE_PREFILL)
    assert row.raw_scores == (2.0, 4.0, 6.0)  # q1 = [2, 0] against [1, 0], [2, 0], [3, 0]
    assert row.scale == SQRT2
    assert row.scaled == pytest.approx((SQRT2, 2 * SQRT2, 3 * SQRT2))
    assert row.logits[:2] == row.scaled[:2] and row.logits[2] == -math.inf  # k2 is q1's future
    assert row.exps[2] == 0.0 and row.probs[2] == 0.0  # exactly no weight, not a small one
    e1, e2 = math.exp(SQRT2), math.exp(2 * SQRT2)
    assert row.probs[:2] == pytest.approx((e1 / (e1 + e2), e2 / (e1 + e2)), rel=1e-12)
    assert sum(row.probs) == pytest.approx(1.0, abs=1e-15)
    assert row.written_exps == (4.11, 16.92, 0.0)  # two decimals, as on paper
    assert row.written_exp_sum == 21.03


def test_decode_row_step_by_step() -> None:
    row = by_hand.work_row(by_hand.EXAMPLE_DECODE)
    assert row.raw_scores == (1.0, 2.0, 3.0, 2.0)  # q3 = [1, 1] against the cached [1, 0], [2, 0], [3, 0] and k3 [0, 2]
    assert row.logits == row.scaled  # nothing masked
    assert row.written_exps == (2.03, 4.11, 8.34, 4.11) and row.written_exp_sum == 18.59
    assert row.probs[1] == row.probs[3] and masked_mass(row) == 0.0


def test_the_decode_reuses_the_prefills_keys_and_values_and_appends_its_own() -> None:
    """A cache keeps the prefill's k0..k2 and v0..v2 as they were; the decode adds k3 and v3 and attends over all."""
    prefill, decode = by_hand.EXAMPLE_PREFILL, by_hand.EXAMPLE_DECODE
    assert decode.keys[:3] == prefill.keys and decode.values[:3] == prefill.values  # the same vectors, not new ones
    assert decode.key_names == ("k0", "k1", "k2", "k3") and decode.value_names == ("v0", "v1", "v2", "v3")
    assert (
        decode.keys[3] == by_hand.EXAMPLE_NEW_TOKEN.keys[0] and decode.values[3] == by_hand.EXAMPLE_NEW_TOKEN.values[0]
    )
    assert not any(decode.masked)
    edited = prefill.with_vectors((prefill.query, (1.0, 1.0), *prefill.keys[1:], *prefill.values))
    assert by_hand.decode_inputs(edited, by_hand.EXAMPLE_NEW_TOKEN).keys[0] == (1.0, 1.0)  # edits flow into the cache
    row = by_hand.work_row(decode)
    expected = np.asarray(row.probs) @ np.asarray(decode.values)
    assert row.output == pytest.approx(tuple(expected)) and row.output == pytest.approx((1.0, 0.6698), abs=1e-4)
    assert by_hand.work_row(prefill).output == pytest.approx(by_hand.work_row(prefill).probs[:2], abs=1e-12)


def test_the_printed_rows_are_the_by_hand_route() -> None:
    prefill, decode = by_hand.work_row(by_hand.EXAMPLE_PREFILL), by_hand.work_row(by_hand.EXAMPLE_DECODE)
    assert prefill.shown_probs == by_hand.EXAMPLE_PREFILL_PROBS == (0.195, 0.805, 0.0)
    assert decode.shown_probs == by_hand.EXAMPLE_DECODE_PROBS == (0.109, 0.221, 0.449, 0.221)
    # Full precision differs in the third decimal: the page shows both and says why.
    assert by_hand.row_text(prefill.probs) == "[0.196, 0.804, 0.000]"
    assert by_hand.row_text(decode.probs) == "[0.109, 0.221, 0.449, 0.221]"


def test_switching_the_mask_off_leaks_weight_to_the_future() -> None:
    open_row = by_hand.work_row(by_hand.EXAMPLE_PREFILL.with_mask(False))
    assert open_row.probs[2] > open_row.probs[1] > open_row.probs[0]  # k2 has the largest score: it wins
    assert by_hand.EXAMPLE_PREFILL.with_mask(True) is by_hand.EXAMPLE_PREFILL
    assert masked_mass(by_hand.work_row(by_hand.EXAMPLE_PREFILL)) == 0.0


def test_bad_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="every key is masked"):
        by_hand.work_row(replace(by_hand.EXAMPLE_DECODE, masked=(True,) * 4))
    with pytest.raises(ValueError, match="components"):
        by_hand.work_row(replace(by_hand.EXAMPLE_DECODE, keys=((1.0, 0.0, 0.0),) * 4))
    with pytest.raises(ValueError, match="one value per key"):
        by_hand.work_row(replace(by_hand.EXAMPLE_DECODE, values=((1.0, 0.0),)))
    with pytest.raises(ValueError, match="expected 3 vectors"):
        by_hand.EXAMPLE_NEW_TOKEN.with_vectors(((1.0, 0.0),))


def test_large_edited_vectors_do_not_overflow() -> None:
    limit = by_hand.VECTOR_LIMIT
    big = ((limit, limit), (limit, limit), (-limit, -limit), (0, 0), (limit, 0), (0, 0), (0, 0), (0, 0), (0, 0))
    row = by_hand.work_row(by_hand.EXAMPLE_DECODE.with_vectors(big))
    assert all(math.isfinite(p) for p in row.probs) and sum(row.probs) == pytest.approx(1.0)


def test_formatting() -> None:
    assert by_hand.dot_text((2.0, 0.0), (1.0, 0.0)) == "2×1 + 0×0 = 2"
    assert by_hand.dot_text((0.5, 1.0), (1.5, -2.0)) == "0.5×1.5 + 1×-2 = -1.25"
    assert by_hand.number(SQRT2) == "1.414" and by_hand.number(-math.inf) == "−∞" and by_hand.number(8.0) == "8"
    assert by_hand.vector_text((2.0, 0.25)) == "[2, 0.25]"


# --- what changed ---------------------------------------------------------------------------------------------------
def test_no_changes_for_the_example() -> None:
    assert by_hand.changes(by_hand.EXAMPLE_PREFILL, by_hand.EXAMPLE_NEW_TOKEN, mask_on=True) == []


def test_an_edit_names_the_vector_and_the_new_row() -> None:
    prefill = by_hand.EXAMPLE_PREFILL
    q1 = prefill.with_vectors(((2.0, 1.0), *prefill.keys, *prefill.values))
    lines = by_hand.changes(q1, by_hand.EXAMPLE_NEW_TOKEN, mask_on=True)
    assert lines[0] == "prefill: q1 is [2, 1] (example: [2, 0])"
    # k0..k2 have y = 0, so q1's new y changes no score: the row is still the example's, and no row line is added.
    assert len(lines) == 1
    new = by_hand.EXAMPLE_NEW_TOKEN
    k3 = new.with_vectors((new.query, (0.0, 0.0), *new.values))
    lines = by_hand.changes(by_hand.EXAMPLE_PREFILL, k3, mask_on=True)
    expected = by_hand.row_text(by_hand.work_row(by_hand.decode_inputs(by_hand.EXAMPLE_PREFILL, k3)).shown_probs)
    assert lines == [
        "decode: k3 is [0, 0] (example: [0, 2])",
        f"→ decode row {expected} instead of the example's [0.109, 0.221, 0.449, 0.221]",
    ]


def test_mask_off_is_reported_with_the_leak() -> None:
    lines = by_hand.changes(by_hand.EXAMPLE_PREFILL, by_hand.EXAMPLE_NEW_TOKEN, mask_on=False)
    leak = by_hand.work_row(by_hand.EXAMPLE_PREFILL.with_mask(False)).probs[2]
    assert lines[0] == "prefill: the causal mask is off"
    assert lines[-1].startswith(f"→ without the mask q1 puts {leak:.3f} of its attention on k2")


# --- the real shapes ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> tuple[Trace, AttentionMaps]:
    trace = generate(tiny_lm, check_request(tiny_lm, Request("by hand", max_new_tokens=4)), cpu_figures)
    return trace, capture_attention(tiny_lm, trace)


def smollm_like(trace: Trace) -> Trace:
    """The tiny trace relabelled with SmolLM2-135M's attention sizes (9 heads, 3 KV heads, d = 64, 30 layers)."""
    return replace(trace, model=replace(trace.model, heads=9, kv_heads=3, head_dim=64, layers=30))


def test_shape_links_with_smollm_numbers(run: tuple[Trace, AttentionMaps]) -> None:
    model = smollm_like(run[0]).model
    links = {
        link.quantity: link for link in by_hand.shape_links(model, prompt_len=46, decode_cache_len=52, decode_pass=6)
    }
    assert links["prefill scores"].toy == "[1, 1, 3, 3]" and links["prefill scores"].real == "[1, 9, 46, 46]"
    assert links["decode scores"].toy == "[1, 1, 1, 4]" and links["decode scores"].real == "[1, 9, 1, 52]"
    assert links["masked cells per head (prefill)"].real == "1,035"  # 46 x 45 / 2
    assert links["scale √d"].toy == "1.414" and links["scale √d"].real == "8"
    assert (
        links["query heads (KV heads)"].real == "9 (3)"
        and "3 query heads share" in links["query heads (KV heads)"].note
    )
    assert links["masked cells (decode)"].real == "0"
    one_token = by_hand.shape_links(model, prompt_len=46, decode_cache_len=None, decode_pass=None)
    assert one_token[-1].real == "no decode pass"


def test_real_rows_have_the_toys_structure(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    frame = charts.real_rows_frame(maps, layer=1, head=0, decode_step=2)
    prefill = frame[frame["row"].str.startswith("prefill")]
    decode = frame[frame["row"].str.startswith("decode")]
    assert len(prefill) == trace.prompt_len and list(prefill["masked"]) == [False, False] + [True] * (
        trace.prompt_len - 2
    )
    assert (prefill.loc[prefill["masked"], "prob"] == 0.0).all()  # the masked columns are exactly zero
    assert prefill["prob"].sum() == pytest.approx(1.0, abs=1e-2)  # float16 maps
    assert len(decode) == trace.passes[3].cache_len_after and not decode["masked"].any()  # step 2 is pass 3
    np.testing.assert_array_equal(decode["prob"].to_numpy(), maps.decode[1][2][0].astype(np.float32))
    assert len(charts.real_rows_frame(maps, 1, 0, None)["row"].unique()) == 1


# --- the builders ---------------------------------------------------------------------------------------------------
def test_steps_frame_shows_each_step() -> None:
    frame = charts.steps_frame(by_hand.work_row(by_hand.EXAMPLE_PREFILL))
    first, last = frame.iloc[0], frame.iloc[2]
    assert first["q1 · key"] == "2×1 + 0×0 = 2" and first["÷ √d"] == "2 ÷ 1.414 = 1.414"
    assert first["mask"] == "none" and last["mask"] == "−∞ (future)" and last["logit"] == "−∞"
    assert list(frame["probability (by hand)"]) == ["0.195", "0.805", "0.000"]
    assert charts.softmax_text(by_hand.work_row(by_hand.EXAMPLE_DECODE)).startswith("sum of e^logit = 18.59;")
    assert "output = 0.109·v0 + 0.221·v1 + 0.449·v2 + 0.221·v3 = [1, 0.67]" in charts.softmax_text(
        by_hand.work_row(by_hand.EXAMPLE_DECODE)
    )
    assert list(frame["value"]) == ["v0 = [1, 0]", "v1 = [0, 1]", "v2 = [1, 1]"]


def test_vectors_round_trip_and_an_emptied_cell_is_zero() -> None:
    new = by_hand.EXAMPLE_NEW_TOKEN
    frame = charts.vectors_frame(new.vector_names, new.vectors)
    assert list(frame.columns) == ["vector", "x", "y"] and list(frame["vector"]) == ["q3", "k3", "v3"]
    assert charts.vectors_from_frame(frame) == new.vectors
    frame.loc[1, "y"] = None
    assert charts.vectors_from_frame(frame)[1] == (0.0, 0.0)


def test_rows_chart_serialises_with_and_without_value_labels(run: tuple[Trace, AttentionMaps]) -> None:
    toy = charts.toy_rows_frame(by_hand.work_row(by_hand.EXAMPLE_PREFILL), by_hand.work_row(by_hand.EXAMPLE_DECODE))
    assert list(toy["prob"].round(3)) == [0.195, 0.805, 0.0, 0.109, 0.221, 0.449, 0.221]
    assert list(toy["masked"]) == [False, False, True, False, False, False, False]
    spec = json.dumps(charts.rows_chart(toy).to_dict())
    assert '"text"' in spec  # three keys: each cell prints its probability
    long = toy.assign(key_pos=toy["key_pos"] * 10)  # 21 key columns: too many to print in each cell
    assert '"text"' not in json.dumps(charts.rows_chart(long).to_dict())
    assert isinstance(charts.rows_chart(charts.real_rows_frame(run[1], 0, 0, 0)), alt.TopLevelMixin)


# --- the page -------------------------------------------------------------------------------------------------------
def shown_text(at: AppTest) -> str:
    return "\n".join(c.value for c in at.code)


def test_page_with_defaults_shows_the_examples_numbers_without_a_run() -> None:
    at = open_page(PAGE)
    text = shown_text(at)
    assert "prefill row, by hand: [0.195, 0.805, 0.000]" in text
    assert "decode row, by hand: [0.109, 0.221, 0.449, 0.221]" in text
    steps = [d.value for d in at.dataframe if "probability (by hand)" in d.value.columns]
    assert [list(s["probability (by hand)"]) for s in steps] == [
        ["0.195", "0.805", "0.000"],
        ["0.109", "0.221", "0.449", "0.221"],
    ]
    assert any("worked example's vectors" in c.value for c in at.caption)
    page_text = " ".join(m.value for m in [*at.caption, *at.markdown])  # the page says what the cache holds
    assert "reuses the prefill's k0–k2 and v0–v2 from the cache and appends its own k3 and v3" in page_text
    assert len(at.get("vega_lite_chart")) == 1
    assert any("No run yet" in i.value for i in at.info)  # the toy needs no run; the real part says how to get one


def test_page_reports_the_mask_switched_off_and_resets() -> None:
    at = open_page(PAGE)
    keyed(at.toggle, "by-hand-mask-").set_value(False).run()
    assert "prefill row, by hand: [0.045, 0.187, 0.768]" in shown_text(at)
    assert any("the causal mask is off" in i.value for i in at.info)
    at.button(key="by-hand-reset").click().run()
    assert keyed(at.toggle, "by-hand-mask-").value is True and "[0.195, 0.805, 0.000]" in shown_text(at)


def test_page_links_the_toy_to_the_run(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    at = open_page(PAGE, ui_state.RunResult(trace, maps, "", "run 1: by hand"))
    shapes = next(d.value for d in at.dataframe if "your run" in d.value.columns).set_index("quantity")
    T, H = trace.prompt_len, trace.model.heads
    assert shapes.loc["prefill scores", "your run"] == f"[1, {H}, {T}, {T}]"
    assert shapes.loc["decode scores", "your run"] == f"[1, {H}, 1, {T + 1}]"  # the first decode pass by default
    assert len(at.get("vega_lite_chart")) == 2  # the toy's rows and the run's
    keyed(at.selectbox, "by-hand-decode-").set_value(trace.passes[-1].index).run()
    shapes = next(d.value for d in at.dataframe if "your run" in d.value.columns).set_index("quantity")
    assert shapes.loc["decode scores", "your run"] == f"[1, {H}, 1, {trace.passes[-1].cache_len_after}]"
    assert not at.exception


def test_page_without_attention_maps_says_why(run: tuple[Trace, AttentionMaps]) -> None:
    note = "Attention capture was off for this run."
    at = open_page(PAGE, ui_state.RunResult(run[0], None, note, "run 1"))
    assert any(i.value == escape_markdown(note) for i in at.info)  # a recording's note is drawn escaped
    assert len(at.get("vega_lite_chart")) == 1
