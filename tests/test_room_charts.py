"""The Room's charts size themselves by their data and fit their column: drawn by Vega itself (vl-convert's
scenegraph, the marks as a browser lays them out) at a phone's column, a laptop's and a wide screen's, in the normal
and the presenter theme. A lane is at least 20 px tall with its label clear of the next, whatever the head count; no
chart is wider than its column; every engine step keeps its column (none cut off); legends sit under the plot."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import pytest
import vl_convert as vlc

from explorer.charts import room as charts
from explorer.charts import theme
from explorer.charts.export import export_spec, vegalite_version

COLUMNS_PX = (358, 820, 1100)  # Streamlit's main column on a 390 px phone, at 1280 with the sidebar open, at 1440
THEMES = (theme.NORMAL, theme.PRESENTER)
MIN_ROW_PX = 20
# What Streamlit's front end lays under every chart (its theme's config): fit the whole chart, axes and legend
# included, into the width and height given, unless the chart says otherwise.
STREAMLIT_CONFIG = {"autosize": {"type": "fit", "contains": "padding"}}


def people(count: int) -> list[str]:
    return ["you", *(f"participant {n}" for n in range(2, count + 1))]


def lanes(count: int, steps: int) -> pd.DataFrame:
    """A round of `count` people over `steps` engine steps: everyone prefills in step 0, then decodes, one in three
    sitting a step out (a finished or not yet admitted request)."""
    rows = [
        {
            "step": step,
            "lane": lane,
            "you": lane == "you",
            "phase": "prefill" if step == 0 else "decode",
            "tokens": 12 if step == 0 else 1,
            "requests_in_step": count,
            "start_ms": 20.0 * step,
            "wall_ms": 20.0 + k,
        }
        for step in range(steps)
        for k, lane in enumerate(people(count))
        if step == 0 or (step + k) % 3
    ]
    return pd.DataFrame(rows)


def tokens(count: int, steps: int) -> pd.DataFrame:
    """`lanes` as the step columns of `explorer.charts.schedule.step_entries_frame`."""
    frame = lanes(count, steps).rename(columns={"lane": "request"})
    order = {lane: i for i, lane in enumerate(people(count))}
    return frame.assign(
        request_order=frame["request"].map(order),
        chunk=0,
        completes_prefill=frame["phase"] == "prefill",
        kind=["prefill" if s == 0 else "decode" for s in frame["step"]],
        label="",
        step_tokens=frame["tokens"],
    )


def drawn(chart: alt.TopLevelMixin, look: theme.Theme, column_px: int) -> dict[str, Any]:
    """The chart as Vega lays it out in a column `column_px` wide (the width Streamlit gives it), in `look`."""
    spec = export_spec(theme.apply(chart, look), STREAMLIT_CONFIG, width_px=column_px)
    return vlc.vegalite_to_scenegraph(spec, vl_version=vegalite_version())


def items(node: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """Every item under `node` whose group has this role or name ("axis-label", "layer_0_marks", ...)."""
    found = list(node.get("items", [])) if role in (node.get("role"), node.get("name")) else []
    for child in node.get("items", []) or []:
        if isinstance(child, dict):
            found += items(child, role)
    return found


def axes_labels(node: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Each axis's labels, axis by axis."""
    if node.get("role") == "axis":
        return [items(node, "axis-label")]
    return [found for child in node.get("items", []) or [] if isinstance(child, dict) for found in axes_labels(child)]


def y_labels(scene: dict[str, Any]) -> list[dict[str, Any]]:
    """The lane labels: the axis whose labels are not step numbers."""
    return next(a for a in axes_labels(scene["scenegraph"]) if not any(str(t["text"]).isdigit() for t in a))


def step_labels(scene: dict[str, Any], steps: int) -> list[dict[str, Any]]:
    """The engine-step axis: one label per step, all on one line."""
    return next(a for a in axes_labels(scene["scenegraph"]) if len(a) == steps and len({t["y"] for t in a}) == 1)


@pytest.mark.parametrize("look", THEMES, ids=lambda t: t.name)
@pytest.mark.parametrize("count", [1, 3, 12, 32])
def test_every_lane_is_a_band_of_its_own_and_no_label_overlaps_another(count: int, look: theme.Theme) -> None:
    scene = drawn(charts.lanes_chart(lanes(count, 18), people(count)), look, COLUMNS_PX[0])
    cells = items(scene["scenegraph"], "layer_0_marks")
    assert cells and min(c["height"] for c in cells) >= MIN_ROW_PX
    labels = sorted(y_labels(scene), key=lambda t: t["y"])
    assert [t["text"] for t in labels] == people(count)
    gaps = [b["y"] - a["y"] for a, b in zip(labels, labels[1:])]
    assert all(gap >= look.label_px for gap in gaps), gaps  # each label's line clear of the next
    assert scene["height"] >= MIN_ROW_PX * count  # the chart grows with the room, never squeezed into a total


@pytest.mark.parametrize("look", THEMES, ids=lambda t: t.name)
@pytest.mark.parametrize("column_px", COLUMNS_PX)
def test_each_room_chart_fits_its_column_with_every_step_in_it(column_px: int, look: theme.Theme) -> None:
    steps = 40
    frames = {"lanes": lanes(8, steps), "tokens": tokens(8, steps)}
    built = {
        "lanes": charts.lanes_chart(frames["lanes"], people(8)),
        "tokens": charts.tokens_chart(frames["tokens"]),
        "step times": charts.step_times_chart(frames["tokens"]),
        "batch": charts.batch_chart(
            pd.DataFrame({"run": [charts.ROUND] * 3 + [charts.ALONE], "batch": [8, 8, 4, 1], "wall_ms": [30.0] * 4})
        ),
    }
    for name, chart in built.items():
        scene = drawn(chart, look, column_px)
        assert scene["width"] <= column_px, (name, scene["width"])
        if name == "batch":
            continue
        marks = items(scene["scenegraph"], "layer_0_marks") or items(scene["scenegraph"], "marks")
        plot_px = scene["width"] - scene["origin"][0]
        columns = {round(m["x"], 3) for m in marks}
        assert len(columns) == steps, name  # every step drawn, none cut off at the column's edge
        assert max(m["x"] + m["width"] for m in marks) <= plot_px + 0.5, name
        visible = sorted((t for t in step_labels(scene, steps) if t.get("opacity", 1) > 0), key=lambda t: t["x"])
        spacing = [b["x"] - a["x"] for a, b in zip(visible, visible[1:])]
        assert visible and min(spacing) >= 2 * look.label_px * 0.6, (name, spacing)  # two digits never touch


def test_legends_sit_under_the_plot_whole() -> None:
    chart_specs = [
        charts.lanes_chart(lanes(2, 4), people(2)).to_dict(),
        charts.tokens_chart(tokens(2, 4)).to_dict(),
        charts.batch_chart(pd.DataFrame({"run": [charts.ROUND], "batch": [2], "wall_ms": [1.0]})).to_dict(),
    ]
    for spec in chart_specs:
        legends = [layer["encoding"]["color"]["legend"] for layer in spec["layer"] if "color" in layer["encoding"]]
        assert legends and all(lg["orient"] == "bottom" and lg["labelLimit"] == 0 for lg in legends)
        assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}
