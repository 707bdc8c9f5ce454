"""Chart files: the PNG opens as an image of the expected size, the SVG is XML, both render with no network."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from xml.etree import ElementTree

import altair as alt
import pandas as pd
import pytest

from explorer.charts import export
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which the PNG standard puts first, checked against its CRC."""
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16 : 16 + length]
    (crc,) = struct.unpack(">I", data[16 + length : 20 + length])
    assert zlib.crc32(kind + body) == crc
    width, height = struct.unpack(">II", body[:8])
    assert data[-12:] == struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))  # the whole file came
    return width, height


def svg_size(text: str) -> tuple[float, float]:
    root = ElementTree.fromstring(text)
    assert root.tag == f"{SVG_NS}svg"
    return float(root.get("width")), float(root.get("height"))


def bars(**properties: object) -> alt.Chart:
    frame = pd.DataFrame({"pass": [0, 1, 2], "wall_ms": [120.0, 45.5, 46.25]})
    return alt.Chart(frame).mark_bar().encode(x="pass:O", y="wall_ms:Q").properties(**properties)


def test_png_of_a_fixed_size_chart_is_exactly_that_size_times_the_scale() -> None:
    # No padding and no autosize: the canvas is exactly width x height CSS pixels.
    chart = bars(width=400, height=300, padding=0, autosize=alt.AutoSizeParams(type="none"))
    assert png_size(export.chart_png(chart, scale=1)) == (400, 300)
    assert png_size(export.chart_png(chart, scale=2.5)) == (1000, 750)
    assert svg_size(export.chart_svg(chart)) == (400, 300)


def test_png_is_the_svg_canvas_times_the_scale_with_axes_included() -> None:
    chart = bars(title="time per pass")  # no width: the export gives it one
    width, height = svg_size(export.chart_svg(chart))
    assert width > export.DEFAULT_WIDTH_PX  # the plot area plus the y axis and padding
    assert png_size(export.chart_png(chart)) == (round(width * 2), round(height * 2))  # DEFAULT_PNG_SCALE


def test_svg_parses_and_keeps_text_as_text() -> None:
    svg = export.chart_svg(bars(title="time per pass"))
    texts = [t.text for t in ElementTree.fromstring(svg).iter(f"{SVG_NS}text")]
    assert "time per pass" in texts and "wall_ms" in texts


def test_config_sets_presenter_font_sizes_without_losing_the_charts_own() -> None:
    chart = bars().configure_axis(labelColor="#333333")
    spec = export.export_spec(chart, config={"axis": {"labelFontSize": 18, "titleFontSize": 20}})
    assert spec["config"]["axis"] == {"labelColor": "#333333", "labelFontSize": 18, "titleFontSize": 20}
    assert chart.to_dict()["config"]["axis"] == {"labelColor": "#333333"}  # the page's chart is left as it was
    svg = export.chart_svg(chart, config={"axis": {"labelFontSize": 18}})
    assert 'font-size="18px"' in svg


def test_compositions_keep_their_own_sizes() -> None:
    facet = bars(width=120, height=80).facet(column="pass:O")
    assert "width" not in export.export_spec(facet)
    assert export.export_spec(bars(width=300))["width"] == 300
    assert export.export_spec(bars())["width"] == export.DEFAULT_WIDTH_PX
    width, _ = svg_size(export.chart_svg(facet))
    assert 3 * 120 < width < export.DEFAULT_WIDTH_PX


def test_every_kind_of_app_chart_renders(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    """Layers, folds, log scales and facets from the real builders, on a tiny model's trace."""
    from explorer.charts import attention, run
    from explorer.core.attention import capture_attention

    trace = generate(tiny_lm, check_request(tiny_lm, Request("export me", max_new_tokens=4)), cpu_figures)
    maps = capture_attention(tiny_lm, trace)
    charts = [
        run.timeline_chart(run.timeline_frame(trace)),
        attention.prefill_chart(attention.prefill_frame(maps, 0, 0)),
        attention.heads_chart(attention.pooled_frame(maps, 0, list(range(maps.heads)), 32, trace.model.kv_heads)),
    ]
    for chart in charts:
        assert png_size(export.chart_png(chart, scale=1))[0] > 100
        assert svg_size(export.chart_svg(chart))[0] > 100


def test_more_rows_than_altairs_limit_render_and_the_page_chart_is_untouched() -> None:
    # 9,216 cells: a 96 x 96 attention window, which a plain to_dict() refuses (over 5,000 rows).
    cells = pd.DataFrame(
        {"key": [k for _ in range(96) for k in range(96)], "query": [q for q in range(96) for _ in range(96)]}
    )
    cells["prob"] = (cells["key"] <= cells["query"]) / (cells["query"] + 1)
    heatmap = alt.Chart(cells).mark_rect().encode(x="key:O", y="query:O", color="prob", tooltip=["prob"])
    with pytest.raises(alt.MaxRowsError):
        heatmap.to_dict()
    spec = export.export_spec(alt.layer(heatmap, heatmap.mark_text().encode(text="prob:Q")))
    (rows,) = spec["datasets"].values()  # one dataset shared by both layers, every row, no placeholder marker
    assert len(rows) == 96 * 96 and set(rows[0]) == {"key", "query", "prob"}
    assert spec["layer"][0]["encoding"]["color"] == {"field": "prob", "type": "quantitative"}  # inferred as Altair does
    assert heatmap.data is cells and len(svg_size(export.chart_svg(heatmap))) == 2


def test_a_small_chart_gives_altairs_own_spec() -> None:
    chart = bars(title="t").encode(tooltip=["pass", "wall_ms"])
    ours, altairs = export.spec_dict(chart), chart.to_dict()
    (our_rows,), (their_rows,) = ours.pop("datasets").values(), altairs.pop("datasets").values()
    assert our_rows == their_rows
    ours.pop("data"), altairs.pop("data")  # named after a hash of the rows they were built from
    assert ours == altairs


def test_control_characters_in_token_text_do_not_break_the_files() -> None:
    tokens = pd.DataFrame({"pass": [0, 1], "token": ["\x0e", "ok\x00"], "wall_ms": [1.0, 2.0]})
    chart = alt.Chart(tokens).mark_bar().encode(x="token:N", y="wall_ms:Q", tooltip=["token"])
    svg = export.chart_svg(chart)
    assert "\ufffd" in svg and svg_size(svg)[0] > 0  # parses as XML
    assert png_size(export.chart_png(chart, scale=1))[0] > 0


def test_vegalite_version_is_altairs() -> None:
    assert export.vegalite_version() == ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare for a network namespace")
def test_renders_with_no_network() -> None:
    """In a fresh network namespace (no interfaces but loopback) a CDN fetch would fail: the render must not."""
    code = (
        "import struct, altair as alt, pandas as pd; from explorer.charts import export; "
        "c = alt.Chart(pd.DataFrame({'x': [1, 2]})).mark_bar().encode(x='x:Q'); "
        "p = export.chart_png(c, scale=1); s = export.chart_svg(c); print(struct.unpack('>II', p[16:24])[0], len(s))"
    )
    command = ["unshare", "--net", "--map-root-user", sys.executable, "-c", code]
    probe = subprocess.run(["unshare", "--net", "--map-root-user", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no network namespace here: {probe.stderr.decode().strip()}")
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    width, svg_chars = map(int, out.stdout.split())
    assert width > export.DEFAULT_WIDTH_PX and svg_chars > 1000
