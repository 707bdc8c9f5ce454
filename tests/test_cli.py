"""`python -m explorer`: a real run writes its files; bad input exits 2 with one line on stderr and no traceback."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.trace import Trace

ROOT = Path(__file__).resolve().parents[1]


def explorer(*args: str, timeout_s: int = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
    )


def test_run_on_the_embedded_model_writes_json_and_csv(tmp_path: Path) -> None:
    out = explorer(
        "run",
        "--prompt",
        "The capital of France is",
        "--max-new-tokens",
        "16",
        "--device",
        "cpu",
        "--json",
        str(tmp_path / "t.json"),
        "--csv",
        str(tmp_path / "t.csv"),
        "--attention-layers",
        "0,29",
        "--attention-npz",
        str(tmp_path / "a.npz"),
    )
    assert out.returncode == 0, out.stderr
    trace = Trace.from_json((tmp_path / "t.json").read_text())
    assert trace.model.layers == 30 and trace.prompt_text == "The capital of France is"
    assert 1 <= trace.new_tokens <= 16 and len(trace.itl_s) == trace.new_tokens - 1
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [r["phase"] for r in rows] == [p.phase for p in trace.passes]
    for needle in ("TTFT", "ITL p50", "p99", "KV cache", "prefill", "attention: captured 2 layers x 9 heads"):
        assert needle in out.stdout
    assert "replay chose the same tokens: yes" in out.stdout
    saved = np.load(tmp_path / "a.npz")
    assert saved["prefill_L29"].shape == (9, trace.prompt_len, trace.prompt_len)
    assert saved[f"decode_L0_{len(trace.decodes) - 1}"].shape == (9, trace.passes[-1].cache_len_after)


def test_bench_runs_both_sides_on_a_local_model(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = explorer(
        "bench",
        "--model",
        str(tiny_llama_dir),
        "--prompt-tokens",
        "16",
        "--new-tokens",
        "4",
        "--repeats",
        "2",
        "--json",
        str(tmp_path / "b.json"),
    )
    assert out.returncode == 0, out.stderr
    assert "same greedy tokens on both sides: yes" in out.stdout
    data = json.loads((tmp_path / "b.json").read_text())
    assert len(data["hf"]) == len(data["explorer"]) == 2
    assert all(len(side["itl_s"]) == 3 for side in data["hf"] + data["explorer"])
    assert data["summary"]["same_tokens"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--prompt", ""], "prompt is empty"),
        (["run", "--prompt", "  \n "], "prompt is empty"),
        (["run", "--prompt", "hi", "--dtype", "float8"], "Unknown dtype"),
        (["run", "--prompt", "hi", "--device", "tpu"], "Unknown device"),
        (["run", "--prompt", "hi", "--model", "./no/such/folder"], "does not exist"),
        (["run", "--prompt", "hi", "--model", "nosuch-org/nosuch-model"], "hub is unreachable"),
        (["run", "--prompt", "hi", "--max-new-tokens", "0"], "max new tokens"),
        (["run", "--prompt", "hi", "--max-new-tokens", "many"], "invalid int value"),
        (["run"], "required: --prompt"),
        (["bench", "--new-tokens", "1"], "--new-tokens >= 2"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    out = explorer(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: ")
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_prompt_beyond_the_context_exits_2(tiny_llama_dir: Path) -> None:
    out = explorer("run", "--prompt", "x" * 300, "--model", str(tiny_llama_dir), "--no-chat-template")
    assert out.returncode == 2
    assert "exceeds" in out.stderr and "context of 256 tokens" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_a_failure_while_running_exits_1_with_one_line(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = explorer("run", "--prompt", "hi", "--model", str(tiny_llama_dir), "--json", str(tmp_path / "no" / "t.json"))
    assert out.returncode == 1
    assert out.stderr.startswith("error: unexpected failure: FileNotFoundError")
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_attention_over_the_cap_keeps_the_written_trace(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = explorer(
        "run",
        "--prompt",
        "hi",
        "--model",
        str(tiny_llama_dir),
        "--attention",
        "--json",
        str(tmp_path / "t.json"),
        env={"EXPLORER_ATTENTION_CAP_MIB": "0"},
    )
    assert out.returncode == 2 and "over the 0 MiB cap" in out.stderr and out.stderr.count("\n") == 1
    assert Trace.from_json((tmp_path / "t.json").read_text()).new_tokens >= 1
