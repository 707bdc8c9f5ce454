"""A stepped request as the web tier holds it: no model, no cache, no torch. The device owner keeps the request itself
(`explorer.labs.step_mode.SteppedRequest`, by its handle, `explorer.owner.steps`); each Prefill and Next token job sends
back what a page draws (the trace so far, the newest attention rows), and the session keeps it here.

The attention maps travel once whole (the prefill's T x T map, `maps_to_wire`), then one decode row per layer per
pass (`newest_row_to_wire`): a Next token sends kilobytes, not the whole map again."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from explorer.core.attention_maps import AttentionMaps, maps_from_wire
from explorer.core.request import Request
from explorer.core.trace import PassRecord, Trace

GONE = "This stepped request is gone (freed after being idle, or the device restarted): press Prefill again."


@dataclass(frozen=True)
class SteppedView:
    """The session's stepped request: its owner's handle, the request, its trace so far (the finished run's once
    `done`) and its attention maps so far."""

    handle: str
    request: Request
    trace: Trace
    maps: AttentionMaps
    done: bool

    @property
    def passes(self) -> tuple[PassRecord, ...]:
        return tuple(self.trace.passes)

    @classmethod
    def first(cls, request: Request, data: dict[str, Any]) -> SteppedView:
        """From a "prefill" job's done data."""
        trace, maps = Trace.from_dict(data["trace"]), maps_from_wire(data["maps"])
        return cls(data["handle"], request, trace, maps, data["finished"])

    def then(self, data: dict[str, Any]) -> SteppedView:
        """After a "step" job: its done data (the trace so far, the newest rows) added."""
        maps = with_newest_row(self.maps, data["row"])
        return replace(self, trace=Trace.from_dict(data["trace"]), maps=maps, done=data["finished"])


def newest_row_to_wire(maps: AttentionMaps) -> str:
    """The newest decode pass's rows (one per layer), its token's text and its replay's token, as base64 of one .npz
    (float16, as captured)."""
    arrays: dict[str, np.ndarray] = {
        "token_text": np.array(maps.tokens_text[-1:], dtype=str),
        "replay_token_id": np.array(maps.replay_token_ids[-1:], dtype=np.int64),
    }
    for layer in maps.layers:
        arrays[f"decode_L{layer}"] = maps.decode[layer][-1]
    out = io.BytesIO()
    np.savez(out, **arrays)
    return base64.b64encode(out.getvalue()).decode("ascii")


def with_newest_row(maps: AttentionMaps, text: str) -> AttentionMaps:
    """`maps` with the rows of `newest_row_to_wire` appended (no pickles are read)."""
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    return replace(
        maps,
        tokens_text=maps.tokens_text + tuple(str(t) for t in arrays["token_text"]),
        decode={layer: maps.decode[layer] + (arrays[f"decode_L{layer}"],) for layer in maps.layers},
        replay_token_ids=maps.replay_token_ids + tuple(int(t) for t in arrays["replay_token_id"]),
    )
