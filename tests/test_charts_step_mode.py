"""The Step page's builders on hand-made attention maps: every cell of the map in its place, the newest rows named by
the pass that computed them, and a window that keeps the last positions of a long request."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.charts import step_mode as step_charts
from explorer.charts.attention import WINDOW_POSITIONS
from explorer.core.attention_maps import AttentionMaps


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
