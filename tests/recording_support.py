"""Recordings made by hand for the tests: a bundled one taken apart, edited as JSON and packed again (no model)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

from explorer.recording.pdx import ATTENTION, META, TRACE, bundled

BASE = bundled()["short-chat"]  # 30 layers, a chat prompt, 32 new tokens (its path: a test may move the folder)
# Markdown and HTML a browser would render or fetch: a link, an image (a fetch), a tag with a handler, bold.
HOSTILE = "[click](http://127.0.0.1:8622/x) ![track](http://127.0.0.1:8622/t.png) <img src=x onerror=alert(1)> **b**"


def members_of(raw: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def pack_members(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    return out.getvalue()


def base_members(maps: bool = False) -> dict[str, bytes]:
    """The bundled recording's members; without its maps unless asked (the meta then names no layers)."""
    members = members_of(BASE.read_bytes())
    if not maps:
        members.pop(ATTENTION)
        meta = json.loads(members[META])
        meta.update(attention_layers=[], attention_note="")
        members[META] = json.dumps(meta).encode()
    return members


def edited(
    trace: Callable[[dict[str, Any]], object] | None = None, meta: Callable[[dict[str, Any]], object] | None = None
) -> bytes:
    """The bundled recording (no maps) with its trace's and meta's JSON changed in place."""
    members = base_members()
    for name, change in ((TRACE, trace), (META, meta)):
        if change is not None:
            data = json.loads(members[name])
            change(data)
            members[name] = json.dumps(data).encode()
    return pack_members(members)


def every_pass(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for passes in data["repeats"] for p in passes]


def forged_kv_recording(values: int = 15 << 20, key: bytes = b'"kv_layer_bytes"') -> bytes:
    """Under 100 KB: one pass's kv_layer_bytes is `values` zeros (15 Mi zeros: 30 MiB of `0,` in trace.json), under
    `key` (JSON lets a key be spelled with escapes, which a parser reads as the same name)."""
    members = base_members()
    text = members[TRACE]
    start = text.index(b'"kv_layer_bytes": [')
    end = text.index(b"]", start)
    members[TRACE] = text[:start] + key + b": [" + b"0," * (values - 1) + b"0" + text[end:]
    return pack_members(members)


def hostile_text_recording() -> bytes:
    """Every text field a page can show, of the meta and the trace, holding markdown and HTML."""

    def trace(data: dict[str, Any]) -> None:
        data.update(prompt_text=HOSTILE, generated_text=HOSTILE)
        data["prompt_tokens_text"] = [HOSTILE] * len(data["prompt_tokens_text"])
        data["model"].update(name=HOSTILE, display_name=HOSTILE, architecture=HOSTILE)
        data["device"].update(name=HOSTILE, notes=HOSTILE, busy_note=HOSTILE, bandwidth_counts=HOSTILE)
        for p in every_pass(data):
            p["token_text"] = HOSTILE
            for top in p["top_tokens"]:
                top["text"] = HOSTILE

    def meta(data: dict[str, Any]) -> None:
        data.update(name=HOSTILE, title=HOSTILE, model=HOSTILE, device=HOSTILE, command=HOSTILE)
        data.update(attention_note=HOSTILE)

    return edited(trace, meta)


def device(**changes: object) -> Callable[[], bytes]:
    return lambda: edited(lambda d: d["device"].update(changes))


def model(**changes: object) -> Callable[[], bytes]:
    return lambda: edited(lambda d: d["model"].update(changes))


def short_prompt(tokens: int) -> Callable[[dict[str, Any]], None]:
    """The prompt cut to its first `tokens`: the prefill and every cache length made to agree (a consistent run)."""

    def change(data: dict[str, Any]) -> None:
        data["prompt_token_ids"] = data["prompt_token_ids"][:tokens]
        data["prompt_tokens_text"] = data["prompt_tokens_text"][:tokens]
        for passes in data["repeats"]:
            for i, p in enumerate(passes):
                p.update(cache_len_before=0 if i == 0 else tokens + i - 1, cache_len_after=tokens + i)
                if i == 0:
                    p.update(tokens_in=tokens, input_token_ids=data["prompt_token_ids"])

    return change


def prompt_only(tokens: int) -> Callable[[dict[str, Any]], None]:
    """The prompt cut to `tokens` but the passes left as recorded: they contradict it."""

    def change(data: dict[str, Any]) -> None:
        data["prompt_token_ids"] = data["prompt_token_ids"][:tokens]
        data["prompt_tokens_text"] = data["prompt_tokens_text"][:tokens]

    return change


def one_pass(data: dict[str, Any]) -> None:
    data["repeats"] = [passes[:1] for passes in data["repeats"]]


def many_layers(layers: int) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["model"]["layers"] = layers
        for p in every_pass(data):
            p["kv_layer_bytes"] = [p["kv_cache_bytes"] // layers] * layers

    return change


# (name, the file, words the one line holds): each refused when opened, by hand, by link and by upload.
REFUSED: list[tuple[str, Callable[[], bytes], str]] = [
    ("30 MiB of kv_layer_bytes", forged_kv_recording, "kv_layer_bytes"),
    ("peak_flops 0", device(peak_flops=0.0), "device.peak_flops"),
    ("bandwidth 0", device(bandwidth_bytes_per_s=0.0), "device.bandwidth_bytes_per_s"),
    ("read bandwidth 0", device(read_bandwidth_bytes_per_s=0.0), "device.read_bandwidth_bytes_per_s"),
    ("kv_heads 0", model(kv_heads=0), "model.kv_heads"),
    ("device kind tpu", device(kind="tpu"), "device.kind"),
    ("layers 10**12", model(layers=10**12), "model.layers"),
    ("3 prompt tokens, a 40-token prefill", lambda: edited(prompt_only(3)), "input_token_ids"),
    ("a layer short", lambda: edited(lambda d: every_pass(d)[3]["kv_layer_bytes"].pop()), "kv_layer_bytes"),
    ("a cache that skips", lambda: edited(lambda d: every_pass(d)[2].update(cache_len_before=99)), "cache_len_before"),
    ("weight_bytes 0", model(weight_bytes=0), "model.weight_bytes"),
    ("a pass that took no time", lambda: edited(lambda d: every_pass(d)[-1].update(wall_s=0.0)), "wall_s"),
    ("a pass with no maths", lambda: edited(lambda d: every_pass(d)[0]["cost"].update(flops=0)), "cost.flops"),
    ("meta's device kind tpu", lambda: edited(meta=lambda d: d.update(device_kind="tpu")), "device_kind"),
]
# (name, the file): at the edge of what is allowed, so every page draws it.
BOUNDARY: list[tuple[str, Callable[[], bytes]]] = [
    ("figures at their floor", device(peak_flops=1.0, bandwidth_bytes_per_s=1.0, read_bandwidth_bytes_per_s=1.0)),
    ("figures at their ceiling", device(peak_flops=1e21, bandwidth_bytes_per_s=1e21, read_bandwidth_bytes_per_s=1e21)),
    ("one kv head", model(kv_heads=1)),
    ("one prompt token, one pass", lambda: edited(lambda d: (short_prompt(1)(d), one_pass(d)))),
    ("1,024 layers", lambda: edited(many_layers(1024))),
]


def smallest(data: dict[str, Any]) -> None:
    data["device"].update(peak_flops=1.0, bandwidth_bytes_per_s=1.0, read_bandwidth_bytes_per_s=1.0)
    data["model"].update(kv_heads=1)
    short_prompt(1)(data)
    one_pass(data)


def largest(data: dict[str, Any]) -> None:
    data["device"].update(peak_flops=1e21, bandwidth_bytes_per_s=1e21, read_bandwidth_bytes_per_s=1e21)
    data["model"].update(kv_heads=data["model"]["heads"])
    many_layers(1024)(data)


# Every boundary at once, at each end: what the pages draw (each page is drawn twice, not once per boundary).
PAGE_BOUNDARIES: list[tuple[str, Callable[[], bytes]]] = [
    ("every figure and count at its floor", lambda: edited(smallest)),
    ("every figure and count at its ceiling", lambda: edited(largest)),
]
