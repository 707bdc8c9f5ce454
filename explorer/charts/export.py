"""Any Altair chart as a PNG or SVG file, rendered offline by vl-convert (Vega-Lite bundled in its own JS engine:
no browser and no network, so a talk's slides can be made on a machine with no internet)."""

from __future__ import annotations

import re
from typing import Any

import altair as alt
import pandas as pd
import vl_convert as vlc
from altair.utils.data import to_values

DEFAULT_WIDTH_PX = 720  # on a page a chart stretches to its column; a file needs a width of its own
DEFAULT_PNG_SCALE = 2.0  # pixels per CSS pixel: sharp on a projector and on a high-density screen
# Compositions size their own sub-charts; a top-level width is only valid on a single or layered chart.
COMPOSITE_KEYS = ("facet", "repeat", "concat", "hconcat", "vconcat")
SUBCHART_LISTS = ("layer", "concat", "hconcat", "vconcat")
FRAME_MARKER = "__export_frame__"
# Characters XML 1.0 forbids. Token texts can hold any byte (a tiny model's random tokens, a pasted prompt), and Vega
# copies data into SVG text and aria labels, where one such character makes the SVG unparsable and the PNG fail.
NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def vegalite_version() -> str | None:
    """The Vega-Lite version Altair writes ('6.4'), if vl-convert bundles it; None lets vl-convert pick its newest."""
    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return major_minor if major_minor in vlc.get_vegalite_versions() else None


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` laid over `base`, nested dicts merged key by key (a theme's axis sizes keep a chart's axis titles)."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def xml_safe(value: Any) -> Any:
    """Every string inside a spec with XML-forbidden characters replaced by U+FFFD (what a browser shows for them)."""
    if isinstance(value, str):
        return NOT_XML.sub("\ufffd", value)
    if isinstance(value, dict):
        return {xml_safe(k): xml_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [xml_safe(v) for v in value]
    return value


def _with_placeholders(chart: Any, frames: list[pd.DataFrame]) -> Any:
    """A shallow copy of the chart tree in which each DataFrame is one marked row of itself (see `spec_dict`)."""
    if not isinstance(chart, alt.SchemaBase):
        return chart
    out = chart.copy(deep=False)
    data = getattr(out, "data", alt.Undefined)
    if isinstance(data, pd.DataFrame):
        index = next((i for i, f in enumerate(frames) if f is data), None)
        if index is None:
            frames.append(data)
            index = len(frames) - 1
        # One row keeps the column dtypes that Altair infers encoding types from; the marker makes each
        # placeholder's dataset distinct, so the full rows can go back under its name.
        out.data = data.head(1).assign(**{FRAME_MARKER: index})
    for name in SUBCHART_LISTS:
        parts = getattr(out, name, alt.Undefined)
        if isinstance(parts, list):
            setattr(out, name, [_with_placeholders(part, frames) for part in parts])
    spec = getattr(out, "spec", alt.Undefined)
    if isinstance(spec, alt.SchemaBase):
        out.spec = _with_placeholders(spec, frames)
    return out


def spec_dict(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """`chart.to_dict()` without Altair's 5,000-row limit, and without touching Altair's global settings.

    A 96 x 96 attention window has 9,216 rows, which `to_dict()` refuses; lifting the limit means switching Altair's
    process-wide data transformer, which Streamlit also switches from other sessions' threads. Instead the spec is
    built from one-row placeholders and the full rows (sanitised as Altair would) are put back afterwards.
    """
    frames: list[pd.DataFrame] = []
    spec = _with_placeholders(chart, frames).to_dict()
    datasets = spec.get("datasets", {})
    for name, values in datasets.items():
        if values and FRAME_MARKER in values[0]:
            datasets[name] = to_values(frames[values[0][FRAME_MARKER]])["values"]
    return spec


def export_spec(
    chart: alt.TopLevelMixin, config: dict[str, Any] | None = None, width_px: int = DEFAULT_WIDTH_PX
) -> dict[str, Any]:
    """The chart's Vega-Lite spec with a fixed width where it had none, and `config` (e.g. presenter font sizes)."""
    spec = xml_safe(spec_dict(chart))  # new objects all the way: the page's chart is left as it was
    if "width" not in spec and not any(key in spec for key in COMPOSITE_KEYS):
        spec["width"] = width_px
    if config:
        spec["config"] = merge(spec.get("config", {}), config)
    return spec


def chart_png(
    chart: alt.TopLevelMixin,
    scale: float = DEFAULT_PNG_SCALE,
    config: dict[str, Any] | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
) -> bytes:
    """PNG bytes; the image is the chart's size in CSS pixels (axes, legend and padding included) times `scale`."""
    return vlc.vegalite_to_png(export_spec(chart, config, width_px), vl_version=vegalite_version(), scale=scale)


def chart_svg(chart: alt.TopLevelMixin, config: dict[str, Any] | None = None, width_px: int = DEFAULT_WIDTH_PX) -> str:
    """An SVG document (text stays text, so a slide tool can edit it)."""
    return vlc.vegalite_to_svg(export_spec(chart, config, width_px), vl_version=vegalite_version())
