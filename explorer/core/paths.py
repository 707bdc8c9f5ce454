"""Names and places that must be known before torch is imported, so the CLI can refuse bad input in a blink."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

EMBEDDED = "embedded"
EMBEDDED_CACHE_NAME = "smollm2-135m-instruct-q4_1-dequantized"
CACHE_ENV = "EXPLORER_CACHE_DIR"
# SmolLM2-135M's figures, known before its first conversion has written a config.json
EMBEDDED_FIGURES = {"num_hidden_layers": 30, "max_position_embeddings": 8192}


def cache_dir() -> Path:
    """Where converted models live: $EXPLORER_CACHE_DIR, else $XDG_CACHE_HOME (or ~/.cache)/prefill-decode-explorer."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prefill-decode-explorer"


def embedded_folder() -> Path:
    return cache_dir() / EMBEDDED_CACHE_NAME


def config_without_loading(name: str) -> dict[str, Any] | None:
    """The model's config.json (its text part, as loading reads it), or None when only loading it can tell (a hub id,
    a folder without one). The embedded model's is its converted folder's, else the figures known of it."""
    folder = embedded_folder() if name == EMBEDDED else Path(os.path.expanduser(name))
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON, a name no path can be
        data = None
    if not isinstance(data, dict):
        return dict(EMBEDDED_FIGURES) if name == EMBEDDED else None
    text = data.get("text_config")
    return text if isinstance(text, dict) else data


def whole_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def layer_count_without_loading(name: str) -> int | None:
    """The model's layer count from its config.json alone, or None when only loading it can tell."""
    config = config_without_loading(name) or {}
    return whole_number(config.get("num_hidden_layers", config.get("n_layer")))


def context_without_loading(name: str) -> int | None:
    """The model's context length in tokens from its config.json alone; None when it names none (the config class's
    own default, known only once transformers reads it, then applies) or only loading can tell."""
    config = config_without_loading(name) or {}
    return whole_number(config.get("max_position_embeddings")) or whole_number(config.get("n_positions"))
