"""PLACEHOLDER on branch i44-glass (the lead replaces this file with the engine helper's at merge): the session
fixture `real_vllm` yields the base URL of a real vLLM, here taken from EXPLORER_TEST_VLLM_URL (e.g. a vLLM started
by hand: http://127.0.0.1:8011/v1, served model name "embedded"). The real fixture starts one through `./run vllm`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import pytest

VLLM_URL_ENV = "EXPLORER_TEST_VLLM_URL"


@pytest.fixture(scope="session")
def real_vllm() -> Iterator[str]:
    url = os.environ.get(VLLM_URL_ENV, "")
    if not url:
        reason = f"REAL vLLM TEST SKIPPED: {VLLM_URL_ENV} is not set (placeholder fixture; `./run vllm` starts one)"
        warnings.warn(reason, stacklevel=1)
        pytest.skip(reason)
    yield url.rstrip("/")
