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
    """The theme as Altair's own configure_* chain lays it over a chart (what `theme.apply` did before), with the
    legends fitted to the chart's width as `theme.apply` fits them."""
    themed = (
        chart.configure_axis(labelFontSize=chosen.label_px, titleFontSize=chosen.title_px)
        .configure_legend(labelFontSize=chosen.label_px, titleFontSize=chosen.title_px, labelLimit=0, titleLimit=0)
        .configure_title(fontSize=chosen.title_px)
        .configure_text(fontSize=chosen.mark_text_px)
        .configure_header(labelFontSize=chosen.label_px, titleFontSize=chosen.title_px, labelLimit=0)
    )
    theme.fit_legends(themed, chosen)  # and its row legends laid out by the chart's width (issue 42)
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


# --- each spec shape validated once ----------------------------------------------------------------------------------
@pytest.fixture
def shapes_seen(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """No shape validated yet in this test (whatever this worker drew before), and every schema validation of a whole
    chart's spec from now on, as the spec it checked."""
    assert altair_speed.validate_each_shape_once(), "Altair's TopLevelMixin.to_dict is no longer where it was"
    monkeypatch.setattr(altair_speed, "_validated_shapes", set())
    checked: list[dict] = []
    validate = schemapi.SchemaBase.validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type, instance: dict, schema: dict | None = None) -> None:
        if issubclass(cls, alt.TopLevelMixin):
            checked.append(instance)
        validate(cls, instance, schema)

    monkeypatch.setattr(schemapi.SchemaBase, "validate", classmethod(counting))
    return checked


def bars(ms: list[float], autosize: str = "pad") -> alt.LayerChart:
    frame = pd.DataFrame({"pass": list(range(len(ms))), "ms": ms})
    base = alt.Chart(frame).encode(x=alt.X("pass:O", sort=[str(p) for p in range(len(ms))]), y="ms:Q")
    chart = (base.mark_bar() + base.mark_rule()).properties(height=100 + len(ms))
    chart["autosize"] = autosize  # set unchecked: only the whole spec's validation reads it
    return chart


def test_a_chart_drawn_again_with_other_numbers_is_validated_once_and_gives_altairs_own_spec(
    shapes_seen: list[dict],
) -> None:
    first, second = bars([20.0, 5.0]), bars([21.0, 6.0, 7.0])  # other values, another length, another dataset
    specs = [first.to_dict(), second.to_dict(), second.to_dict()]
    assert len(shapes_seen) == 1
    with as_altair_does(alt.TopLevelMixin, "to_dict"):
        assert specs == [first.to_dict(), second.to_dict(), second.to_dict()]
    assert len(shapes_seen) == 4  # Altair's own: every time


def test_a_chart_of_another_shape_is_validated_and_a_bad_one_still_raises(shapes_seen: list[dict]) -> None:
    bars([1.0]).to_dict()
    bars([1.0], autosize="fit").to_dict()  # a string changed: the shape is new
    assert len(shapes_seen) == 2
    with pytest.raises(alt.utils.schemapi.SchemaValidationError):
        bars([1.0], autosize="nowhere").to_dict()  # not a way Vega-Lite sizes a chart
    with pytest.raises(alt.utils.schemapi.SchemaValidationError):
        bars([1.0], autosize="nowhere").to_dict()  # never kept as validated
    bars([1.0]).to_dict(validate=False)
    assert len(shapes_seen) == 4


def test_a_spec_shape_keeps_strings_and_drops_numbers_and_datasets() -> None:
    one, other = bars([20.0, 5.0]).to_dict(), bars([9.0, 1.0, 2.0]).to_dict()
    assert one != other and altair_speed.spec_shape(one) == altair_speed.spec_shape(other)
    assert altair_speed.spec_shape({"mark": "bar"}) != altair_speed.spec_shape({"mark": "bars"})
    assert altair_speed.spec_shape({"layer": [{"mark": "bar"}]}) != altair_speed.spec_shape({"layer": [{}, {}]})


def test_the_shapes_kept_are_bounded(shapes_seen: list[dict], monkeypatch: pytest.MonkeyPatch) -> None:
    """A chart whose title carries a measured figure is a new shape on every draw: a server keeps at most a bound."""
    monkeypatch.setattr(altair_speed, "MAX_VALIDATED_SHAPES", 3)
    for n in range(7):
        bars([1.0]).properties(title=f"pass {n}: {n * 1.5} ms").to_dict()
    assert len(shapes_seen) == 7 and len(altair_speed._validated_shapes) <= 3
    bars([1.0]).properties(title="pass 6: 9.0 ms").to_dict()  # the newest is still known
    assert len(shapes_seen) == 7
