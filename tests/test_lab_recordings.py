"""The serving labs' bundled results (recordings/labs/): each lab's result back from its JSON exactly as its page
draws it, read with no torch, each page drawn from it on first open with no model loadable, a live result winning
over it, and a damaged or missing file as one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest
import transformers

from explorer.charts import remote as remote_charts
from explorer.charts import schedule as schedule_charts
from explorer.charts import serving as serving_charts
from explorer.core.errors import BadInput
from explorer.labs import bundled
from explorer.labs.batch_result import BatchResult
from explorer.labs.nocache_result import NoCacheResult
from explorer.labs.schedule.records import ScheduleRun
from explorer.remote.records import SweepResult
from explorer.ui import labs
from explorer.ui import scheduling as schedule_view
from explorer.ui import state as ui_state
from tests.apptest_support import labelled, navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

ROOT = Path(__file__).resolve().parents[1]
ENV_SETTING = r"[A-Z_]+=\S+"  # e.g. OMP_NUM_THREADS=1 before a command
SLOS_S = (1.0, 0.1)  # any pair: the frames depend on them the same way on both sides of the round trip


# --- the files and the index -----------------------------------------------------------------------------------------
def test_every_lab_has_a_small_bundled_file_named_in_the_index_with_its_command() -> None:
    index = json.loads((bundled.LABS_DIR / bundled.INDEX_FILE).read_text())["labs"]
    assert set(index) == set(bundled.LABS) and (bundled.LABS_DIR / "README.md").is_file()
    commands = {"nocache": "nocache", "batch": "batch", "schedule": "schedule", "endpoint": "remote"}
    for lab, entry in index.items():
        assert all(entry[name] for name in bundled.INDEX_FIELDS), lab
        assert re.match(rf"({ENV_SETTING} )*python -m explorer {commands[lab]} ", entry["command"]), entry["command"]
        assert "--json" in entry["command"]
        assert (bundled.LABS_DIR / entry["file"]).stat().st_size < bundled.MAX_FILE_BYTES


def test_reading_every_bundled_result_imports_no_torch() -> None:
    code = (
        "import sys\nfrom explorer.labs import bundled\nfor lab in bundled.LABS:\n    bundled.read(lab)\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch or transformers imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# --- round trips: the same frames from the chart builders ----------------------------------------------------------
def nocache_frames(result: NoCacheResult) -> list[pd.DataFrame]:
    return [
        serving_charts.nocache_frame(result),
        serving_charts.cache_memory_frame(result),
        serving_charts.projection_frame(result),
    ]


def batch_frames(result: BatchResult) -> list[pd.DataFrame]:
    frame = serving_charts.batch_frame(result)
    return [frame, serving_charts.batch_roofline_frame(result, frame)]


def schedule_frames(run: ScheduleRun) -> list[pd.DataFrame]:
    frames = [
        schedule_charts.steps_frame(run),
        schedule_charts.step_table_frame(run),
        schedule_charts.timeline_frame(run),
        schedule_charts.latency_frame(run, *SLOS_S),
        schedule_charts.blocks_frame(run),
        schedule_charts.memory_frame(run),
        schedule_charts.modes_frame(run.modes),
        schedule_charts.mode_requests_frame(run.modes),
        schedule_charts.prompts_frame(run),
    ]
    return frames + ([schedule_charts.prefix_frame(run)] if run.prefix_off is not None else [])


def endpoint_frames(result: SweepResult) -> list[pd.DataFrame]:
    return [
        remote_charts.levels_frame(result, *SLOS_S),
        remote_charts.percentiles_frame(result),
        remote_charts.tradeoff_frame(result, *SLOS_S),
        remote_charts.requests_frame(result, *SLOS_S),
    ]


ROUND_TRIPS: dict[str, tuple[Callable[[str], Any], Callable[[Any], list[pd.DataFrame]]]] = {
    "nocache": (NoCacheResult.from_json, nocache_frames),
    "batch": (BatchResult.from_json, batch_frames),
    "schedule": (ScheduleRun.from_json, schedule_frames),
    "endpoint": (SweepResult.from_json, endpoint_frames),
}


@pytest.mark.parametrize("lab", bundled.LABS)
def test_a_lab_result_round_trips_through_json_to_the_same_frames(lab: str) -> None:
    from_json, frames = ROUND_TRIPS[lab]
    result = bundled.read(lab).result
    again = from_json(result.to_json())
    assert again == result and again.to_json() == result.to_json()
    for before, after in zip(frames(result), frames(again), strict=True):
        pd.testing.assert_frame_equal(before, after)


def test_the_no_cache_json_carries_what_the_page_draws() -> None:
    result = bundled.read("nocache").result
    data = json.loads(result.to_json())
    assert len(data["cached_trace"]["repeats"][0]) == len(result.cached)  # the trace: the memory chart's source
    assert result.compares_edges and result.same_tokens  # long enough for the growth to be compared


def test_the_batch_json_carries_each_batchs_passes() -> None:
    result = bundled.read("batch").result
    rows = json.loads(result.to_json())["results"]
    assert [len(row["passes"]) for row in rows] == [len(run.passes) for run in result.runs]
    assert len(result.runs) >= 3


# --- damaged or missing files: one line ----------------------------------------------------------------------------
def write_index(folder: Path, lab: str, file: str) -> None:
    entry = {"file": file, "command": "python -m explorer x --json f", "date": "d", "device": "cpu", "machine": "m"}
    (folder / bundled.INDEX_FILE).write_text(json.dumps({"labs": {lab: entry}}))


@pytest.mark.parametrize("lab", bundled.LABS)
def test_a_damaged_or_missing_bundled_file_is_one_line(lab: str, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="index") as missing_index:
        bundled.read(lab, tmp_path)
    write_index(tmp_path, lab, "gone.json")
    with pytest.raises(BadInput, match=f"bundled {lab} result cannot be read") as missing_file:
        bundled.read(lab, tmp_path)
    (tmp_path / "bad.json").write_text('{"prompt_len": 3, "levels": [')
    write_index(tmp_path, lab, "bad.json")
    with pytest.raises(BadInput, match="press Run for a live one") as damaged:
        bundled.read(lab, tmp_path)
    for raised in (missing_index, missing_file, damaged):
        assert "\n" not in str(raised.value)


# --- the pages -------------------------------------------------------------------------------------------------------
PAGES = {
    "nocache": ("pages/nocache.py", "Run both loops", 4),
    "batch": ("pages/batching.py", "Run the sweep", 4),
    "schedule": ("pages/scheduling.py", "No scheduling run yet", 7),
    "endpoint": ("pages/endpoint.py", "No sweep yet", 2),
}
SESSION_KEYS = {
    "nocache": labs.NOCACHE_RESULT,
    "batch": labs.BATCH_RESULT,
    "schedule": schedule_view.SCHEDULE_RUN,
    "endpoint": ui_state.ENDPOINT_RESULT,
}


@pytest.fixture
def no_model() -> Iterator[None]:
    """What explorer.models.loading really calls to load a model or tokenizer raises: nothing can be loaded."""
    refuse = mock.Mock(side_effect=AssertionError("a lab page opened on its bundled result loaded a model"))
    with (
        mock.patch.object(transformers.AutoModelForCausalLM, "from_pretrained", refuse),
        mock.patch.object(transformers.AutoTokenizer, "from_pretrained", refuse),
    ):
        yield
    assert not refuse.called


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize("lab", bundled.LABS)
def test_each_lab_page_draws_its_charts_from_its_bundled_result_on_first_open(lab: str) -> None:
    page, hint, charts = PAGES[lab]
    at = open_page(page)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(at.get("vega_lite_chart")) >= charts
    banners = [i.value for i in at.info if "Recorded result, not live" in i.value]
    recorded = bundled.read(lab)
    assert len(banners) == 1 and recorded.command in banners[0] and recorded.date in banners[0], banners
    assert recorded.device in banners[0] and hint in banners[0]  # and which button replaces it with a live result
    assert SESSION_KEYS[lab] not in at.session_state  # shown, never taken for this session's own result


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize("lab", bundled.LABS)
def test_a_live_result_in_the_session_wins_over_the_bundled_one(lab: str) -> None:
    page, _, charts = PAGES[lab]
    at = open_page(page)
    at.session_state[SESSION_KEYS[lab]] = bundled.read(lab).result  # as a Run would leave it
    at.run()
    assert not at.exception and len(at.get("vega_lite_chart")) >= charts
    assert not [i.value for i in at.info if "Recorded result" in i.value]


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize("lab", bundled.LABS)
def test_a_page_without_its_bundled_file_says_so_in_one_line_and_keeps_working(
    lab: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bundled, "LABS_DIR", tmp_path)
    page, hint, _ = PAGES[lab]
    at = open_page(page)
    assert not at.exception and not at.get("vega_lite_chart")
    lines = [c.value for c in at.caption if "bundled" in c.value]
    assert len(lines) == 1 and "\n" not in lines[0] and any(hint in i.value for i in at.info)


def test_the_labs_readme_agrees_with_the_index_and_quotes_the_batch_file() -> None:
    """The README says what `index.json` says of how the files were recorded (it said both 'nothing else running' and
    'while other work shared the cores'), and its batch figures are the file's."""
    readme = " ".join((bundled.LABS_DIR / "README.md").read_text(encoding="utf-8").split())
    index = json.loads((bundled.LABS_DIR / "index.json").read_text(encoding="utf-8"))
    machines = {entry["machine"] for entry in index["labs"].values()}
    assert machines and all("nothing else running" in machine for machine in machines)
    assert "with nothing else running" in readme and "other work" not in readme and "in that noise" not in readme
    steps_ms = {
        r["batch_size"]: r["median_step_s"] * 1e3
        for r in json.loads((bundled.LABS_DIR / "batch.json").read_text())["results"]
    }
    assert f"{steps_ms[1]:.1f} ms at B = 1 and {steps_ms[2]:.1f} ms at B = 2" in readme
    rest = [steps_ms[b] for b in steps_ms if b >= 2]
    assert f"within {min(rest):.1f}–{max(rest):.1f} ms up to" in readme


@pytest.mark.usefixtures("no_model")
def test_each_lab_form_shows_the_parameters_of_the_result_under_it() -> None:
    """The No-cache form said 64 new tokens over a result made with 128: a form shows its shown result's settings."""
    nocache = bundled.read("nocache").result
    at = open_page(PAGES["nocache"][0])
    assert next(n for n in at.number_input if n.label == "New tokens").value == nocache.cached_trace.new_tokens == 128
    assert labelled(at.text_input, "Prompt (no chat template)").value == nocache.cached_trace.prompt_text

    batch = bundled.read("batch").result
    at = open_page(PAGES["batch"][0])
    assert labelled(at.text_input, "Batch sizes").value == ",".join(map(str, batch.config.batch_sizes))
    shown = {n.label: n.value for n in at.number_input}
    assert (shown["Prompt tokens"], shown["New tokens"]) == (batch.config.prompt_tokens, batch.config.new_tokens)

    schedule = bundled.read("schedule").result
    at = open_page(PAGES["schedule"][0])
    shown = {n.label: n.value for n in at.number_input}
    assert shown["Requests"] == schedule.workload.requests
    assert shown["Token budget per step"] == schedule.settings.token_budget
    assert shown["KV blocks"] == schedule.settings.num_blocks
    assert next(t for t in at.toggle if t.label == "Compare 3 ways").value == bool(schedule.baselines)


@pytest.mark.usefixtures("no_model")
def test_scheduling_leads_with_its_main_chart_and_tabs_the_rest() -> None:
    at = open_page(PAGES["schedule"][0])
    assert not at.exception
    first = at.main.get("vega_lite_chart")[0].proto.spec  # the engine steps: one column per forward pass
    assert '"request_order"' in first and '"field": "step"' in first
    assert [t.label for t in at.tabs][:2] == ["Requests over time", "KV blocks"] and len(at.tabs) >= 3
    assert at.expander[0].label.startswith("Workload and engine settings: the shown run's")
