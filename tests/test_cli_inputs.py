"""What the CLI reads and writes is bounded before any work: no file read without a size limit nor a path that is no
regular file (`/dev/zero`, a FIFO), every output path checked before the run (`whatif` and `--record` too), a long
command line never fails a recording, and a config.json transformers cannot build is one line naming its field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.core.errors import BadInput
from explorer.recording.checks import read_recording
from explorer.recording.pdx import CUT_MARKER, MAX_COMMAND_CHARS
from tests.cli_support import run_cli

ROOT = Path(__file__).resolve().parents[1]
HANG_S = 30  # a refusal takes a blink; a read that blocks (a FIFO) or never ends (/dev/zero) would pass this
# "At once": the interpreter and the explorer's torch-free imports took ~1 s on a loaded 2-core machine, where importing
# torch and transformers took 20 s; a third of HANG_S leaves room for a machine ten times busier, while a refusal that
# waited on a blocking read or a model would not pass (and `refused_in_a_child` checks torch was never imported).
AT_ONCE_S = 10.0
MAX_RSS_KB = 200 * 1024  # the interpreter and the explorer's torch-free imports use ~30 MB; /dev/zero grew to 7.7 GB


def refused_in_a_child(*args: str) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`python -m explorer ARGS` in a fresh process that says whether torch was imported and its peak RSS (KB: VmHWM,
    which exec resets, where ru_maxrss keeps the forking test process's); a hang fails the test at HANG_S instead of
    hanging it. Returns the process, its wall seconds and its peak RSS."""
    code = (
        "import sys; from explorer.cli.main import main; rc = main(sys.argv[1:]); "
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); "
        "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM'))); sys.exit(rc)"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S, env=env
    )
    elapsed_s = time.perf_counter() - started
    said, rss_kb = out.stdout.strip().splitlines()[-2:]
    assert said == "torch not imported", out.stdout
    return out, elapsed_s, int(rss_kb)


def assert_one_line(out: subprocess.CompletedProcess[str], words: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: ") and words in out.stderr, out.stderr


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


# --- reading: only regular files, never past a limit -----------------------------------------------------------------
def test_a_prompt_file_of_dev_zero_exits_2_in_seconds_with_memory_bounded() -> None:
    out, elapsed_s, rss_kb = refused_in_a_child("run", "--prompt-file", "/dev/zero")
    assert_one_line(out, "Cannot read the prompt from /dev/zero: it is not a regular file")
    print(f"refused in {elapsed_s:.1f} s, peak RSS {rss_kb / 1024:.0f} MiB")
    assert elapsed_s < 10 and rss_kb < MAX_RSS_KB


def test_a_prompt_file_too_large_or_a_fifo_is_one_line(tmp_path: Path, fifo: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as file:
        file.truncate((8 << 20) + 1)  # sparse: a file over the limit costs no disk
    out, _, rss_kb = refused_in_a_child("run", "--prompt-file", str(big))
    assert_one_line(out, "it is larger than 8 MiB")
    assert rss_kb < MAX_RSS_KB
    out, _, _ = refused_in_a_child("run", "--prompt-file", str(fifo))
    assert_one_line(out, "it is not a regular file")


def model_folder(tiny_llama_dir: Path, tmp_path: Path, config: object | None = None) -> Path:
    """A copy of the tiny model's folder, its config.json replaced by `config` (JSON) if given."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_llama_dir, folder)
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return folder


def test_a_config_json_that_is_a_fifo_or_dev_zero_exits_2_at_once(
    tiny_llama_dir: Path, tmp_path: Path, fifo: Path
) -> None:
    folder = model_folder(tiny_llama_dir, tmp_path)
    for target in (fifo, Path("/dev/zero")):
        (folder / "config.json").unlink()
        (folder / "config.json").symlink_to(target)
        out, elapsed_s, rss_kb = refused_in_a_child("run", "--model", str(folder), "--prompt", "hi")
        assert_one_line(out, "config.json from")
        assert "it is not a regular file" in out.stderr and rss_kb < MAX_RSS_KB, (target, out.stderr)
        assert elapsed_s < AT_ONCE_S, (target, elapsed_s)


BAD_CONFIGS = [
    ("vocab_size 10**12", lambda c: c.update(vocab_size=10**12), "vocab_size: must be a whole number from 1 to"),
    ("num_hidden_layers -1", lambda c: c.update(num_hidden_layers=-1), "num_hidden_layers: must be a whole number"),
    ("a size of null", lambda c: c.update(hidden_size=None), "hidden_size: must be a whole number from 1 to"),
    ("a size as text", lambda c: c.update(num_attention_heads="4"), "num_attention_heads: must be a whole number"),
    ("deep nesting", lambda c: c.update(rope_scaling=json.loads("[" * 50 + "]" * 50)), "nests deeper than 8 levels"),
]


@pytest.mark.parametrize(("name", "change", "words"), BAD_CONFIGS, ids=[case[0] for case in BAD_CONFIGS])
def test_a_config_transformers_cannot_build_is_one_line_naming_the_field_before_torch(
    tiny_llama_dir: Path, tmp_path: Path, name: str, change: object, words: str
) -> None:
    config = json.loads((tiny_llama_dir / "config.json").read_text())
    change(config)  # type: ignore[operator] - a callable from BAD_CONFIGS
    folder = model_folder(tiny_llama_dir, tmp_path, config)
    out, _, _ = refused_in_a_child("run", "--model", str(folder), "--prompt", "hi")
    assert_one_line(out, words)


@pytest.mark.parametrize(
    ("text", "words"), [("null", "the file: must be a JSON object, not null"), ("[" * 100_000, "")]
)
def test_a_config_json_of_null_or_a_bomb_is_one_line(
    tiny_llama_dir: Path, tmp_path: Path, text: str, words: str
) -> None:
    folder = model_folder(tiny_llama_dir, tmp_path, text)
    result = run_cli("run", "--model", str(folder), "--prompt", "hi")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
    assert "unexpected failure" not in result.stderr


def test_the_app_refuses_the_same_config_before_transformers_reads_it(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from explorer.models.loading import load_model

    config = json.loads((tiny_llama_dir / "config.json").read_text())
    config["vocab_size"] = 10**12
    with pytest.raises(BadInput, match="vocab_size: must be a whole number"):
        load_model(str(model_folder(tiny_llama_dir, tmp_path, config)), device="cpu")


# --- writing: every output path checked before the work --------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--json", "--record", "--csv"])
def test_a_fifo_as_an_output_of_run_exits_2_at_once(tmp_path: Path, flag: str) -> None:
    path = tmp_path / ("out.pdx" if flag == "--record" else "out")
    os.mkfifo(path)
    out, elapsed_s, _ = refused_in_a_child("run", "--prompt", "hi", flag, str(path))
    assert_one_line(out, f"Cannot write {path}: it is not a regular file")
    assert elapsed_s < AT_ONCE_S, elapsed_s


def test_whatif_checks_its_json_path_before_running(tmp_path: Path, fifo: Path) -> None:
    out, _, _ = refused_in_a_child("whatif", "--json", str(fifo))
    assert_one_line(out, "it is not a regular file")
    out, _, _ = refused_in_a_child("whatif", "--json", str(tmp_path))
    assert_one_line(out, "it is a folder")
    assert list(tmp_path.iterdir()) == [fifo]


def test_a_record_path_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    out, _, _ = refused_in_a_child("run", "--prompt", "hi", "--record", str(tmp_path / "no" / "such.pdx"))
    assert_one_line(out, "does not exist")
    out, _, _ = refused_in_a_child("run", "--prompt", "hi", "--record", "x.pdx", "--record-title", "t" * 2001)
    assert_one_line(out, "--record-title is 2,001 characters")


def test_a_long_command_line_never_fails_a_recording(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """It failed after the whole run ("meta.json: command: longer than 2,000 characters") and wrote nothing."""
    out = tmp_path / "long.pdx"
    title = "a title as long as a recording allows " * 52  # 1,976 characters: with the rest, past 2,000
    args = ["run", "--model", str(tiny_llama_dir), "--prompt", "hi", "--no-chat-template", "--max-new-tokens", "2"]
    result = run_cli(*args, "--record", str(out), "--record-title", title[:2000])
    assert result.returncode == 0, result.stderr
    command = read_recording(out.read_bytes()).meta.command
    assert len(command) == MAX_COMMAND_CHARS and command.endswith(CUT_MARKER)
    assert command.startswith("python -m explorer run --model")
