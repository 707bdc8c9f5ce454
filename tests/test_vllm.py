"""The real vLLM that `./run vllm` serves (tests/vllm_support.py): the CLI finds it by default, and the completions
API's defaults stream text from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.remote import engine
from tests.vllm_support import real_vllm, with_real_vllm  # noqa: F401 - the session fixture

pytestmark = pytest.mark.server


def test_remote_completions_with_its_defaults_streams_text_from_vllm(
    real_vllm: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    """No URL, model or prompt given: the server `./run vllm` started, the name it serves, the completions default."""
    out = tmp_path / "sweep.json"
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "remote", "--api", "completions", "--json", str(out)],
        cwd=engine.REPO_ROOT, capture_output=True, text=True, timeout=300, env=with_real_vllm(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["endpoint"] == {"base_url": real_vllm, "model": engine.MODEL_NAME, "api": "completions"}
    records = [r for level in result["levels"] for r in level["records"]]
    assert len(records) == 16 and all(not r["error"] for r in records)
    assert all(r["text"].strip() and r["output_tokens"] > 0 for r in records)


def test_fixed_length_asks_vllm_for_exactly_max_tokens(real_vllm: str, tmp_path: Path) -> None:  # noqa: F811
    """min_tokens and ignore_eos: every answer has max tokens, past the end-of-sequence token the model would say."""
    out = tmp_path / "sweep.json"
    argv = ["remote", "--base-url", real_vllm, "--model", engine.MODEL_NAME, "--api", "completions", "--fixed-length"]
    argv += ["--max-tokens", "24", "--requests", "2", "--concurrency", "1", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "explorer", *argv], cwd=engine.REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = json.loads(out.read_text())["levels"][0]["records"]
    assert [(r["output_tokens"], r["output_tokens_from"], r["finish_reason"]) for r in records] == [
        (24, "usage", "length")
    ] * 2
