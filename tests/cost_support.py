"""What the Cost page's chart tests share: hand-made device figures, and a tiny model's measured run."""

from __future__ import annotations

from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.trace import DeviceProfile, Trace

HAND = DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")  # ridge 10 FLOP/B


def tiny_run(lm: LoadedModel) -> Trace:
    """A tiny model's measured run of 8 tokens."""
    return measure(lm, Request("abc", max_new_tokens=8))
