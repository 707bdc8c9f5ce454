"""The soak benchmark runs end to end on the tiny model and reports RSS; its checkpoints are the issue's 10/50/100."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.checks import soak
from explorer.cli.main import main
from explorer.core.errors import BadInput
from explorer.core.units import MB


def test_checkpoints_are_runs_10_50_100_where_reached() -> None:
    assert soak.SoakConfig(runs=100).checkpoints == (10, 50, 100)
    assert soak.SoakConfig(runs=60).checkpoints == (10, 50, 60)
    assert soak.SoakConfig(runs=3).checkpoints == (1, 3)
    config = soak.SoakConfig(runs=12, attention_every=5)
    assert [run for run in range(1, 13) if config.captures_attention(run)] == [5, 10]
    assert not soak.SoakConfig(attention_every=0).captures_attention(5)
    assert soak.SoakConfig().prompt_for(1) != soak.SoakConfig().prompt_for(2)  # cycled short prompts
    with pytest.raises(BadInput):
        soak.SoakConfig(runs=0).validate()


def test_rss_is_read_in_bytes() -> None:
    assert soak.rss_bytes() > 10 * MB  # a Python process with torch loaded holds far more than 10 MB


def test_a_short_soak_runs_and_reports_rss(
    tiny_llama_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "soak.json"
    argv = ["soak", "--model", str(tiny_llama_dir), "--device", "cpu", "--runs", "3", "--attention-every", "2"]
    assert main([*argv, "--max-new-tokens", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "run     1: RSS" in printed and "run     3: RSS" in printed
    assert "growth from run 1 to run 3:" in printed and "MB (measured)" in printed
    data = json.loads(out.read_text())
    assert [s["run"] for s in data["samples"]] == [0, 1, 2, 3]
    assert all(s["rss_bytes"] > 0 for s in data["samples"])
    assert [s["attention_captured"] for s in data["samples"]] == [False, False, True, False]
    assert all(s["new_tokens"] == 4 for s in data["samples"][1:])
    assert data["growth_bytes"] == data["checkpoints"]["3"] - data["checkpoints"]["1"]


def test_bad_soak_input_fails_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["soak", "--model", "./no/such/folder", "--runs", "0"]) == 2
    assert "--runs must be between 1" in capsys.readouterr().err
