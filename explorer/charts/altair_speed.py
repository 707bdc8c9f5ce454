"""Altair's shorthand channels (`encode(x="field:Q")`) and layers built at a fraction of their cost: its table of schema
classes built once per process instead of once per channel, and a layer's data hashed by content, not printed.

Why: Altair 6 wraps each shorthand channel through `SchemaBase.from_dict`, which hashes the JSON schema of every one of
its ~570 schema classes into a fresh lookup table each time (`_FromDict.__init__`; upstream vega/altair#3547 would
keep it). A chart of a dozen channels spent 100-150 ms there on this CPU: the Step page's fragment builds six charts
per click, and every page's charts hold the GIL that the device's timed passes share. The table depends only on the
classes, so it is kept per set of classes.

And: layering charts that carry their data (`base.mark_bar() + base.mark_rule()`) hashes each layer to name its view
(`Chart._compute_hash`), and that hash reads a DataFrame through `json.dumps(default=str)`, which prints the whole
frame as text: 10-15 ms a layer here, 40 ms of the Step page's time-split chart. The frame is hashed by its content
instead (`pandas.util.hash_pandas_object`); the name only matters to charts with selections, which this app has none
of. If Altair's internals change shape, nothing is patched and charts are built as before (each function says whether
it applied)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

_tables: dict[tuple[type, ...], object] = {}
_lock = threading.Lock()


def cache_schema_table() -> bool:
    """Keep `_FromDict`'s table per set of wrapper classes; idempotent; whether Altair is shaped as expected."""
    try:
        from altair.utils import schemapi
    except ImportError:
        return False
    converter = getattr(schemapi, "_FromDict", None)
    build = getattr(converter, "__init__", None)
    if converter is None or build is None:
        return False
    if getattr(build, "_explorer_cached", False):
        return True

    def init_once(self: object, wrapper_classes: Iterable[type], /) -> None:
        classes = tuple(wrapper_classes)
        table = _tables.get(classes)
        if table is None:
            build(self, classes)
            with _lock:
                table = _tables.setdefault(classes, self.class_dict)  # type: ignore[attr-defined]
        self.class_dict = table  # type: ignore[attr-defined]

    init_once._explorer_cached = True  # type: ignore[attr-defined]
    init_once._explorer_original = build  # type: ignore[attr-defined] - what a test compares against
    converter.__init__ = init_once
    return True


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
    original = getattr(alt.Chart, "_compute_hash", None)
    if original is None:
        return False
    if getattr(original, "_explorer_cached", False):
        return True

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

    compute_hash._explorer_cached = True  # type: ignore[attr-defined]
    compute_hash._explorer_original = original  # type: ignore[attr-defined] - what a test compares against
    alt.Chart._compute_hash = compute_hash  # type: ignore[method-assign]
    return True
