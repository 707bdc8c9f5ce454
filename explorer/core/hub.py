"""Whether the Hugging Face hub can be reached: a quick TCP check, so a machine without network fails in seconds."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


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
