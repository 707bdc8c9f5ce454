"""What a visitor reads on a page, collected from an AppTest run, and the raw names, booleans, `None`s and unit-less
large numbers in it: markdown, captions, alerts, titles, metrics, plain text, expander and widget labels, every
table's column labels and cells, and every chart's titles, axis and legend titles and the labels its data draws."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block, Element, UnknownElement

# A snake_case identifier (`wall_over_roofline`, `tpot_ms`), or a name cut off after its underscore (`t_…`, `t_*`).
SNAKE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*_(?:[a-z0-9]+(?:_[a-z0-9]+)*)?(?![\w/.-]*\.(?:py|json|csv|pdx)\b)")
NONE = re.compile(r"\b(?:None|nan|NaN)\b")
BOOLEAN = re.compile(r"\b(?:true|false|True|False)\b")
# Five or more digits with no thousands separator, not the decimals of a number (0.000123) nor part of a word or
# date: 6696000 is unreadable, 6,696,000 or 6.7 s is not.
LONG_NUMBER = re.compile(r"(?<![\w.,:/-])\d{5,}(?![\w,])(?!\.\d)")
EMPHASIS = re.compile(r"(?<!\w)_([^_\n]+)_(?!\w)")  # markdown's _italic_: its underscores are never drawn
INLINE_CODE = re.compile(r"`[^`\n]*`")  # a command or a file name, quoted as code: allowed, said by the markup
GUIDE_CHANNELS = ("x", "y", "color", "fill", "stroke", "shape", "size", "opacity", "strokeDash", "row", "column")
LABEL_CHANNELS = ("x", "y", "color", "fill", "stroke", "shape", "strokeDash", "row", "column", "facet")
GUIDE_KEY = {"x": "axis", "y": "axis", "row": "header", "column": "header", "facet": "header"}
GROUPING_FORMATS = {"localized", "compact", "accounting"}  # st.column_config formats that group thousands


@dataclass(frozen=True)
class Piece:
    """One piece of text a visitor can read: where it is drawn and the text itself."""

    where: str  # e.g. "markdown", "table 'Passes' column", "chart 2 axis title"
    text: str


@dataclass(frozen=True)
class Finding:
    """A piece of text that breaks a rule."""

    page: str
    where: str
    rule: str  # "raw name", "None", "boolean", "unit-less large number"
    found: str
    text: str

    def __str__(self) -> str:
        return f"{self.page} · {self.where}: {self.rule} {self.found!r} in {self.text[:160]!r}"


def _markdown_as_drawn(text: str) -> str:
    """Markdown source as the reader sees it: backslash escapes and _emphasis_ markers gone, inline code left out."""
    text = INLINE_CODE.sub(" ", text)
    text = re.sub(r"\\(.)", r"\1", text)
    return EMPHASIS.sub(r"\1", text)


def _frame_pieces(frame: pd.DataFrame, where: str, grouped: set[str]) -> Iterator[Piece]:
    """A table's column labels and text cells, and what a grid would print as `None`, `true`/`false` or a long number:
    an empty cell, a boolean column, a number of five or more digits in a column not formatted in thousands
    (`grouped`: the columns whose configured format groups them)."""
    for column in frame.columns:
        yield Piece(f"{where} column label", str(column))
        values = frame[column]
        if pd.api.types.is_bool_dtype(values):
            yield Piece(f"{where} column {column!r}", "true/false cells (a boolean column)")
            continue
        nulls = values.isna()
        if nulls.any():
            yield Piece(f"{where} column {column!r}", "None (an empty cell)")
        if pd.api.types.is_numeric_dtype(values) and str(column) not in grouped:
            largest = values[~nulls].abs().max() if (~nulls).any() else 0
            if largest >= 10_000:
                yield Piece(f"{where} column {column!r}", f"{largest:.0f} (a number not grouped in thousands)")
            continue
        for value in values[~nulls].unique()[:200]:
            if isinstance(value, bool):
                yield Piece(f"{where} column {column!r}", str(value))
            elif isinstance(value, str):  # a static table's cells are markdown: read as drawn
                yield Piece(f"{where} column {column!r}", _markdown_as_drawn(value) if where == "table" else value)


def _grouped_columns(element: Element) -> set[str]:
    """The columns of an st.dataframe whose configured number format groups thousands."""
    try:
        config = json.loads(element.proto.columns or "{}")
    except (AttributeError, ValueError):
        return set()
    return {
        name
        for name, settings in config.items()
        if str(settings.get("type_config", {}).get("format", "")) in GROUPING_FORMATS
    }


def _frames_of(element: Element) -> pd.DataFrame | None:
    try:
        return element.value
    except Exception:  # noqa: BLE001 - an element with no readable table
        return None


def _chart_datasets(proto: object) -> dict[str | None, pd.DataFrame]:
    from streamlit import dataframe_util

    frames: dict[str | None, pd.DataFrame] = {}
    for named in proto.datasets:
        frames[named.name] = dataframe_util.convert_arrow_bytes_to_pandas_df(named.data.data)
    if proto.data.data:
        frames[None] = dataframe_util.convert_arrow_bytes_to_pandas_df(proto.data.data)
    return frames


def _title_texts(title: object) -> Iterator[str]:
    if isinstance(title, str):
        yield title
    elif isinstance(title, list):
        yield from (str(t) for t in title)
    elif isinstance(title, dict):
        for key in ("text", "subtitle"):
            yield from _title_texts(title.get(key))


def _units(spec: dict) -> Iterator[tuple[dict, object, int]]:
    """Every unit spec with the data it reads (its own, else its parent's) and the layer group whose axes and
    legends it shares (Vega-Lite merges a layer's guides: an explicit title there hides a sibling's field name)."""
    stack = [(spec, spec.get("data"), id(spec))]
    while stack:
        unit, data, group = stack.pop()
        data = unit.get("data", data)
        yield unit, data, group
        for key in ("layer", "hconcat", "vconcat", "concat"):
            stack.extend((child, data, group if key == "layer" else id(child)) for child in unit.get(key, []))
        if isinstance(unit.get("spec"), dict):
            stack.append((unit["spec"], data, id(unit["spec"])))


def _guide(name: str, channel: dict) -> object:
    return channel.get(GUIDE_KEY.get(name, "legend"), {})


def _guide_title(name: str, channel: dict) -> tuple[object, bool]:
    """The title a channel gives its axis, legend or header, and whether it is explicit (else the field's name)."""
    guide = _guide(name, channel)
    guide = guide if isinstance(guide, dict) else {}
    if "title" in guide:
        return guide["title"], True
    if "title" in channel:
        return channel["title"], True
    return channel.get("field", channel.get("aggregate")), False


def _label_pieces(name: str, channel: dict, frame: pd.DataFrame | None, where: str) -> Iterator[Piece]:
    """The labels a channel draws from its data: a nominal axis's or legend's values, a text mark's values."""
    guide = _guide(name, channel)
    if name == "text" and "datum" in channel:
        yield Piece(f"{where} text", str(channel["datum"]))
    field = channel.get("field")
    if guide is None or field is None or frame is None or field not in frame.columns:
        return
    if isinstance(guide, dict) and "labelExpr" in guide:
        return
    values = frame[field].dropna().unique()[:200]
    if name == "text":
        if "format" not in channel:
            yield from (Piece(f"{where} text", str(v)) for v in values)
        return
    if name == "tooltip" and channel.get("type") in ("nominal", "ordinal", None):  # a value as the tooltip prints it
        yield from (Piece(f"{where} tooltip value", str(v).lower() if isinstance(v, bool) else str(v)) for v in values)
        return
    if name in LABEL_CHANNELS and channel.get("type") in ("nominal", "ordinal"):
        yield from (Piece(f"{where} {name} label", str(v)) for v in values)


def chart_pieces(proto: object, where: str) -> Iterator[Piece]:
    """A chart's drawn text: titles, axis, legend and header titles (a field's own name when no layer sharing the
    guide gives one), the labels of its nominal and ordinal channels, its text marks (unformatted values as they are),
    and its tooltips' titles."""
    spec = json.loads(proto.spec)
    frames = _chart_datasets(proto)
    titles: dict[tuple[int, str], list[tuple[object, bool]]] = {}
    for unit, data, group in _units(spec):
        yield from (Piece(f"{where} title", text) for text in _title_texts(unit.get("title")))
        mark = unit.get("mark")
        if isinstance(mark, dict) and isinstance(mark.get("text"), str | list):
            yield from (Piece(f"{where} text mark", t) for t in _title_texts(mark["text"]))
        frame = frames.get(data.get("name")) if isinstance(data, dict) else frames.get(None)
        for name, channel in (unit.get("encoding") or {}).items():
            for one in channel if isinstance(channel, list) else [channel]:
                if not isinstance(one, dict):
                    continue
                yield from _label_pieces(name, one, frame, where)
                if name == "tooltip":
                    yield from (Piece(f"{where} tooltip", t) for t in _title_texts(_guide_title(name, one)[0]))
                elif name in GUIDE_CHANNELS and _guide(name, one) is not None:
                    titles.setdefault((group, name), []).append(_guide_title(name, one))
    for (_, name), given in titles.items():
        explicit = [title for title, is_explicit in given if is_explicit]
        for title in explicit or [title for title, _ in given]:
            yield from (Piece(f"{where} {name} title", text) for text in _title_texts(title))


def walk(node: Block | Element) -> Iterator[Element | Block]:
    """A block and everything inside it, in the order drawn."""
    yield node
    for child in getattr(node, "children", {}).values():
        yield from walk(child)


def _element_pieces(element: Element | Block, charts: list[int]) -> Iterator[Piece]:
    kind = element.type
    if isinstance(element, Block):
        label = getattr(getattr(element.proto, "expandable", None), "label", "")
        if label:
            yield Piece("expander", _markdown_as_drawn(label))
        return
    if kind in ("markdown", "caption", "title", "header", "subheader", "info", "warning", "error", "success"):
        yield Piece(kind, _markdown_as_drawn(element.value))
    elif kind == "text":
        yield Piece(kind, element.value)
    elif kind == "metric":
        yield Piece("metric label", _markdown_as_drawn(element.label))
        yield Piece("metric value", element.value)
        if element.delta:
            yield Piece("metric delta", element.delta)
    elif kind in ("dataframe", "table"):
        frame = _frames_of(element)
        if frame is not None:
            yield from _frame_pieces(frame, kind, _grouped_columns(element) if kind == "dataframe" else set())
    elif kind == "vega_lite_chart" and isinstance(element, UnknownElement):
        charts.append(1)
        yield from chart_pieces(element.proto, f"chart {len(charts)}")
    elif hasattr(element, "label") and isinstance(element.label, str):
        yield Piece(f"{kind} label", _markdown_as_drawn(element.label))
        for option in getattr(element, "options", []) or []:
            yield Piece(f"{kind} option", str(option))


def page_pieces(at: AppTest) -> list[Piece]:
    """Every piece of text the page's main area and the sidebar draw (code blocks left out: a command or the
    prompt's own text is quoted as code, which says it is verbatim)."""
    charts: list[int] = []
    pieces: list[Piece] = []
    for root in (at.main, at.sidebar):
        for element in walk(root):
            pieces.extend(_element_pieces(element, charts))
    return pieces


def _large_unitless(text: str) -> Iterator[str]:
    yield from (match.group() for match in LONG_NUMBER.finditer(text))


def findings(page: str, pieces: list[Piece], allowed: dict[str, str] | None = None) -> list[Finding]:
    """The raw names, `None`s, booleans and unit-less large numbers in `pieces`; `allowed` maps a pattern (a regular
    expression) for text that is meant as it is to the reason it is: what it matches is left out before the rules."""
    allowed = allowed or {}
    found: list[Finding] = []
    for piece in pieces:
        text = piece.text
        for meant in allowed:
            text = re.sub(meant, " ", text)
        for rule, hits in (
            ("raw name", SNAKE.findall(text)),
            ("None", NONE.findall(text)),
            ("boolean", BOOLEAN.findall(text)),
            ("unit-less large number", list(_large_unitless(text))),
        ):
            found.extend(Finding(page, piece.where, rule, hit, piece.text) for hit in hits)
    return found


# --- one name, one figure (issue 42) -----------------------------------------------------------------------------
BYTES = r"(\d[\d,]*(?:\.\d+)?)\s(B|kB|MB|GB)\b"
BYTE_UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}  # as `explorer.core.units.human_bytes` writes them (SI)
# A byte figure said to be the cache itself: "2.30 MB of KV cache", "KV cache now 2.30 MB", "the 2.30 MB cache", or a
# bare "2.30 MB of KV" (the Latency wording, which reads as the cache); "of KV traffic" is not the cache.
CACHE_FIGURES = (
    re.compile(BYTES + r"\sof\sKV\scache\b"),
    re.compile(BYTES + r"\sof\sKV(?!\s(?:traffic|cache|heads?|blocks?))\b"),
    re.compile(r"\bKV\scache(?:\snow|\sheld)?:?\s\(?" + BYTES),
    re.compile(r"\bthe\s" + BYTES + r"\s(?:KV\s)?cache\b"),
)
# What a clause says the cache is sized at: "at 8,192 tokens", "of 8,192 tokens", "after 40 positions", "× batch 32".
CONTEXT = re.compile(r"\b(?:[Aa]t|of|after)\s(?:the\smodel's\smaximum\sof\s)?([\d,]+)\s(?:tokens|positions)\b")
BATCH = re.compile(r"\bbatch\s([\d,]+)\b")
DECODE_MEDIAN = re.compile(r"(\d[\d,]*(?:\.\d+)?\s(?:ms|s))\s\((?:measured|recorded),\smedian\sof\s([\d,]+)\)")
UNDER_LOAD_WORDS = re.compile(r"\bunder\sload\b")


@dataclass(frozen=True)
class CacheFigure:
    """A byte figure a page calls the KV cache, with the context and batch its clause sizes it at (None: the run's)."""

    bytes: float
    text: str  # the clause it was read from
    context: int | None
    batch: int | None


def _clauses(pieces: list[Piece]) -> Iterator[str]:
    """Each piece's clauses (split at ';' and sentence ends), a metric's label and value read as one clause."""
    for piece, following in zip(pieces, [*pieces[1:], None]):
        if piece.where == "metric value":
            continue
        text = piece.text
        if piece.where == "metric label" and following is not None and following.where == "metric value":
            text = f"{text} {following.text}"
        yield from (c for c in re.split(r";\s|\.\s", text) if c.strip())


def cache_figures(pieces: list[Piece]) -> list[CacheFigure]:
    """Every byte figure the pieces call the KV cache itself, with the context and batch their clause names."""
    found = []
    for clause in _clauses(pieces):
        context, batch = CONTEXT.search(clause), BATCH.search(clause)
        for pattern in CACHE_FIGURES:
            for match in pattern.finditer(clause):
                found.append(
                    CacheFigure(
                        float(match.group(1).replace(",", "")) * BYTE_UNITS[match.group(2)],
                        clause,
                        int(context.group(1).replace(",", "")) if context else None,
                        int(batch.group(1).replace(",", "")) if batch else None,
                    )
                )
    return found


def decode_medians(pieces: list[Piece]) -> set[str]:
    """Every decode median a page states ("86.1 ms (measured, median of 14)"), as its figure and count: "86.1 ms,
    median of 14"."""
    return {f"{m.group(1)}, median of {m.group(2)}" for piece in pieces for m in DECODE_MEDIAN.finditer(piece.text)}


def under_load_mentions(pieces: list[Piece]) -> list[Piece]:
    """Every piece that says the device figures were taken under load."""
    return [piece for piece in pieces if UNDER_LOAD_WORDS.search(piece.text)]
