"""Names and places that must be known before torch is imported, so the CLI can refuse bad input in a blink."""

from __future__ import annotations

import json
import os
from pathlib import Path

EMBEDDED = "embedded"
EMBEDDED_CACHE_NAME = "smollm2-135m-instruct-q4_1-dequantized"
CACHE_ENV = "EXPLORER_CACHE_DIR"
EMBEDDED_LAYERS = 30  # SmolLM2-135M: known before its first conversion has written a config.json


def cache_dir() -> Path:
    """Where converted models live: $EXPLORER_CACHE_DIR, else $XDG_CACHE_HOME (or ~/.cache)/prefill-decode-explorer."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prefill-decode-explorer"


def embedded_folder() -> Path:
    return cache_dir() / EMBEDDED_CACHE_NAME


def layer_count_without_loading(name: str) -> int | None:
    """The model's layer count from its config.json alone, or None when only loading it can tell (a hub id)."""
    if name == EMBEDDED:
        return EMBEDDED_LAYERS
    config = Path(os.path.expanduser(name)) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    layers = data.get("num_hidden_layers", data.get("n_layer"))
    return layers if isinstance(layers, int) else None
