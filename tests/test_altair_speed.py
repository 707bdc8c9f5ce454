"""Altair's schema table kept once per process (`explorer.charts.altair_speed`): the same specs, built faster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import altair as alt
import pandas as pd
from altair.utils import schemapi

from explorer.charts import altair_speed
from explorer.charts import cost as cost_charts
from explorer.charts import kv as kv_charts
from explorer.charts.altair_speed import cache_schema_table
from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import Trace


def shorthand_chart() -> alt.Chart:
    frame = pd.DataFrame({"pass": [0, 1, 2], "ms": [20.0, 5.0, 6.0], "phase": ["prefill", "decode", "decode"]})
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(x="pass:O", y=alt.Y("ms:Q", title="ms"), color="phase:N", tooltip=["pass:O", "ms:Q", "phase:N"])
    )


def specs(trace: Trace) -> list[dict]:
    return [
        shorthand_chart().to_dict(),
        cost_charts.time_split_chart(cost_charts.time_split_frame(trace)).to_dict(),
        kv_charts.growth_chart(kv_charts.growth_frame(trace), 300, "top").to_dict(),
    ]


@contextmanager
def as_altair_builds_them() -> Iterator[None]:
    """Charts built with Altair's own table, rebuilt per channel, as without the module."""
    assert cache_schema_table(), "Altair's _FromDict is no longer shaped as altair_speed expects"
    kept = schemapi._FromDict.__init__
    schemapi._FromDict.__init__ = kept._explorer_original
    try:
        yield
    finally:
        schemapi._FromDict.__init__ = kept


def test_charts_built_with_the_kept_table_are_the_same_specs(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("specs", max_new_tokens=3))
    kept = specs(trace)
    with as_altair_builds_them():
        rebuilt = specs(trace)
    assert kept == rebuilt


def test_many_shorthand_channels_share_one_table() -> None:
    assert cache_schema_table()
    altair_speed._tables.clear()
    for _ in range(3):
        shorthand_chart().to_dict()  # a dozen channels wrapped from shorthand
    assert len(altair_speed._tables) == 1
