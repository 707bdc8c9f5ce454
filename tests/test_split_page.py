"""At scale's "Split the phases" section (issue 45) through AppTest: it shows the very figures `python -m explorer
whatif --split --json` writes for the command it prints; and, after a live run of the embedded model, it starts from
that run's measured prefill and decode times and says so."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, Trace
from explorer.scale.config import load_architecture
from explorer.scale.floors import Scenario, find_gpu
from explorer.scale.split_measured import MeasuredSteps
from explorer.scale.split_whatif import SplitInputs, split_what_if
from explorer.ui import split_view
from explorer.ui import state as ui_state
from tests.apptest_support import keyed, navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.test_scale import whatif_main

PAGE = "pages/at_scale.py"


def split_figures(at: AppTest) -> tuple[str, dict[str, str]]:
    """The page's sentence and its goodput metrics, by layout."""
    metrics = {m.label.removesuffix(" goodput"): m.value for m in at.metric if m.label.endswith(" goodput")}
    sentences = [m.value.strip("*") for m in at.markdown if m.value.startswith("**") and " by " in m.value]
    assert len(sentences) == 1, sentences
    return sentences[0], metrics


def the_command(at: AppTest) -> list[str]:
    caption = next(c.value for c in at.caption if "python -m explorer whatif --split" in c.value)
    line = caption.split("`")[-2]  # the last quoted part: the command
    return shlex.split(line)[3:]  # after "python -m explorer"


def test_the_page_and_whatif_split_json_show_the_same_figures(tmp_path: Path) -> None:
    at = open_page(PAGE)
    at.number_input(key="split-x").set_value(2).run()
    keyed(at.selectbox, "split-link-").set_value("400G RDMA").run()
    at.number_input(key="split-colocated").set_value(2).run()  # 2 GPUs colocated against 3 split
    assert not at.exception, at.exception
    sentence, metrics = split_figures(at)
    out = tmp_path / "split.json"
    assert whatif_main([*the_command(at), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["sentence"] == sentence
    assert metrics == {row["label"]: f"{row['goodput_per_gpu']:.3g} /s per GPU" for row in written["layouts"]}
    assert set(metrics) == {"colocated x2", "colocated x2, chunks of 512", "2P1D"}
    assert written["inputs"]["link"] == "400G RDMA" and written["timing"] == "modelled"
    drawn = {b.label for b in at.main.get("download_button")}
    assert {"Download data: split-goodput.csv", "Download data: split-distributions.csv"} <= drawn


@pytest.fixture(scope="module")
def live_trace(real_lm: LoadedModel, cpu_figures: DeviceProfile) -> Trace:
    """A live run of the embedded model on this CPU: a prompt of some length, then a few decode steps."""
    prompt = "Prefill reads the whole prompt at once; decode writes one token at a time. " * 6
    return generate(real_lm, check_request(real_lm, Request(prompt, 6, use_chat_template=False)), cpu_figures)


def test_the_what_if_starts_from_a_live_runs_measured_times_and_says_so(live_trace: Trace) -> None:
    s = Scenario(load_architecture("embedded"), find_gpu("H100 SXM"), "float32", 1, 1, 1024 + 64, 1024)
    steps = MeasuredSteps(live_trace, 1024, 64)
    prefill = live_trace.prefill
    assert steps.prefill().floor_s == pytest.approx(prefill.wall_s / prefill.tokens_in * 1024)
    assert steps.decode(1).floor_s == pytest.approx(live_trace.decode_median_s)  # measured, at batch 1
    assert steps.decode(64).floor_s > steps.decode(1).floor_s  # grown by the roofline: more KV to read
    tpot_slo_s = 1.5 * steps.decode(1).floor_s
    result = split_what_if(SplitInputs(s, 64, 30 * steps.prefill().floor_s, tpot_slo_s, requests=80), steps)
    record = result.to_dict()
    assert record["timing"] == f"measured on {live_trace.device.name}"
    assert record["measured_inputs"]["decode_step_s"] == live_trace.decode_median_s
    assert record["measured_inputs"]["prefill_s_per_token"] == pytest.approx(prefill.wall_s / prefill.tokens_in)
    # The lesson's shape holds on a CPU too: a whole prompt's prefill stalls colocated decode steps past a tight TPOT
    # SLO, while a decode instance of its own keeps it.
    stalled, split = result.curves[0], result.curves[-1]
    assert stalled.layout.chunk_tokens == 0 and stalled.limit_kind == "tpot"
    assert split.goodput_per_gpu > stalled.goodput_per_gpu


def test_the_measured_path_adds_the_rooflines_all_reduces_for_tensor_parallel(live_trace: Trace) -> None:
    """A run on one device measures no all-reduce; an instance of 2 GPUs has them: the roofline's (modelled) is added
    to each measured pass, as the roofline path does, instead of being dropped."""
    from explorer.scale.floors import decode_step, prefill_floor

    one, two = (
        Scenario(load_architecture("embedded"), find_gpu("H100 SXM"), "float32", g, 1, 1088, 1024) for g in (1, 2)
    )
    alone, split = MeasuredSteps(live_trace, 1024, 64, one), MeasuredSteps(live_trace, 1024, 64, two)
    assert alone.prefill().link_s == 0 and alone.decode(4).link_s == 0
    assert split.prefill().link_s == pytest.approx(prefill_floor(two).t_link_s) and split.prefill().link_s > 0
    assert split.decode(4).link_s == pytest.approx(decode_step(two, 4, 1024 + 32).t_link_s)
    assert split.decode(4).link_s > 0
    assert split.decode(4).floor_s == pytest.approx(alone.decode(4).floor_s + split.decode(4).link_s)
    assert split.taken()["all_reduces"].startswith("modelled")


def test_the_page_labels_the_what_if_measured_where_it_took_the_runs_times(
    live_trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """And a rerun with the same inputs and the same run reuses the what-if (it is cached, as the roofline's is)."""
    at = open_page(PAGE, ui_state.RunResult(live_trace, None, "", "run 1: prefill reads"))
    at.selectbox(key="scale-model").set_value("smollm2-135m").run()
    assert not at.exception, at.exception
    text = " ".join(c.value for c in at.caption)
    assert f"Taken from your run (measured on {live_trace.device.name})" in text
    helps = " ".join(m.help or "" for m in at.metric if m.label.endswith(" goodput"))
    assert f"measured on {live_trace.device.name}" in helps
    simulated: list[SplitInputs] = []
    real = split_view.split_what_if
    monkeypatch.setattr(split_view, "split_what_if", lambda i, s=None: simulated.append(i) or real(i, s))
    at.number_input(key="split-y").set_value(2).run()  # new inputs: simulated once
    at.number_input(key="split-y").set_value(1).run()  # back to the inputs above, from this run: cached
    at.number_input(key="split-y").set_value(2).run()
    assert len(simulated) == 1 and not at.exception, at.exception
    at.toggle(key="split-measured").set_value(False).run()
    helps = " ".join(m.help or "" for m in at.metric if m.label.endswith(" goodput"))
    assert "measured" not in helps and "modelled" in helps


def test_the_split_simulation_has_a_work_budget_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any visitor can start the simulation on the web tier: long outputs simulate fewer requests a rate (said with
    the figures), and past the iteration budget one line refuses, on the page and on the command line alike."""
    from explorer.core.errors import BadInput
    from explorer.scale import split_sim
    from explorer.scale.split_whatif import DECODE_TOKENS_PER_RATE, MIN_REQUESTS, simulated_requests

    s = Scenario(load_architecture("llama-3.1-70b"), find_gpu("H100 SXM"), "bfloat16", 2, 1, 8192 + 4096, 8192)
    assert simulated_requests(SplitInputs(s, 256, 1.0, 0.05)) == 300
    assert simulated_requests(SplitInputs(s, 1024, 1.0, 0.05)) == DECODE_TOKENS_PER_RATE // 1024 == 150
    assert simulated_requests(SplitInputs(s, 32_768, 1.0, 0.05)) == MIN_REQUESTS
    monkeypatch.setattr(split_sim, "ITERATION_BUDGET", 20_000)
    with pytest.raises(BadInput, match="Too much to simulate here: over 20,000 engine iterations") as refused:
        split_what_if(SplitInputs(s, 4096, 1.0, 0.05))
    assert "\n" not in str(refused.value)
    at = open_page(PAGE)
    at.number_input(key="split-output").set_value(4096).run()
    assert not at.exception, at.exception
    assert any(i.value.startswith("Too much to simulate here") for i in at.info)


def test_the_distributions_are_at_a_chosen_rate_and_say_which_and_why(tmp_path: Path) -> None:
    """Issue 45 §1: the TTFT and TPOT distributions at a chosen rate; the caption says which rate and why (the one
    asked for, the disaggregated goodput, or, where that is 0, the middle of the grid)."""
    from explorer.scale.split_whatif import distribution_rate

    assert distribution_rate(None, 0.0, [1.0, 2.0, 3.0])[0] == 2.0
    assert "meets both SLOs at none" in distribution_rate(None, 0.0, [1.0, 2.0, 3.0])[1]
    assert distribution_rate(None, 1.5, [1.0]) == (1.5, "the disaggregated layout's goodput")
    at = open_page(PAGE)
    at.number_input(key="split-rate").set_value(0.7).run()
    assert not at.exception, at.exception
    text = " ".join(c.value for c in at.caption)
    assert "Every request's TTFT and TPOT at 0.7 requests/s (the rate asked for)" in text
    out = tmp_path / "split.json"
    assert whatif_main([*the_command(at), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["at_rate"]["rate_per_s"] == 0.7 and written["at_rate"]["why"] == "the rate asked for"
