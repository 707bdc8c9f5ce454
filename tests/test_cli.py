"""`python -m explorer`: a real run writes its files; bad input exits 2 with one line on stderr and no traceback."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from explorer import remote
from explorer.cli import main
from explorer.core.errors import OOM_ADVICE
from explorer.core.trace import Trace
from tests.cli_support import CliResult, run_cli

ROOT = Path(__file__).resolve().parents[1]


def explorer(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """`python -m explorer ARGS`, run in this process (tests/cli_support.py): no torch import or device measurement
    per call. The tests that are about a fresh process start one below."""
    return run_cli(*args, env=env)


def explorer_process(*args: str, timeout_s: int = 300) -> subprocess.CompletedProcess[str]:
    """`python -m explorer ARGS` in a child process, its output through real pipes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
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
        (["run", "--prompt", "hi", "--max-new-tokens", "0"], "max-new-tokens"),
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


def one_error_line(stderr: str) -> str:
    """Progress lines may come first (a load must not look hung); the error is the one last line."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    assert [line for line in lines if line.startswith("error: ")] == [lines[-1]]
    assert all(line.startswith("[") for line in lines[:-1])  # only progress before it
    return lines[-1]


def test_prompt_beyond_the_context_exits_2(tiny_llama_dir: Path) -> None:
    out = explorer("run", "--prompt", "x" * 300, "--model", str(tiny_llama_dir), "--no-chat-template")
    assert out.returncode == 2
    error = one_error_line(out.stderr)
    assert "exceeds" in error and "context of 256 tokens" in error


def checked_without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child that reports whether torch was ever imported: checks that come before any model."""
    code = (
        "import sys; from explorer.cli import main; rc = main(sys.argv[1:]); "
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); sys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, env=os.environ
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attention-layers", "99"], "--attention-layers 99 is out of range: the model has layers 0 to 29"),
        (["--json", "no/such/folder/t.json"], "folder no/such/folder does not exist"),
        (["--csv", "/nonexistent-dir/t.csv"], "does not exist"),
        (["--attention-npz", "missing/m.npz"], "does not exist"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ],
)
def test_checkable_input_fails_before_torch_loads(args: list[str], message: str) -> None:
    out = checked_without_torch("run", "--prompt", "hi", *args)
    assert out.returncode == 2 and out.stdout.strip() == "torch not imported"
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and message in out.stderr


PRECHECK_LIMIT_S = 2.0  # issue 6: checkable input fails in under 2 s, the interpreter's start included


@pytest.mark.parametrize("args", [["--attention-layers", "99"], ["--json", "no/such/folder/t.json"]])
def test_checkable_input_fails_in_under_2_s(args: list[str]) -> None:
    started = time.perf_counter()
    out = checked_without_torch("run", "--prompt", "hi", *args)
    elapsed_s = time.perf_counter() - started  # the child's whole life, as a user at a terminal waits for it
    assert out.returncode == 2 and out.stdout.strip() == "torch not imported"
    assert elapsed_s < PRECHECK_LIMIT_S, f"refused after {elapsed_s:.2f} s: {out.stderr.strip()}"


def test_out_of_memory_is_one_line_with_the_advice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def out_of_memory(_args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(remote, "cmd_remote", out_of_memory)  # a command that loads no model: no torch needed
    assert main(["remote", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"error: Out of memory while running `explorer remote`: {OOM_ADVICE}."]


def test_attention_layers_of_a_local_model_are_checked_from_its_config(tiny_llama_dir: Path) -> None:
    out = checked_without_torch("run", "--prompt", "hi", "--model", str(tiny_llama_dir), "--attention-layers", "0,2")
    assert out.returncode == 2 and "layers 0 to 1" in out.stderr and "torch not imported" in out.stdout


def test_repeats_keep_every_repeat_and_print_the_spread(tiny_llama_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    out = explorer("run", "--prompt", "hi", "--model", str(tiny_llama_dir), "--repeats", "3", "--json", str(path))
    assert out.returncode == 0, out.stderr
    data = json.loads(path.read_text())
    assert len(data["repeats"]) == 3 and data["summary"]["repeats"] == 3 and 0 <= data["shown_repeat"] < 3
    assert len({tuple(p["token_id"] for p in passes) for passes in data["repeats"]}) == 1  # greedy: same tokens
    trace = Trace.from_dict(data)
    assert trace.repeat_count == 3 and trace.same_tokens_every_repeat
    assert "over 3 repeats (median, min, max); same tokens every repeat: yes" in out.stdout
    ttft = trace.spread("ttft_s")
    assert f"TTFT     {ttft.median * 1e3:.2f} ms (min {ttft.low * 1e3:.2f}, max {ttft.high * 1e3:.2f})" in out.stdout
    assert "ITL p50  " in out.stdout and "(min " in out.stdout.split("ITL p50")[1].splitlines()[0]


def test_piped_output_still_shows_progress_while_loading(tiny_llama_dir: Path) -> None:
    out = explorer_process("run", "--prompt", "hi", "--model", str(tiny_llama_dir), "--max-new-tokens", "2")
    assert out.returncode == 0, out.stderr
    assert "[100%] Loaded" in out.stderr  # plain lines, though stderr is a pipe here
    assert "one sample on a shared machine" in out.stdout  # N = 1 says what it is


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
    assert out.returncode == 2 and "over the 0 MiB cap" in one_error_line(out.stderr)
    assert Trace.from_json((tmp_path / "t.json").read_text()).new_tokens >= 1


def test_the_serving_lab_commands_write_their_json(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = explorer(
        "nocache",
        "--prompt",
        "hi there",
        "--model",
        str(tiny_llama_dir),
        "--max-new-tokens",
        "10",
        "--no-chat-template",
        "--json",
        str(tmp_path / "n.json"),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "n.json").read_text())
    assert data["cached"]["token_ids"] == data["uncached"]["token_ids"] and len(data["uncached"]["step_s"]) == 10
    assert "same tokens both ways: yes" in out.stdout and "modelled (linear fit" in out.stdout
    out = explorer(
        "batch",
        "--model",
        str(tiny_llama_dir),
        "--batch-sizes",
        "1,4",
        "--prompt-tokens",
        "8",
        "--new-tokens",
        "4",
        "--json",
        str(tmp_path / "b.json"),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert [r["batch_size"] for r in data["results"]] == [1, 4]
    assert all(len(r["token_ids"]) == r["batch_size"] for r in data["results"])
    assert "every request's tokens equal its solo tokens: yes" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["batch", "--batch-sizes", "0,2"], "between 1 and"),
        (["batch", "--batch-sizes", "x"], "comma-separated integers"),
        (["nocache", "--prompt", "hi", "--max-new-tokens", "1"], "no-cache lab needs at least"),
    ],
)
def test_bad_lab_input_exits_2_with_one_line(tiny_llama_dir: Path, args: list[str], message: str) -> None:
    out = explorer(*args, "--model", str(tiny_llama_dir))
    assert out.returncode == 2 and message in one_error_line(out.stderr)


def test_perfetto_export_has_one_complete_event_per_pass(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from explorer.core.perfetto import PASSES_TID

    out = explorer(
        "run", "--prompt", "Hi", "--model", str(tiny_llama_dir), "--max-new-tokens", "8",
        "--json", str(tmp_path / "t.json"), "--perfetto", str(tmp_path / "p.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    trace = Trace.from_json((tmp_path / "t.json").read_text())
    events = json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    passes = [e for e in events if e["ph"] == "X" and e["tid"] == PASSES_TID]
    assert len(passes) == trace.new_tokens  # one complete event per pass of the (one) repeat
    for event, p in zip(sorted(passes, key=lambda e: e["ts"]), trace.passes, strict=True):
        assert event["ts"] == pytest.approx(p.start_s * 1e6) and event["dur"] == pytest.approx(p.wall_s * 1e6)
        assert event["name"] == p.phase
