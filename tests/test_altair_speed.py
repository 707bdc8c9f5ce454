"""Charts built faster, to the same specs: Altair's schema table kept once per process (`explorer.charts.altair_speed`)
and the theme set once (`explorer.charts.theme.apply`) rather than through Altair's chain of copies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import altair as alt
import pandas as pd
import pytest
from altair.utils import schemapi

from explorer.charts import altair_speed, theme
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
def as_altair_does(owner: object, attribute: str) -> Iterator[None]:
    """`owner.attribute` as Altair defines it, without altair_speed's patch, for the block."""
    kept = getattr(owner, attribute)
    setattr(owner, attribute, kept._explorer_original)
    try:
        yield
    finally:
        setattr(owner, attribute, kept)


@contextmanager
def as_altair_builds_them() -> Iterator[None]:
    """Charts built with Altair's own table, rebuilt per channel, as without the module."""
    assert cache_schema_table(), "Altair's _FromDict is no longer shaped as altair_speed expects"
    with as_altair_does(schemapi._FromDict, "__init__"):
        yield


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


def configured_as_altair_chains_it(chart: alt.TopLevelMixin, chosen: theme.Theme) -> alt.TopLevelMixin:
    """The theme as Altair's own configure_* chain lays it over a chart (what `theme.apply` did before)."""
    themed = (
        chart.configure_axis(labelFontSize=chosen.label_px, titleFontSize=chosen.title_px)
        .configure_legend(labelFontSize=chosen.label_px, titleFontSize=chosen.title_px, labelLimit=0, titleLimit=0)
        .configure_title(fontSize=chosen.title_px)
        .configure_text(fontSize=chosen.mark_text_px)
        .configure_header(labelFontSize=chosen.label_px, titleFontSize=chosen.title_px, labelLimit=0)
    )
    if chosen.renderer is None:
        return themed
    sides = dict.fromkeys(("left", "top", "right", "bottom"), theme.PRESENTER_PADDING_PX)
    return themed.properties(usermeta={"embedOptions": {"renderer": chosen.renderer}}, padding=sides)


def layered_charts(trace: Trace) -> list[alt.TopLevelMixin]:
    base = shorthand_chart()
    return [
        (base + base.mark_line() + base.mark_text().encode(text="ms:Q")).configure_view(strokeWidth=0),
        base | base.mark_point(),
        cost_charts.time_split_chart(cost_charts.time_split_frame(trace)),
    ]


@pytest.mark.parametrize("chosen", [theme.NORMAL, theme.PRESENTER], ids=lambda t: t.name)
def test_the_theme_set_once_gives_the_spec_of_altairs_configure_chain(tiny_lm: LoadedModel, chosen) -> None:
    trace = measure(tiny_lm, Request("theme", max_new_tokens=2))
    chained = [configured_as_altair_chains_it(c, chosen).to_dict() for c in layered_charts(trace)]
    assert [theme.apply(c, chosen).to_dict() for c in layered_charts(trace)] == chained


def test_the_theme_never_rebuilds_a_layered_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    chart = shorthand_chart() + shorthand_chart().mark_line()
    rebuilt = []
    original = alt.LayerChart.__init__
    monkeypatch.setattr(alt.LayerChart, "__init__", lambda self, *a, **k: rebuilt.append(1) or original(self, *a, **k))
    assert theme.apply(chart, theme.PRESENTER) is chart
    # Each configure_* step of Altair's chain ran LayerChart's constructor, which deep-copies every layer.
    assert rebuilt == []


@contextmanager
def layers_hashed_as_altair_does() -> Iterator[None]:
    """Layers' view hashes as Altair computes them, through the printed frame, as without the module."""
    assert altair_speed.hash_layer_data_by_content(), "Altair's Chart._compute_hash is no longer where it was"
    with as_altair_does(alt.Chart, "_compute_hash"):
        yield


def test_layers_hashed_by_content_give_the_same_specs(tiny_lm: LoadedModel) -> None:
    trace = measure(tiny_lm, Request("layers", max_new_tokens=3))
    kept = [c.to_dict() for c in layered_charts(trace)]
    with layers_hashed_as_altair_does():
        hashed_as_altair_does = [c.to_dict() for c in layered_charts(trace)]
    assert kept == hashed_as_altair_does


def test_layering_a_chart_never_prints_its_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    printed: list[int] = []
    monkeypatch.setattr(pd.DataFrame, "__repr__", lambda self: printed.append(1) or "a frame")
    base = shorthand_chart()
    (base + base.mark_line() + base.mark_text().encode(text="ms:Q")).to_dict()
    assert printed == []  # Altair's own hash printed it once per layer (json.dumps(default=str))
    one, other = altair_speed.FrameFingerprint(base.data), altair_speed.FrameFingerprint(base.data.assign(ms=0.0))
    assert str(one) == str(altair_speed.FrameFingerprint(base.data.copy())) != str(other)  # by content, not identity
