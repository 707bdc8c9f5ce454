"""Altair's shorthand channels (`encode(x="field:Q")`) built at a fraction of their cost: its table of schema classes,
built once per process instead of once per channel.

Why: Altair 6 wraps each shorthand channel through `SchemaBase.from_dict`, which hashes the JSON schema of every one of
its ~570 schema classes into a fresh lookup table each time (`_FromDict.__init__`; upstream vega/altair#3547 would
keep it). A chart of a dozen channels spent 100-150 ms there on this CPU: the Step page's fragment builds six charts
per click, and every page's charts hold the GIL that the device's timed passes share. The table depends only on the
classes, so it is kept per set of classes. If Altair's internals change shape, nothing is patched and charts are
built as before (`cache_schema_table` says whether it applied)."""

from __future__ import annotations

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
