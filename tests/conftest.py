"""Shared fixtures: tiny random models for the many fast invariants, the real embedded model loaded once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No model hub at test time: every load must come from the embedded wheel or a local folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from explorer.core.device import device_profile  # noqa: E402
from explorer.core.loading import LoadedModel, load_model  # noqa: E402
from explorer.core.trace import DeviceProfile  # noqa: E402
from tests.tiny import save_tiny_gpt2, save_tiny_llama  # noqa: E402


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_lm(tiny_llama_dir: Path) -> LoadedModel:
    return load_model(str(tiny_llama_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_gpt2_dir: Path) -> LoadedModel:
    return load_model(str(tiny_gpt2_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def cpu_figures() -> DeviceProfile:
    """The CPU's device figures, measured once for the session (the engine takes them as an argument)."""
    return device_profile("cpu", "float32")


@pytest.fixture(scope="session")
def real_lm() -> LoadedModel:
    """SmolLM2-135M-Instruct from the embedded GGUF (converted once into the user cache, then reloaded)."""
    return load_model("embedded", device="cpu", dtype="float32")
