"""Altair's shorthand channels (`encode(x="field:Q")`) and layers built at a fraction of their cost: its table of schema
classes built once per process instead of once per channel, a layer's data hashed by content, not printed, and each
spec shape validated once per process, not on every draw.

Why: Altair 6 wraps each shorthand channel through `SchemaBase.from_dict`, which hashes the JSON schema of every one of
its ~570 schema classes into a fresh lookup table each time (`_FromDict.__init__`; upstream vega/altair#3547 would
keep it). A chart of a dozen channels spent 100-150 ms there on this CPU: the Step page's fragment builds six charts
per click, and every page's charts hold the GIL that the device's timed passes share. The table depends only on the
classes, so it is kept per set of classes.

And: layering charts that carry their data (`base.mark_bar() + base.mark_rule()`) hashes each layer to name its view
(`Chart._compute_hash`), and that hash reads a DataFrame through `json.dumps(default=str)`, which prints the whole
frame as text: 10-15 ms a layer here, 40 ms of the Step page's time-split chart. The frame is hashed by its content
instead (`pandas.util.hash_pandas_object`); the name only matters to charts with selections, which this app has none
of.

And: every `to_dict()` of a whole chart (Streamlit's `st.altair_chart` calls it on every draw) validated its spec
against Vega-Lite's JSON schema: 40 % of that call's time, on every chart of every draw (the Step page's six charts: 285
ms of `to_dict()` a click here, 168 ms with each shape validated once). A chart's validity follows from its shape: its
keys, its strings (marks, types, orients, titles, fields) and its nesting; not from the numbers its data put in it, nor
from which dataset it names or how many values a custom sort lists. Each shape is validated the first time this process
draws it, by Altair itself (a bad one raises as before), and drawn unchecked after.

If Altair's internals change shape, nothing is patched and charts are built as before (each function says whether
it applied)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

_tables: dict[tuple[type, ...], object] = {}
_lock = threading.Lock()
# The digests of the spec shapes this process has validated. Bounded: a chart whose strings carry measured figures (a
# title with a time in it) is a new shape on every draw, and a server draws for days.
_validated_shapes: set[bytes] = set()
MAX_VALIDATED_SHAPES = 4096  # past it the set starts again: a shape seen before is validated once more, nothing else


def _install(owner: object, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace `owner.name` with `wrap(original)`, once; whether Altair is shaped as expected (the attribute is there).
    A second call finds the replacement and leaves it; the replacement keeps the original (`_explorer_original`), which
    the tests compare against."""
    original = getattr(owner, name, None) if owner is not None else None
    if original is None:
        return False
    if getattr(original, "_explorer_cached", False):
        return True
    patched = wrap(original)
    patched._explorer_cached = True  # type: ignore[attr-defined]
    patched._explorer_original = original  # type: ignore[attr-defined]
    setattr(owner, name, patched)
    return True


def cache_schema_table() -> bool:
    """Keep `_FromDict`'s table per set of wrapper classes; idempotent; whether Altair is shaped as expected."""
    try:
        from altair.utils import schemapi
    except ImportError:
        return False

    def kept_per_classes(build: Callable[..., None]) -> Callable[..., None]:
        def init_once(self: object, wrapper_classes: Iterable[type], /) -> None:
            classes = tuple(wrapper_classes)
            table = _tables.get(classes)
            if table is None:
                build(self, classes)
                with _lock:
                    table = _tables.setdefault(classes, self.class_dict)  # type: ignore[attr-defined]
            self.class_dict = table  # type: ignore[attr-defined]

        return init_once

    return _install(getattr(schemapi, "_FromDict", None), "__init__", kept_per_classes)


class FrameFingerprint:
    """What a layer's view hash reads in place of its DataFrame: str() gives the frame's shape, columns and a hash of
    its content (deterministic, as Altair's own hash is), computed without printing the frame."""

    name = None  # Altair's hash takes `data.name` where a data object has one

    def __init__(self, frame: object) -> None:
        import pandas as pd

        content = pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes()
        self.text = f"DataFrame{frame.shape} {list(frame.columns)} {hashlib.sha256(content).hexdigest()[:16]}"  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return self.text


def hash_layer_data_by_content() -> bool:
    """Have `alt.Chart._compute_hash` read a DataFrame's content hash instead of its printed text; idempotent; whether
    Altair is shaped as expected. A frame that pandas cannot hash (unhashable cells) is hashed as before."""
    try:
        import altair as alt
        import pandas as pd
    except ImportError:
        return False

    def by_content(original: Callable[[alt.Chart], str]) -> Callable[[alt.Chart], str]:
        def compute_hash(self: alt.Chart) -> str:
            data = self._kwds.get("data")
            if not isinstance(data, pd.DataFrame):
                return original(self)
            try:
                fingerprint = FrameFingerprint(data)
            except (TypeError, ValueError):
                return original(self)
            self._kwds["data"] = fingerprint  # only for the hash: the chart being built is this thread's alone
            try:
                return original(self)
            finally:
                self._kwds["data"] = data

        return compute_hash

    return _install(alt.Chart, "_compute_hash", by_content)


def spec_shape(spec: object) -> str:
    """What a spec's validity depends on, as text: keys, strings and nesting kept; each number, each dataset reference
    (`data`) and each list of plain values (a custom sort, a domain) reduced to its kind."""

    def shape(node: object, key: str | None = None) -> object:
        if key == "data":
            return "<data>"
        if isinstance(node, dict):
            return {k: shape(v, k) for k, v in node.items() if not (key is None and k == "datasets")}
        if isinstance(node, list):
            if all(not isinstance(v, dict | list) for v in node):
                return ["<values>", sorted({type(v).__name__ for v in node})]
            return [shape(v) for v in node]
        if isinstance(node, bool) or node is None or isinstance(node, str):
            return node
        return f"<{type(node).__name__}>"

    return json.dumps(shape(spec), sort_keys=True, default=str)


def _shape_digest(spec: object) -> bytes:
    return hashlib.sha256(spec_shape(spec).encode()).digest()


def validate_each_shape_once() -> bool:
    """Have a whole chart's `to_dict()` validate each spec shape (`spec_shape`) once per process; idempotent; whether
    Altair is shaped as expected. Any other call (`validate=False`, a chart inside another, the Vega format) is
    Altair's own."""
    try:
        from altair.vegalite.v6.api import TopLevelMixin
    except ImportError:
        return False

    def once_per_shape(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def to_dict(self: object, validate: bool = True, **kwargs: Any) -> dict[str, Any]:
            if not validate or kwargs.get("context") is not None or kwargs.get("format", "vega-lite") != "vega-lite":
                return original(self, validate, **kwargs)
            spec = original(self, False, **kwargs)
            shape = _shape_digest(spec)
            if shape in _validated_shapes:
                return spec
            # A new shape: built again with Altair's own validation (before its top-level additions, as only Altair
            # knows how), which raises Altair's own error. Once per shape, so not worth copying its internals for.
            spec = original(self, True, **kwargs)
            with _lock:
                if len(_validated_shapes) >= MAX_VALIDATED_SHAPES:
                    _validated_shapes.clear()
                _validated_shapes.add(shape)
            return spec

        return to_dict

    return _install(TopLevelMixin, "to_dict", once_per_shape)
