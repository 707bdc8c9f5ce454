"""Every table a page shows has human column labels with units and rounded values; the frames keep their raw names."""

from __future__ import annotations

import pandas as pd

from explorer.charts.tables import human_label, human_table


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
