"""`shape:NAME`: a shipped config built with random weights, through the loader and the CLI. Its parameters and KV
bytes are the formulas' to the unit, its runs say the tokens are not meaningful, and a shape that cannot fit the
device's memory is refused in one line before anything is allocated."""

from __future__ import annotations

import copy
import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from explorer.core.engine import Request
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.core.report import format_trace
from explorer.core.roofline import kv_cache_bytes
from explorer.core.trace import Trace
from explorer.core.units import ms
from explorer.models import loading, shape_model
from explorer.models.loading import fastest_attention, load_model
from explorer.models.shape_model import ShapeTokenizer, byte_tokenizer, memory_fit
from explorer.scale.config import load_architecture, shape_key, shipped
from explorer.scale.measured_here import HereRow, compare_here, shape_name
from explorer.scale.params import count_params
from explorer.scale.whatif import Scenario, decode_step, find_gpu, what_if
from tests.cli_support import run_cli

SMOL_PARAMS = 134_515_008  # SmolLM2-135M's exact count (explorer.scale.params, checked against transformers there)
GB = 10**9


def test_shape_names_are_the_shipped_configs_and_nothing_else() -> None:
    assert shape_key("shape:smollm2-135m") == "smollm2-135m" and shape_key(" SHAPE:llama-3.1-8b ") == "llama-3.1-8b"
    assert shape_key("shape:embedded") == "smollm2-135m"  # the At-scale aliases and hub ids work here too
    assert shape_key("shape:meta-llama/Llama-3.1-8B") == "llama-3.1-8b"
    assert shape_key("embedded") is None and shape_key("./shape:x") is None
    with pytest.raises(BadInput, match=r"'shape:llama-9' names no shipped config: use shape:NAME, NAME one of llama"):
        shape_key("shape:llama-9")


@pytest.mark.parametrize("key", list(shipped()))
def test_every_shipped_config_builds_as_a_shape_with_its_exact_parameter_count(key: str) -> None:
    """On the meta device (no memory): gpt-oss unquantized and on eager attention, Gemma 3's language model alone."""
    model = fastest_attention(
        lambda attention: shape_model.build_model(key, torch.device("meta"), torch.bfloat16, attention)
    )
    assert sum(p.numel() for p in model.parameters()) == count_params(load_architecture(key)).total
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config._attn_implementation == ("eager" if key.startswith("gpt-oss") else "sdpa")


def test_the_loader_builds_the_shape_with_random_weights_and_says_so(shape_lm: LoadedModel) -> None:
    info = shape_lm.info
    assert info.random_weights and info.name == "shape:smollm2-135m"
    assert info.display_name == "SmolLM2-135M shape (random weights)"
    assert "tokens are not meaningful" in info.shape_note and "timings, bytes and FLOPs are real" in info.shape_note
    assert info.params == count_params(load_architecture("smollm2-135m")).total == SMOL_PARAMS
    assert info.weight_bytes == 4 * SMOL_PARAMS and info.dtype == "float32" and info.device == "cpu"
    assert (info.layers, info.heads, info.kv_heads, info.head_dim, info.vocab_size) == (30, 9, 3, 64, 49_152)
    assert shape_lm.eos_token_ids == frozenset()  # a random model's end-of-text is noise: never honoured
    again = loading.shape_model.build_model("smollm2-135m", torch.device("cpu"), torch.float32, "sdpa")
    assert torch.equal(again.lm_head.weight, shape_lm.model.lm_head.weight)  # seeded: the same shape, the same weights


@pytest.fixture(scope="module")
def shape_trace(shape_lm: LoadedModel) -> Trace:
    return measure(shape_lm, Request("What is the capital of France?", max_new_tokens=4))


def test_a_shape_run_is_measured_with_the_formulas_bytes_and_flagged_in_its_trace(shape_trace: Trace) -> None:
    trace = shape_trace
    assert trace.new_tokens == 4 and trace.stop_reason == "max_new_tokens"
    for p in trace.passes:
        assert p.kv_cache_bytes == kv_cache_bytes(trace.model, p.cache_len_after) == 46_080 * p.cache_len_after
    assert Trace.from_json(trace.to_json()).model.random_weights  # the JSON (and a recording) carries the flag
    text = format_trace(trace)
    assert f"SHAPE MODEL: {trace.model.shape_note}" in text.splitlines()[2]
    assert "random weights: not meaningful)" in text


def test_the_cli_runs_a_shape_and_its_header_says_the_tokens_mean_nothing(
    shape_lm: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = []

    def session_model(name: str, device: str, dtype: str, on_progress: object = None) -> LoadedModel:
        asked.append((name, device, dtype))
        return shape_lm  # the session's build: this test is about the command, the loader's are above

    monkeypatch.setattr(loading, "load_model", session_model)
    out = tmp_path / "t.json"
    result = run_cli(
        "run", "--model", "shape:smollm2-135m", "--device", "cpu", "--prompt", "Hi", "--max-new-tokens", "3",
        "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert asked == [("shape:smollm2-135m", "cpu", "float32")]
    assert result.stdout.startswith("model   SmolLM2-135M shape (random weights): 134.5 M params")
    assert "SHAPE MODEL: random weights" in result.stdout
    assert json.loads(out.read_text())["model"]["random_weights"] is True


def test_an_unknown_shape_is_refused_before_torch_loads() -> None:
    result = run_cli("run", "--model", "shape:gpt-7", "--prompt", "Hi")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: 'shape:gpt-7' names no shipped config")


@pytest.mark.skipif(torch.cuda.is_available(), reason="about a machine without CUDA")
def test_a_shape_on_cuda_is_refused_in_one_line_without_a_gpu() -> None:
    result = run_cli("run", "--model", "shape:llama-3.1-8b", "--device", "cuda", "--prompt", "Hi")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "CUDA requested but no GPU is available" in result.stderr


def test_a_shape_that_cannot_fit_is_refused_in_one_line_before_any_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    fit = memory_fit("llama-3.1-70b", torch.bfloat16, torch.device("cpu"), free=(24 * GB, "injected"))
    assert fit.params == count_params(load_architecture("llama-3.1-70b")).total and fit.bytes_per_element == 2
    assert fit.weight_bytes == 2 * fit.params and fit.margin_bytes == fit.weight_bytes // 10 and not fit.fits
    small = memory_fit("smollm2-135m", torch.float32, torch.device("cpu"), free=(24 * GB, "injected"))
    assert small.fits and small.margin_bytes == shape_model.FIT_MARGIN_MIN_BYTES  # a tenth of 0.5 GB is under it
    monkeypatch.setattr(shape_model, "free_memory", lambda device: (8 * GB, "of available RAM (injected)"))
    monkeypatch.setattr(shape_model, "build_model", lambda *args: pytest.fail("allocated a shape that cannot fit"))
    monkeypatch.setattr(shape_model, "embedded_tokenizer", lambda: pytest.fail("read a tokenizer for nothing"))
    with pytest.raises(BadInput) as refused:
        load_model("shape:llama-3.1-8b", device="cpu", dtype="bfloat16")
    message = str(refused.value)
    assert message.startswith("'shape:llama-3.1-8b' does not fit here: 8,030,261,248 parameters x 2 B (bfloat16)")
    assert "16.06 GB of weights + a 1.61 GB margin, against 8.00 GB of available RAM (injected)" in message
    assert "\n" not in message
    result = run_cli("run", "--model", "shape:llama-3.1-8b", "--device", "cpu", "--dtype", "bfloat16", "--prompt", "Hi")
    assert result.returncode == 2 and result.stderr == f"error: {message}\n"


def test_the_tokenizer_folds_ids_into_a_smaller_vocabulary_and_names_ids_past_its_own() -> None:
    inner = byte_tokenizer()  # 256 ids
    small = ShapeTokenizer(inner, model_vocab_size=100)
    ids = small("hello", add_special_tokens=False)["input_ids"]
    assert ids == [i % 100 for i in inner("hello", add_special_tokens=False)["input_ids"]] and max(ids) < 100
    assert len(small) == 100 and small.decode(torch.tensor([72, 105])) == inner.decode([72, 105])
    large = copy.deepcopy(ShapeTokenizer(inner, model_vocab_size=1000))  # a copy is a working tokenizer too
    assert large.decode([72, 300, 105]) == inner.decode([72]) + "<id 300>" + inner.decode([105])
    assert large.fold(torch.tensor([[5, 999]])).tolist() == [[5, 999]]


def test_without_the_embedded_model_a_byte_level_stand_in_tokenizes_and_the_name_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_installed() -> Path:
        raise BadInput("The embedded model is not installed")

    monkeypatch.setattr(shape_model, "embedded_folder", lambda: tmp_path / "never-converted")
    monkeypatch.setattr(shape_model, "embedded_gguf_folder", not_installed)
    tokenizer, note = shape_model.embedded_tokenizer()
    assert note == shape_model.STAND_IN and len(tokenizer) == 256
    assert tokenizer.decode(tokenizer("Paris", add_special_tokens=False)["input_ids"]) == "Paris"
    assert shape_model.display_name("llama-3.1-8b", note) == "Llama-3.1-8B shape (random weights, byte-level tokenizer)"


def test_measure_this_here_sets_the_run_beside_the_what_if_for_the_very_same_request(shape_trace: Trace) -> None:
    asked = what_if(Scenario(load_architecture("smollm2-135m"), find_gpu("H100 SXM"), "bfloat16", 1, 8, 1024, 512))
    assert shape_name(asked) == "shape:smollm2-135m"
    here = compare_here(asked, shape_trace)
    prompt, decodes = shape_trace.prompt_len, shape_trace.decodes
    s = here.what_if.scenario
    assert (s.batch, s.context, s.prompt_tokens) == (1, prompt + 2, prompt)  # 3 decodes: the middle one's cache
    assert here.what_if.decode.floor_s == decode_step(s).floor_s and s.gpu.name == "H100 SXM"
    rows = {row.figure: row for row in here.rows}
    assert rows["parameters"] == HereRow(
        "parameters", f"{SMOL_PARAMS:,} (config.json)", f"{SMOL_PARAMS:,} (the built tensors)", ""
    )
    assert rows["weights"].what_if == "269.0 MB (bfloat16)" and rows["weights"].measured_here == "538.1 MB (float32)"
    kv = rows["KV cache per position"]
    assert kv.what_if == "23.04 kB (bfloat16)" and kv.measured_here == "46.08 kB (float32, the cache's tensors)"
    decode = rows[f"decode step at context {prompt + 2}, batch 1"]
    wall = statistics.median(p.wall_s for p in decodes)
    floor = statistics.median(p.cost.roofline_time_s for p in decodes)
    assert (decode.measured_here, decode.floor_here, decode.what_if) == (
        ms(wall),
        ms(floor),
        ms(here.what_if.decode.floor_s),
    )
    assert here.decode_factor == pytest.approx(wall / floor)
    assert here.sentence.endswith(f"on the H100 SXM (bfloat16) is {ms(here.what_if.decode.floor_s)}")
    folder = what_if(replace(asked.scenario, arch=replace(asked.scenario.arch, name="/models/mine")))
    assert shape_name(folder) is None  # a folder's config has no shape to build
