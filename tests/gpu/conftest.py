"""The embedded model on the GPU, loaded once per session and only by a test that runs (every module here skips
without CUDA before any fixture is built)."""

from __future__ import annotations

import pytest

from explorer.core.loading import LoadedModel, load_model


@pytest.fixture(scope="session")
def cuda_lm() -> LoadedModel:
    """SmolLM2-135M in float32 on cuda:0, as `--device cuda` loads it."""
    return load_model("embedded", device="cuda", dtype="float32")
