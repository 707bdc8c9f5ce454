"""Every table a page shows has human column labels with units, rounded values, yes/no and a dash where a grid would
print true/false or None; the frames keep their raw names; a chart's tooltips name raw fields the same way."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import name_tooltips
from explorer.charts.tables import grouped, human_label, human_table


def test_raw_names_become_labels_with_units() -> None:
    assert human_label("ttft_s") == ("TTFT (ms)", 1000.0)
    assert human_label("itl_p50_s") == ("ITL p50 (ms)", 1000.0)
    assert human_label("latency_ms") == ("latency (ms)", 1.0)
    assert human_label("tokens_per_s") == ("tokens/s", 1.0)
    assert human_label("kv_cache_bytes") == ("KV cache (bytes)", 1.0)
    assert human_label("probability (by hand)") == ("probability (by hand)", 1.0)  # already human: kept
    assert human_label("batch") == ("batch", 1.0)


def test_a_table_shows_milliseconds_rounded_and_keeps_the_frame() -> None:
    frame = pd.DataFrame({"ttft_s": [0.465908], "latency_ms": [12.345678], "requests": [3], "mode": ["fcfs"]})
    shown = human_table(frame)
    assert list(shown.columns) == ["TTFT (ms)", "latency (ms)", "requests", "mode"]
    assert shown.iloc[0].tolist() == [465.9, 12.35, 3, "fcfs"]
    assert list(frame.columns) == ["ttft_s", "latency_ms", "requests", "mode"]  # the data (and its CSV) unchanged
    both = human_table(pd.DataFrame({"ttft_s": [0.1], "ttft_ms": [100.0]}))
    assert list(both.columns) == ["TTFT (ms)", "ttft_ms"]  # never two columns under one label


def test_a_table_shows_yes_no_a_dash_and_long_durations_in_seconds() -> None:
    frame = pd.DataFrame(
        {
            "matches_solo": [True, False],
            "layers": pd.array([30, None], dtype="Int64"),  # an empty cell: a grid prints "None"
            "note": ["kept", None],
            "projected_s": [6696.0, 12.5],  # 6696000 ms says nothing: past 10 s a column keeps seconds
            "flops": [123456789, 7],
        }
    )
    shown = human_table(frame)
    assert list(shown.columns) == ["matches solo", "layers", "note", "projected (s)", "flops"]
    assert shown["matches solo"].tolist() == ["yes", "no"]
    assert shown["layers"].tolist() == ["30", "—"] and shown["note"].tolist() == ["kept", "—"]
    assert shown["projected (s)"].tolist() == [6696.0, 12.5]
    assert shown["flops"].tolist() == [123456789, 7]  # numbers stay numbers: the grid groups them (`ui.table`)
    assert human_label("cumulative_s", seconds_as_ms=False) == ("cumulative (s)", 1.0)
    assert grouped(6696000.0) == "6,696,000" and grouped(1234.5) == "1,234.5" and grouped("x") == "x"


def test_tooltips_name_raw_fields_and_read_booleans_as_yes_no() -> None:
    data = pd.DataFrame({"cache_len": [3], "wall_ms": [1.5], "masked": [True]})
    base = alt.Chart(data).encode(
        x="cache_len:Q",
        tooltip=["cache_len", alt.Tooltip("wall_ms:Q", format=".2f"), alt.Tooltip("masked:N", title="in the mask")],
    )
    spec = name_tooltips(alt.layer(base.mark_point(), base.mark_rule())).to_dict()
    for layer in spec["layer"]:
        titles = [(tip["field"], tip["title"]) for tip in layer["encoding"]["tooltip"]]
        assert titles == [("cache_len", "cache len"), ("wall_ms", "wall (ms)"), ("masked__yes_no", "in the mask")]
        assert {"calculate": "datum['masked'] ? 'yes' : 'no'", "as": "masked__yes_no"} in layer["transform"]
