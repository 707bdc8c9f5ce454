"""Altair's schema table kept once per process (`explorer.charts.altair_speed`): the same specs, built faster."""

from __future__ import annotations

from collections.abc import Callable

import altair as alt
import pandas as pd
import pytest
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


def specs(trace: Trace) -> list[Callable[[], dict]]:
    return [
        lambda: shorthand_chart().to_dict(),
        lambda: cost_charts.time_split_chart(cost_charts.time_split_frame(trace)).to_dict(),
        lambda: kv_charts.growth_chart(kv_charts.growth_frame(trace), 300, "top").to_dict(),
    ]


@pytest.fixture
def uncached() -> Callable[[], object]:
    """A context that builds charts with Altair's own table, rebuilt per channel, as without the module."""
    assert cache_schema_table(), "Altair's _FromDict is no longer shaped as altair_speed expects"
    patched = schemapi._FromDict.__init__

    class Original:
        def __enter__(self) -> None:
            schemapi._FromDict.__init__ = patched._explorer_original

        def __exit__(self, *_: object) -> None:
            schemapi._FromDict.__init__ = patched

    return Original


def test_charts_built_with_the_kept_table_are_the_same_specs(tiny_lm: LoadedModel, uncached) -> None:  # noqa: ANN001
    trace = measure(tiny_lm, Request("specs", max_new_tokens=3))
    kept = [build() for build in specs(trace)]
    with uncached():
        rebuilt = [build() for build in specs(trace)]
    assert kept == rebuilt


def test_many_shorthand_channels_share_one_table() -> None:
    assert cache_schema_table()
    altair_speed._tables.clear()
    for _ in range(3):
        shorthand_chart().to_dict()  # a dozen channels wrapped from shorthand
    assert len(altair_speed._tables) == 1
