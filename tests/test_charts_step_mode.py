"""The Step page's builders on hand-made attention maps: every cell of the map in its place, the newest rows named by
the pass that computed them, and a window that keeps the last positions of a long request. Its charts' legends on a
tiny model's run: wrapped to fit a phone's column, never cut."""

from __future__ import annotations

import json

import numpy as np
import pytest

from explorer.charts import step_mode as step_charts
from explorer.charts.attention import WINDOW_POSITIONS
from explorer.charts.cost import SEGMENT_LABELS, time_split_frame
from explorer.charts.latency import itl_chart
from explorer.charts.theme import NORMAL
from explorer.core.attention_maps import AttentionMaps
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace


def maps_of(prompt_len: int, decodes: int, heads: int = 2) -> AttentionMaps:
    """Maps whose every probability names its cell: 0.001 x (100 x query + key) + head / 10 (float16 keeps 3 digits:
    the test compares with the same rounding)."""

    def p(head: int, query: int, key: int) -> float:
        return float(np.float16((100 * query + key) * 1e-4 + head / 10))

    T = prompt_len
    prefill = np.array([[[p(h, q, k) if k <= q else 0.0 for k in range(T)] for q in range(T)] for h in range(heads)])
    rows = tuple(np.array([[p(h, T + d, k) for k in range(T + d + 1)] for h in range(heads)]) for d in range(decodes))
    return AttentionMaps(
        layers=(0,),
        tokens_text=tuple(f"t{i}" for i in range(T + decodes)),
        prompt_len=T,
        prefill={0: prefill.astype(np.float16)},
        decode={0: tuple(r.astype(np.float16) for r in rows)},
        replay_token_ids=(),
    )


def test_every_cell_of_the_map_is_in_its_place_with_the_mask_marked() -> None:
    frame = step_charts.attention_rows_frame(maps_of(3, 2), layer=0, head=1)
    # 3 x 3 prefill cells, then a row of 4 keys (position 3) and one of 5 (position 4)
    assert len(frame) == 9 + 4 + 5
    cell = frame.set_index(["query_pos", "key_pos"])
    assert cell.loc[(4, 2), "prob"] == pytest.approx(float(np.float16(402e-4 + 0.1)))
    assert cell.loc[(1, 2), "masked"] and cell.loc[(1, 2), "prob"] == 0.0 and cell.loc[(1, 2), "cell"] != "attended"
    assert (
        not cell.loc[(3, 3), "masked"]
        and cell.loc[(3, 3), "phase"] == "decode"
        and cell.loc[(2, 0), "phase"] == "prefill"
    )
    assert cell.loc[(4, 1), "query"] == "4:t4" and cell.loc[(4, 1), "key"] == "1:t1"


def test_a_long_request_keeps_its_last_positions() -> None:
    frame = step_charts.attention_rows_frame(maps_of(WINDOW_POSITIONS, 3, heads=1), layer=0, head=0)
    first = WINDOW_POSITIONS + 3 - WINDOW_POSITIONS  # the window ends at the newest position
    assert frame["query_pos"].min() == first and frame["key_pos"].min() == first
    assert frame["query_pos"].max() == WINDOW_POSITIONS + 2 and frame["key_pos"].max() == WINDOW_POSITIONS + 2


def test_the_newest_rows_are_named_by_the_pass_that_computed_them() -> None:
    frame = step_charts.newest_rows_frame(step_charts.attention_rows_frame(maps_of(4, 3), 0, 0), count=4)
    rows = frame.drop_duplicates("query_pos").sort_values("query_pos")["row"].tolist()
    assert rows == ["prompt 3 · t3", "pass 1 · t4", "pass 2 · t5", "pass 3 · t6"]
    assert len(frame) == 4 + 5 + 6 + 7  # each decode row one key longer


# --- legends that fit a phone's column -------------------------------------------------------------------------------
PHONE_COLUMN_PX = 390 - 2 * 16  # a 390 px phone's main column: Streamlit pads the page 1 rem on each side
CHAR_EM = 0.6  # a generous average character width of the app's sans-serif type, in ems
SYMBOL_AND_GAPS_PX = 25  # a legend entry's symbol, the gap to its label and the gap to the next column


def legends(spec: dict) -> dict[str, dict]:
    """Each channel's legend in a layered chart's spec, by channel."""
    return {
        channel: encoding["legend"]
        for layer in spec["layer"]
        for channel, encoding in layer.get("encoding", {}).items()
        if isinstance(encoding, dict) and encoding.get("legend")
    }


@pytest.fixture(scope="module")
def trace(tiny_lm: LoadedModel) -> Trace:
    return measure(tiny_lm, Request("hello there", max_new_tokens=3, use_chat_template=False))


@pytest.mark.parametrize("label", SEGMENT_LABELS)
def test_a_legend_label_wraps_into_short_lines_with_every_word_kept(label: str) -> None:
    lines = step_charts.wrapped_label(label)
    assert all(len(line) <= step_charts.LEGEND_LINE_CHARS for line in lines), lines
    assert " ".join(lines) == label  # whole, in order: wrapped, never cut
    if " (" in label:
        assert lines[-1].endswith(")") and any(line.startswith("(") for line in lines[1:])  # the source on its own


def test_the_step_times_legend_wraps_its_labels_and_fits_a_phone_column(trace: Trace) -> None:
    spec = step_charts.step_times_chart(time_split_frame(trace)).to_dict()
    found = legends(spec)
    segments, outline = found["color"], found["stroke"]
    assert segments["labelLimit"] == 0  # never cut short ("KV cache read + w…")
    for label in SEGMENT_LABELS:  # each label drawn on its wrapped lines
        wrapped = json.dumps(step_charts.wrapped_label(label), ensure_ascii=False)
        assert f"datum.label === {json.dumps(label, ensure_ascii=False)} ? {wrapped}" in segments["labelExpr"]
    widest_chars = max(len(line) for label in SEGMENT_LABELS for line in step_charts.wrapped_label(label))
    columns_px = segments["columns"] * (widest_chars * CHAR_EM * NORMAL.label_px + SYMBOL_AND_GAPS_PX)
    assert columns_px <= PHONE_COLUMN_PX, columns_px
    # The outline's legend under the plot, not beside it and not beside the segments' above it
    assert segments["orient"] == "top" and outline["orient"] == "bottom"
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}  # the legends' rows add to the plot's height


def test_the_step_itl_legends_are_above_and_below_the_plot_not_side_by_side(trace: Trace) -> None:
    frame = step_charts.step_itl_frame(trace, 0.05)
    found = legends(step_charts.step_itl_chart(frame, 0.05).to_dict())
    assert found["color"]["orient"] == "top" and found["stroke"]["orient"] == "bottom"  # bars above, SLO line below
    # Built fresh on every call: the Latency page's own ITL chart keeps its SLO legend where it was
    assert legends(itl_chart(frame, 0.05).to_dict())["stroke"]["orient"] == "top"
