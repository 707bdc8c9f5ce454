"""A recording: one finished run in one file (`.pdx`), so a talk or a shared link can show it with no model loaded.

A `.pdx` is a zip of three members:
- `meta.json`: what the recording is (`RecordingMeta`): its name, what it shows, the model, device, dtype and date,
  the command that made it;
- `trace.json`: the run's `Trace`, exactly as `Trace.to_json` writes it;
- `attention.npz` (optional): the attention maps in float16, `prefill_L{layer}` (heads, T, T) and `decode_L{layer}`
  (heads, sum of the decode passes' cache lengths: every decode row of that layer, one after another).

Why a size budget: a recording is something to mail, commit and upload, so it stays under `MAX_RECORDING_BYTES`. A
short prompt keeps every layer's maps; a long one keeps an evenly spread subset of layers (the Attention page lets a
visitor pick among the layers present), and one too long for even a single layer keeps none, saying so.

Torch-free: opening a recording (the app, its tests, an upload) never imports torch. Reading checks every member
(`explorer.recording.checks.read_recording`): an uploaded file is data from anyone.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from explorer.core.attention_maps import AttentionMaps
from explorer.core.trace import JsonRecord, Trace

SUFFIX = ".pdx"
FORMAT_VERSION = 1
MAX_RECORDING_BYTES = 5_000_000  # "under 5 MB": the whole file, compressed
META, TRACE, ATTENTION = "meta.json", "trace.json", "attention.npz"
BUNDLED_DIR = Path(__file__).resolve().parents[2] / "recordings"
MAX_COMMAND_CHARS = 2_000  # meta.json's one-line fields are at most this long (recording_checks.MAX_LINE_CHARS)
CUT_MARKER = " … [command cut at 2,000 characters]"
TOO_BIG_FOR_MAPS = "This recording holds no attention maps: even one layer's would pass the {limit} size budget."


@dataclass(frozen=True)
class RecordingMeta(JsonRecord):
    """What a recording is, for its banner and the sidebar's list: never mistakable for a live run."""

    name: str  # the file's stem: "short-chat"
    title: str  # what it shows: "A short chat prompt, 32 new tokens"
    recorded_at: str  # ISO time the run was made
    model: str  # the model's display name
    device: str  # the device's name, e.g. "CPU (2 cores)" or a GPU's name
    device_kind: str  # "cpu" | "cuda"
    dtype: str
    command: str  # how it was made, e.g. "python -m explorer run --prompt ... --record short-chat.pdx"
    attention_layers: tuple[int, ...]  # the layers whose maps it holds; () for none
    attention_note: str  # why maps are missing or partial; "" when every layer is there
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, trace: Trace, name: str, command: str, title: str | None = None) -> RecordingMeta:
        """What the trace says of itself (model, device, dtype, date); the layers are filled in when it is packed."""
        return cls(
            name=name,
            title=title or describe(trace),
            recorded_at=trace.created_at,
            model=trace.model.display_name,
            device=trace.device.name,
            device_kind=trace.device.kind,
            dtype=trace.model.dtype,
            command=short_command(command),
            attention_layers=(),
            attention_note="",
        )

    @property
    def banner(self) -> str:
        """One line: what this is, that it is recorded, and where and when."""
        day, _, clock = self.recorded_at.partition("T")
        return (
            f"Recorded run, not live: “{self.name}” — {self.model} · {self.dtype} on {self.device} · recorded "
            f"{day} {clock[:5]} UTC"
        )


@dataclass(frozen=True)
class Recording:
    meta: RecordingMeta
    trace: Trace
    attention: AttentionMaps | None


def short_command(command: str) -> str:
    """The command as typed, cut with a marker where it passes MAX_COMMAND_CHARS: a long command line (a long
    --prompt) never makes a recording fail."""
    if len(command) <= MAX_COMMAND_CHARS:
        return command
    return command[: MAX_COMMAND_CHARS - len(CUT_MARKER)] + CUT_MARKER


def describe(trace: Trace) -> str:
    """A default title, computed from the run: what the recording shows."""
    repeats = f", {trace.repeat_count} repeats" if trace.repeat_count > 1 else ""
    return (
        f"{trace.prompt_len}-token prompt, {trace.new_tokens} new tokens, {trace.model.dtype} on "
        f"{trace.device.name}{repeats}"
    )


def spread_layers(layers: tuple[int, ...], count: int) -> tuple[int, ...]:
    """`count` of `layers`, evenly spread from first to last (one: the middle layer, the Attention page's default)."""
    if count >= len(layers):
        return layers
    if count == 1:
        return (layers[len(layers) // 2],)
    picks = np.linspace(0, len(layers) - 1, count).round().astype(int)
    return tuple(layers[i] for i in sorted(set(picks.tolist())))


def maps_npz(maps: AttentionMaps) -> bytes:
    """The maps as an uncompressed .npz (the zip around it compresses): float16, decode rows joined per layer."""
    arrays: dict[str, np.ndarray] = {
        "tokens_text": np.array(maps.tokens_text, dtype=str),
        "replay_token_ids": np.array(maps.replay_token_ids, dtype=np.int64),
    }
    for layer in maps.layers:
        arrays[f"prefill_L{layer}"] = maps.prefill[layer].astype(np.float16)
        rows = maps.decode[layer]
        heads = maps.prefill[layer].shape[0]
        arrays[f"decode_L{layer}"] = (
            np.concatenate(rows, axis=1).astype(np.float16) if rows else np.zeros((heads, 0), np.float16)
        )
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def only_layers(maps: AttentionMaps, layers: tuple[int, ...]) -> AttentionMaps:
    return replace(
        maps,
        layers=layers,
        prefill={i: maps.prefill[i] for i in layers},
        decode={i: maps.decode[i] for i in layers},
    )


def pack(meta: RecordingMeta, trace: Trace, maps: AttentionMaps | None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(META, meta.to_json())
        archive.writestr(TRACE, trace.to_json())
        if maps is not None:
            archive.writestr(ATTENTION, maps_npz(maps))
    return out.getvalue()


def recording_bytes(
    meta: RecordingMeta, trace: Trace, maps: AttentionMaps | None, limit: int = MAX_RECORDING_BYTES
) -> bytes:
    """The file, under `limit`: every layer's maps if they fit, else the most evenly spread layers that do, else
    none (the meta says which layers it holds and why)."""
    count = len(maps.layers) if maps is not None else 0
    while True:
        kept = only_layers(maps, spread_layers(maps.layers, count)) if maps is not None and count else None
        note = meta.attention_note
        if maps is not None and kept is None:
            note = TOO_BIG_FOR_MAPS.format(limit=f"{limit / 1e6:g} MB")
        elif maps is not None and len(kept.layers) < len(maps.layers):
            note = (
                f"This recording keeps the maps of {len(kept.layers)} of the run's {len(maps.layers)} captured layers "
                f"(evenly spread), to stay under {limit / 1e6:g} MB."
            )
        described = replace(meta, attention_layers=kept.layers if kept else (), attention_note=note)
        raw = pack(described, trace, kept)
        if len(raw) < limit or count == 0:
            return raw
        count = count // 2 if count > 1 else 0


def bundled() -> dict[str, Path]:
    """The recordings shipped in `recordings/`, by name (the file's stem), sorted."""
    if not BUNDLED_DIR.is_dir():
        return {}
    return {path.stem: path for path in sorted(BUNDLED_DIR.glob(f"*{SUFFIX}"))}
