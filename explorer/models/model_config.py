"""A local model's config.json checked before transformers reads it: a regular file of bounded size, nesting bounded,
and the sizes a model is built from whole numbers in range, each refused in one line naming the field (transformers
would otherwise fail in its own words, or try to allocate a 10**12-row embedding)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED, MAX_CONFIG_BYTES, read_small_file
from explorer.scale.config import shape_key

MAX_DEPTH = 8  # a config nests 2-4 deep (text_config > rope_scaling > ...)
# The sizes a decoder is built from: whole numbers from 1 to a bound past any published model's. Required ones must
# be there as numbers where the config names them; optional ones may also be null (transformers then derives them).
REQUIRED = {
    "vocab_size": 1 << 24,
    "hidden_size": 1 << 17,
    "num_hidden_layers": 1024,
    "num_attention_heads": 1024,
}
OPTIONAL = {
    "num_key_value_heads": 1024,
    "head_dim": 4096,
    "intermediate_size": 1 << 20,
    "max_position_embeddings": 1 << 24,
    "n_layer": 1024,
    "n_head": 1024,
    "n_embd": 1 << 17,
    "n_positions": 1 << 24,
    "n_inner": 1 << 20,
}


def refuse(name: str, field: str, must: str, value: object) -> BadInput:
    shown = json.dumps(value)[:40] if not isinstance(value, dict | list) else type(value).__name__
    return BadInput(f"Model '{name}': config.json: {field}: must be {must}, not {shown}.")


def depth_of(value: object, limit: int) -> int:
    """How deep `value` nests, counted without recursion and stopping past `limit`."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            todo.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_sizes(config: dict[str, Any], name: str, where: str = "") -> None:
    for field, bound in (REQUIRED | OPTIONAL).items():
        if field not in config or (config[field] is None and field in OPTIONAL):
            continue
        value = config[field]
        if type(value) is not int or not 1 <= value <= bound:
            raise refuse(name, where + field, f"a whole number from 1 to {bound:,}", value)


def check_config(data: object, name: str) -> None:
    """The parsed config.json: an object, nesting at most MAX_DEPTH, every size in range (its text_config's too)."""
    if not isinstance(data, dict):
        raise refuse(name, "the file", "a JSON object", data)
    if depth_of(data, MAX_DEPTH) > MAX_DEPTH:
        raise BadInput(f"Model '{name}': config.json nests deeper than {MAX_DEPTH} levels: it is no model's config.")
    check_sizes(data, name)
    text = data.get("text_config")
    if isinstance(text, dict):
        check_sizes(text, name, "text_config.")


def read_config(file: Path, name: str) -> dict[str, Any]:
    raw = read_small_file(file, MAX_CONFIG_BYTES, "the model's config.json")
    try:
        data = json.loads(raw)
    except RecursionError as exc:
        raise BadInput(f"Model '{name}': config.json nests too deeply to be a model's config.") from exc
    except ValueError as exc:  # not UTF-8, not JSON
        raise BadInput(f"Model '{name}': config.json is not JSON ({type(exc).__name__}).") from exc
    check_config(data, name)
    return data


def check_model_config(name: str) -> None:
    """A local folder's config.json, checked before transformers (or torch) reads it; the embedded model's is ours and
    a hub id's is known only once downloaded, so both pass here; `shape:NAME` must name a shipped config."""
    if name == EMBEDDED or shape_key(name) is not None:  # a shipped config is ours too (an unknown NAME: one line)
        return
    try:
        file = Path(os.path.expanduser(name)) / "config.json"
        there = os.path.lexists(file)
    except ValueError:  # a name no path can be
        return
    if there:
        read_config(file, name)
