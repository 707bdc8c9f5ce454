"""The what-if roofline (explorer.scale): exact parameter counts against the published totals and against transformers'
own modules, the must-show figures, hand-computed tensor-parallel and max-batch cases, the embedded model's weights
and KV bytes against a real run, refusals in one line, the chart frames, and the `whatif` command."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from explorer.cli import whatif as whatif_cli
from explorer.cli.common import OneLineParser
from explorer.core.errors import BadInput, ExplorerError
from explorer.core.gpu_specs import GPU_SPECS
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import ridge_batch
from explorer.core.units import GIB
from explorer.scale.config import CONFIG_DIR, load_architecture, parse_config, shipped
from explorer.scale.explain import ceiling_if_read_whole_text, formula_lines, knee_text
from explorer.scale.interconnect import INTERCONNECTS
from explorer.scale.params import count_params, kv_bytes_per_token, weight_bytes
from explorer.scale.whatif import Scenario, decode_step, find_gpu, max_batch, what_if

H100 = find_gpu("H100 SXM")
LLAMA_8B_PARAMS = 8_030_261_248


def scenario(model: str, **kwargs: object) -> Scenario:
    return Scenario(load_architecture(model), kwargs.pop("gpu", H100), **kwargs)  # type: ignore[arg-type]


# --- the must-show ----------------------------------------------------------------------------------------------
TABLE_BYTES = 128_256 * 4096 * 2  # Llama-3.1-8B's untied input table in bfloat16
GATHERED_8B_BYTES = 2 * LLAMA_8B_PARAMS - TABLE_BYTES + 4096 * 2  # every weight, of the input table one row


def test_llama_31_8b_on_an_h100_gives_seed_4s_figure_and_says_which_convention() -> None:
    """The explainers' 16 GB / 3.35 TB/s ≈ 209 tokens/s reads the input table whole; the what-if gathers its row, as
    the live run and a real lookup do (223 tokens/s), and its formulas give the back-of-envelope figure beside it."""
    result = what_if(scenario("llama-3.1-8b", dtype="bfloat16", batch=1, context=1))
    assert result.params == LLAMA_8B_PARAMS
    assert result.kv_bytes_per_token == 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert result.decode.cost.weight_bytes_read == GATHERED_8B_BYTES == 15_009_857_536
    kv = 3 * 131_072  # a read-once cache: the held position and the new one read, the new one written
    assert result.decode_tokens_per_s_ceiling == pytest.approx(3.35e12 / (GATHERED_8B_BYTES + kv), rel=1e-12)
    assert round(result.decode_tokens_per_s_ceiling, 1) == 223.2
    seed_4 = 3.35e12 / (2 * LLAMA_8B_PARAMS)  # ~209 tokens/s: 16 GB of weights at 3.35 TB/s, the table read whole
    assert any(f"{seed_4:,.1f} tokens/s" in line and "reads it whole" in line for line in formula_lines(result))
    assert result.decode_tokens_per_s_ceiling_per_stream == result.decode_tokens_per_s_ceiling  # batch 1
    assert result.decode.bound == "memory" and result.decode.cost.cache_layout == "read_once"


def llama_8b_by_hand_from_its_config_json() -> tuple[int, int]:
    """(every weight's bytes, the input table's bytes) of Llama-3.1-8B in bfloat16, counted here from the shipped
    config.json's own fields, not by the what-if's counter."""
    c = json.loads((CONFIG_DIR / shipped()["llama-3.1-8b"].file).read_text(encoding="utf-8"))
    hidden, layers, ffn, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    kv_width = c["num_key_value_heads"] * (hidden // c["num_attention_heads"])
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * ffn + 2 * hidden  # q o, k v, mlp, 2 norms
    assert not c["tie_word_embeddings"]
    params = 2 * vocab * hidden + layers * per_layer + hidden  # input table, LM head, layers, final norm
    assert params == LLAMA_8B_PARAMS
    return 2 * params, 2 * vocab * hidden


@pytest.mark.parametrize("context", [1, 1024])
def test_the_ceiling_if_the_input_table_were_read_whole_is_recomputed_by_hand(context: int) -> None:
    """Issue 42: At scale's 223 tokens/s sits beside the familiar 209 "if the 1.05 GB input table were read whole".
    By hand, at context 1 and the page's default 1024: the same step, the table read whole instead of one row."""
    weights, table = llama_8b_by_hand_from_its_config_json()
    assert table == TABLE_BYTES == 1_050_673_152
    result = what_if(scenario("llama-3.1-8b", dtype="bfloat16", batch=1, context=context))
    kv = (context + 1) * 131_072 + 131_072  # a read-once cache: the held positions and the new one read, one written
    gathered = weights - table + 4096 * 2  # of the input table, the token's one row
    assert result.decode_tokens_per_s_ceiling == pytest.approx(3.35e12 / (gathered + kv), rel=1e-12)
    whole = result.decode_tokens_per_s_ceiling_table_whole
    assert whole == pytest.approx(3.35e12 / (weights + kv), rel=1e-12)
    assert result.input_table_bytes == table
    said = ceiling_if_read_whole_text(result)
    if context == 1:  # the figures
        assert f"{result.decode_tokens_per_s_ceiling:,.0f}" == "223"
        assert said == "209 if the 1.05 GB input table were read whole"
    else:  # the KV read lowers both: computed for the scenario, not the rule of thumb's 209 pasted in
        assert said == "207 if the 1.05 GB input table were read whole"


def test_a_tied_table_has_no_read_whole_figure_and_a_group_says_one_gpus_share() -> None:
    tied = what_if(scenario("qwen2.5-0.5b", dtype="bfloat16", batch=1, context=1))
    assert tied.scenario.arch.tied_embeddings  # the LM head reads the table whole anyway: both conventions agree
    assert tied.decode_tokens_per_s_ceiling_table_whole is None and ceiling_if_read_whole_text(tied) is None
    group = what_if(scenario("llama-3.1-8b", dtype="bfloat16", batch=8, context=1, gpus=2))
    said = ceiling_if_read_whole_text(group)
    assert said is not None and said.endswith("input table (one GPU's share) were read whole")
    assert "525.3 MB" in said  # 1.05 GB / 2
    whole = group.decode_tokens_per_s_ceiling_table_whole
    assert whole is not None and whole < group.decode_tokens_per_s_ceiling  # B = 8 tokens a step, the table whole


# --- parameter counts -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", list(shipped()))
def test_every_shipped_config_gives_its_published_parameter_count(key: str) -> None:
    arch, row = load_architecture(key), shipped()[key]
    if row.published_rel_tol:  # a publisher's rounded figure ("46.7B"): within its rounding
        assert count_params(arch).total == pytest.approx(row.published_params, rel=row.published_rel_tol)
        assert row.published_as and row.published_source.startswith("https://")
    else:
        assert count_params(arch).total == row.published_params
    assert arch.source.startswith("https://huggingface.co/") and arch.source.endswith("/config.json")


def test_llama_8b_by_part_by_hand() -> None:
    counts = count_params(load_architecture("llama-3.1-8b"))
    assert counts.embeddings == counts.lm_head == 128_256 * 4096  # untied
    assert counts.attention == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)  # 8 KV heads of 128: k, v are 4096 x 1024
    assert counts.mlp == 32 * 3 * 4096 * 14_336
    assert counts.norms == 32 * 2 * 4096 + 4096
    assert counts.total == LLAMA_8B_PARAMS


def meta_model_params(data: dict) -> int:
    """What transformers itself builds from a config, on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**data))
    return sum(p.numel() for p in model.parameters())


TINY = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 100}
EXTRA_CONFIGS = {  # what the shipped configs do not exercise: Qwen3's q/k norms, optional biases, left-out keys
    "qwen3": {**TINY, "model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 32},
    "qwen3-defaults": {**TINY, "model_type": "qwen3", "num_attention_heads": 32},  # KV heads 32, head_dim 128
    "qwen2-defaults": {**TINY, "model_type": "qwen2", "num_attention_heads": 32},  # KV heads 32
    "llama-biases": {**TINY, "model_type": "llama", "attention_bias": True, "mlp_bias": True},
    "mistral-tied": {**TINY, "model_type": "mistral", "tie_word_embeddings": True},  # KV heads 8
}


@pytest.mark.parametrize("key", [*shipped(), *EXTRA_CONFIGS])
def test_counts_equal_the_modules_transformers_builds(key: str) -> None:
    if key in EXTRA_CONFIGS:
        data = EXTRA_CONFIGS[key]
    else:
        data = json.loads((CONFIG_DIR / shipped()[key].file).read_text())
    counted = count_params(parse_config(data, key, key, "test")).total
    language_model = data.get("text_config", data)  # Gemma 3: the language model only, as the what-if counts it
    assert counted == meta_model_params({k: v for k, v in language_model.items() if k != "quantization_config"})


# --- the embedded model against a real run --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smol_trace(real_lm: LoadedModel):
    from explorer.core.engine import Request
    from explorer.core.measure import measure

    return measure(real_lm, Request("Hi", max_new_tokens=2, use_chat_template=False))


def test_embedded_model_weights_and_kv_equal_a_real_run(real_lm: LoadedModel, smol_trace) -> None:
    result = what_if(scenario("embedded", dtype="float32"))
    loaded = list(real_lm.model.parameters())  # a tied table once
    assert result.params == sum(p.numel() for p in loaded) == 134_515_008
    assert result.weight_bytes == sum(p.numel() * p.element_size() for p in loaded) == real_lm.info.weight_bytes
    for record in smol_trace.passes:  # measured: the real cache tensors after each pass, over the positions held
        assert record.kv_cache_bytes == result.kv_bytes_per_token * record.cache_len_after
    assert result.kv_bytes_per_token == 46_080  # FIELD-NOTES: 2 x 30 x 3 x 64 x 4


def test_local_gap_is_median_wall_over_median_memory_floor(smol_trace) -> None:
    from statistics import median

    from explorer.scale.local import local_gap

    gap = local_gap(smol_trace)
    assert gap is not None and gap.decode_passes == 1
    decode = smol_trace.passes[1]
    assert gap.factor == pytest.approx(decode.wall_s / decode.cost.t_memory_s)
    assert gap.median_wall_s == median([decode.wall_s])
    assert gap.sentence.startswith("decode ran at ") and gap.sentence.endswith("x its memory floor here")


# --- hand-computed cases ------------------------------------------------------------------------------------------
def test_tensor_parallel_70b_on_four_h100s_by_hand() -> None:
    s = scenario("llama-3.1-70b", dtype="bfloat16", gpus=4, batch=1, context=1)
    result = what_if(s)
    norms = 80 * 2 * 8192 + 8192
    per_gpu_weights = ((70_553_706_496 - norms) // 4 + norms) * 2
    assert result.shard.weight_bytes == per_gpu_weights == 35_278_831_616
    assert result.shard.kv_heads == 2 and result.shard.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2 == 81_920
    sent = 2 * 80 * (1 * 8192 * 2) * 2 * 3 / 4  # 2 all-reduces a layer, a ring sends 2 (N - 1) / N of each
    assert result.decode.link_bytes == sent == 3_932_160
    link_s = sent / 450e9  # NVLink 900 GB/s both ways: 450 each way
    table = 128_256 * 8192 // 4 * 2  # each GPU's quarter of the input table, of which it gathers a quarter row
    read = per_gpu_weights - table + 8192 // 4 * 2
    assert result.decode.cost.weight_bytes_read == read
    memory_s = (read + 3 * 81_920) / 3.35e12  # the held and the new position read, the new one written
    assert result.decode.floor_s == pytest.approx(memory_s + link_s, rel=1e-12)
    assert result.decode_tokens_per_s_ceiling == pytest.approx(1 / (memory_s + link_s), rel=1e-12)
    assert what_if(scenario("llama-3.1-70b", gpus=1)).max_batch == 0  # 141 GB of weights in 80 GB: no


def test_tensor_parallel_beyond_the_nvlink_fabric_and_kv_replication() -> None:
    pair = scenario("llama-3.1-8b", gpu=find_gpu("H100 PCIe"), gpus=2)
    four = scenario("llama-3.1-8b", gpu=find_gpu("H100 PCIe"), gpus=4)
    assert pair.link.name == "NVLink" and four.link.name == "PCIe Gen5 x16"  # a bridge joins two cards
    sixteen = what_if(scenario("llama-3.1-70b", gpus=16))
    assert sixteen.shard.kv_heads == 1  # 8 KV heads over 16 GPUs: each keeps one (replicated), not half of one


def test_max_batch_by_hand() -> None:
    s = scenario("llama-3.1-8b", dtype="bfloat16", context=8192)
    free = 80 * 10**9 - 8_030_261_248 * 2  # the datasheet's 80 GB as 10^9 bytes each - 16,060_522,496 of weights
    per_request = 8192 * 131_072  # 1 GiB of KV at 8K context
    assert max_batch(s) == free // per_request == 59
    assert what_if(s).fits and not what_if(scenario("llama-3.1-8b", context=8192, batch=60)).fits


def test_gpu_memory_is_the_datasheets_gb_as_10_9_bytes_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mistral-7B-v0.3 on an L40S in bf16 at 32k context: 48 x 10^9 bytes hold 7 requests (14.5 GB of weights and
    4.29 GB of KV each); reading the datasheet's 48 GB as GiB would promise an 8th."""
    out = tmp_path / "w.json"
    argv = ["whatif", "--model", "mistral-7b-v0.3", "--gpu", "L40S", "--dtype", "bfloat16", "--context", "32768"]
    assert whatif_main([*argv, "--json", str(out), "--explain"]) == 0
    written = json.loads(out.read_text())
    assert written["weight_bytes"] == 14_496_047_104 and written["kv_bytes_per_token"] * 32768 == 4_294_967_296
    assert written["gpu"]["memory_bytes"] == 48 * 10**9 and written["gpu"]["memory_gb"] == 48
    assert written["max_batch"] == (48 * 10**9 - 14_496_047_104) // 4_294_967_296 == 7
    assert (48 * GIB - 14_496_047_104) // 4_294_967_296 == 8  # what the GiB reading gave
    assert "10^9 bytes" in written["gpu"]["memory_unit"] and "datasheet" in written["gpu"]["memory_unit"]
    assert written["gpu"]["source"].startswith("NVIDIA L40S GPU datasheet, https://")
    units = written["units"]  # every memory figure in the JSON says its unit
    for key in ("weight_bytes", "kv_bytes_per_token", "gpu.memory_bytes", "gpu.memory_gb"):
        assert units[key], key
    for part in ("prefill", "decode_step"):
        assert {f"{part}.{k}" for k in written[part] if k.endswith("_bytes")} <= set(units)
    assert {f"tensor_parallel.{k}" for k in written["tensor_parallel"] if "bytes" in k} <= set(units)
    for spec in GPU_SPECS:
        assert spec.memory_bytes == spec.memory_gb * 10**9 and f"{spec.memory_gb} x 10^9 bytes" in spec.memory_text
    printed = capsys.readouterr().out
    assert "48 GB (48 x 10^9 bytes, datasheet)" in printed and "48,000,000,000 - 14,496,047,104" in printed


def test_a_knee_beyond_the_memory_is_not_stated_as_one() -> None:
    fits = what_if(scenario("llama-3.1-8b", dtype="bfloat16", context=1))
    assert fits.ridge_batch is not None and fits.ridge_batch <= fits.max_batch
    assert knee_text(fits) == f"the step turns compute-bound at B = {fits.ridge_batch:,} (the roofline's knee)"
    beyond = what_if(scenario("llama-3.1-8b", gpu=find_gpu("L40S"), dtype="bfloat16", context=256))
    assert beyond.ridge_batch is not None and beyond.ridge_batch > beyond.max_batch
    text = knee_text(beyond)
    assert "stays memory-bound at every batch that fits" in text and "turns compute-bound at" not in text
    never = what_if(scenario("llama-3.1-8b", dtype="bfloat16", context=32768))
    assert never.ridge_batch is None and "more KV bytes than its FLOPs can hide" in knee_text(never)
    assert any("adds more bytes than its FLOPs can hide" in line for line in formula_lines(never))


def test_ridge_batch_by_hand_and_on_the_step_itself() -> None:
    s = scenario("llama-3.1-8b", dtype="bfloat16", context=1)
    w = (2 * LLAMA_8B_PARAMS - TABLE_BYTES) / 3.35e12  # weights read once a step, but the input table's rows
    # per request: its matmuls and attention over 2 keys a layer; two positions read and one written, one table row
    c = (2 * (LLAMA_8B_PARAMS - 128_256 * 4096 - 65 * 4096) + 4 * 32 * 128 * 2 * 32) / 989.4e12
    m = (3 * 131_072 + 4096 * 2) / 3.35e12
    ridge = ridge_batch(lambda batch: decode_step(s, batch).cost)
    assert ridge == math.ceil(w / (c - m)) == 298
    assert decode_step(s, 298).bound == "compute" and decode_step(s, 297).bound == "memory"
    llama_4k = scenario("llama-3.1-8b", context=4096)
    assert ridge_batch(lambda batch: decode_step(llama_4k, batch).cost) is None  # KV per request outgrows its FLOPs


# --- refusals ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"gpus": 8, "model": "qwen2.5-7b"}, "28 query heads"),
        ({"gpu": find_gpu("T4"), "dtype": "bfloat16"}, "no bfloat16 figure"),
        ({"context": 131_073}, "max_position_embeddings"),
        ({"dtype": "int4"}, "Unknown dtype"),
        ({"batch": 0}, "--batch"),
    ],
)
def test_what_the_model_cannot_answer_is_refused_in_one_line(kwargs: dict, words: str) -> None:
    with pytest.raises(BadInput, match=words):
        what_if(scenario(kwargs.pop("model", "llama-3.1-8b"), **kwargs))


def test_models_from_a_folder_a_hub_id_and_hosted_mode(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIG_DIR / "qwen2.5-0.5b.json").read_text())
    assert count_params(load_architecture(str(tmp_path))).total == 494_032_768
    assert load_architecture("Qwen/Qwen2.5-0.5B").name == "qwen2.5-0.5b"  # a shipped hub id works offline
    with pytest.raises(BadInput, match="only the shipped models"):
        load_architecture(str(tmp_path), hosted=True)
    with pytest.raises(BadInput, match="hub is unreachable"):  # HF_HUB_OFFLINE=1 in conftest
        load_architecture("someone/not-cached-anywhere")
    with pytest.raises(BadInput, match="neither a shipped model"):
        load_architecture(str(tmp_path / "missing"))
    with pytest.raises(BadInput, match="mixture of experts"):
        parse_config({**EXTRA_CONFIGS["qwen3"], "num_experts": 8}, "moe", "moe", "test")
    with pytest.raises(BadInput, match="'gpt2' model"):
        parse_config({"model_type": "gpt2"}, "gpt2", "gpt2", "test")


def test_every_gpu_of_the_spec_table_has_an_interconnect_row() -> None:
    assert {spec.name for spec in GPU_SPECS} == set(INTERCONNECTS)
    assert all(row.source for row in INTERCONNECTS.values())


# --- the command -------------------------------------------------------------------------------------------------
def whatif_main(argv: list[str]) -> int:
    """`python -m explorer whatif ...` in process: the parser, the precheck, the command, one-line errors."""
    parser = OneLineParser(prog="explorer")
    whatif_cli.register(parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser))
    try:
        args = parser.parse_args(argv)
        args.precheck(args)
        args.func(args)
    except ExplorerError as exc:
        print(f"error: {exc}")
        return exc.exit_code
    return 0


def test_the_command_prints_and_writes_the_must_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.json"
    argv = ["whatif", "--model", "llama-3.1-8b", "--gpu", "H100 SXM", "--dtype", "bfloat16"]
    assert whatif_main([*argv, "--batch", "1", "--context", "1", "--json", str(out), "--explain"]) == 0
    written = json.loads(out.read_text())
    assert written["params"] == LLAMA_8B_PARAMS and written["kv_bytes_per_token"] == 131_072
    assert written["decode_tokens_per_s_ceiling"] == pytest.approx(3.35e12 / (GATHERED_8B_BYTES + 3 * 131_072))
    assert written["schema"] == "explorer.whatif/2" and written["decode_step"]["cache_layout"] == "read_once"
    assert {"prefill_s_floor", "decode_step_s_floor", "ridge_batch", "max_batch", "sources"} <= set(written)
    assert written["sources"]["params"].startswith("modelled") and written["sources"]["gpu"].startswith("spec")
    printed = capsys.readouterr().out
    assert "8,030,261,248" in printed and "formulas:" in printed and "decode_step_s_floor = max(" in printed


def test_the_command_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert whatif_main(["whatif", "--gpu", "B200"]) == 2
    assert whatif_main(["whatif", "--model", "qwen2.5-7b", "--gpus", "3"]) == 2
    assert whatif_main(["whatif", "--json", "/no/such/folder/w.json"]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)


def test_register_sets_what_main_reads() -> None:
    commands = argparse.ArgumentParser().add_subparsers(dest="command")
    whatif_cli.register(commands)
    args = commands.choices["whatif"].parse_args([])
    assert args.func is whatif_cli.cmd_whatif and args.precheck is whatif_cli.precheck_whatif
    assert args.loads_models is False  # main skips importing transformers: no weights here
    assert weight_bytes(load_architecture(args.model), args.dtype) == LLAMA_8B_PARAMS * 2
    assert kv_bytes_per_token(load_architecture("embedded"), "bfloat16") == 23_040  # FIELD-NOTES, bf16


# --- the chart frames -------------------------------------------------------------------------------------------
def test_frames_hold_the_marked_points_and_the_assumption_apart() -> None:
    from explorer.charts import scale as charts

    result = what_if(scenario("llama-3.1-8b", batch=8, context=1))
    context = charts.decode_context_frame(result, factor=3.0)
    assert context["context"].min() == 1 and context["context"].max() == 131_072
    assert result.kv_crossover_context in set(context["context"])
    assert (context["scaled_floor_ms"] == context["floor_ms"] * 3.0).all()
    assert context["source"].str.contains("assumption").all()
    assert charts.decode_context_frame(result)["scaled_floor_ms"].isna().all()  # no run: the model's floor only
    batch = charts.batch_frame(result, factor=3.0)
    assert batch["batch"].max() == result.max_batch and result.ridge_batch in set(batch["batch"])
    assert batch.loc[batch["batch"] == 1, "tokens_per_s"].item() == pytest.approx(
        1 / decode_step(result.scenario, 1).floor_s
    )
    memory = charts.memory_frame(result)
    assert memory["fits"].tolist() == (memory["batch"] <= result.max_batch).tolist()
    for chart in (
        charts.decode_context_chart(context, result, 3.0),
        charts.batch_chart(batch, result, 3.0),
        charts.memory_chart(memory, result),
    ):
        assert chart.to_dict()  # a valid Vega-Lite spec


def test_the_command_stores_the_experts_as_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.json"
    assert whatif_main(["whatif", "--model", "gpt-oss-20b", "--json", str(out)]) == 0
    shipped_as = json.loads(out.read_text())
    assert shipped_as["inputs"]["experts_dtype"] == "mxfp4" and "the experts as mxfp4" in capsys.readouterr().out
    assert whatif_main(["whatif", "--model", "gpt-oss-20b", "--experts-dtype", "bfloat16", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["weight_bytes"] == 2 * shipped_as["params"] > shipped_as["weight_bytes"]
    assert whatif_main(["whatif", "--experts-dtype", "int3"]) == 2 and "int3" in capsys.readouterr().out
