"""The what-if for the models people run beyond dense full attention: mixtures of experts (total and active
parameters, the experts a step reads at batch B), sliding-window layers (per-layer KV), and the quantization what-if."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.core.roofline import causal_keys
from explorer.scale.config import load_architecture, shipped
from explorer.scale.explain import formula_lines
from explorer.scale.params import (
    count_params,
    expected_experts_read,
    kv_bytes_at,
    kv_bytes_per_token,
    stored_bytes,
)
from explorer.scale.whatif import Scenario, decode_step, find_gpu, what_if

ROOT = Path(__file__).resolve().parents[1]
H100 = find_gpu("H100 SXM")
MOE = ["mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b"]


def test_the_issues_whatif_for_qwen3_30b_a3b(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    argv = ["whatif", "--model", "qwen3-30b-a3b", "--gpu", "H100 SXM", "--dtype", "bfloat16", "--batch", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "explorer", *argv, "--context", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["params"] == pytest.approx(30.5e9, rel=0.01)
    # Qwen's card says "3.3B activated"; counted exactly, every parameter outside the experts and 8 of 128 experts in
    # each of 48 layers make 3.353B: 1.6 % over, so the card's figure is 3.35B cut to two digits.
    assert figures["active_params"] == pytest.approx(3.3e9, rel=0.02)
    assert figures["experts"] == {
        "n_experts": 128,
        "experts_per_token": 8,
        "moe_layers": 48,
        "params_per_expert": 3 * 2048 * 768,
        "expected_experts_read_per_layer": pytest.approx(8.0),
        "routing": figures["experts"]["routing"],
    }
    # The ceiling comes from the bytes a batch-1 step reads: the active parameters, not all 30.5B (of the untied
    # input table one row, as a lookup gathers it).
    step = figures["decode_step"]
    table, hidden = 151_936 * 2048, 2048
    assert step["weight_bytes_read"] == 2 * (figures["active_params"] - table + hidden)
    step_bytes = step["weight_bytes_read"] + step["kv_bytes_read"] + step["kv_bytes_written"]
    assert figures["decode_tokens_per_s_ceiling"] == pytest.approx(H100.bandwidth_bytes_per_s / step_bytes)


@pytest.mark.parametrize("key", MOE)
def test_active_parameters_by_hand_and_as_published(key: str) -> None:
    a, row = load_architecture(key), shipped()[key]
    c = count_params(a)
    assert c.active == c.total - c.experts + a.moe_layers * a.experts_per_token * c.expert_each
    assert c.experts == a.moe_layers * a.n_experts * c.expert_each
    if key.startswith("gpt-oss"):  # OpenAI's card counts active parameters without the input table (a gather)
        assert c.active - c.embeddings == pytest.approx(row.published_active_params, rel=0.01)
    elif key == "mixtral-8x7b":
        assert c.active == pytest.approx(row.published_active_params, rel=0.01)  # "12.9B per token"


def test_a_dense_model_has_no_experts_and_active_equals_total() -> None:
    result = what_if(Scenario(load_architecture("llama-3.1-8b"), H100))
    figures = result.to_dict()
    assert figures["experts"] is None and figures["active_params"] == figures["params"]


def test_distinct_experts_read_grow_from_k_to_n_with_batch() -> None:
    a = load_architecture("mixtral-8x7b")
    reads = [expected_experts_read(a, b) for b in (1, 2, 4, 8, 64)]
    assert reads[0] == pytest.approx(2) and reads[-1] == pytest.approx(8, rel=1e-6)
    assert reads == sorted(reads)
    assert reads[1] == pytest.approx(8 * (1 - (6 / 8) ** 2))  # n (1 - (1 - k/n)^B) by hand


def test_an_moe_step_reads_more_weights_with_batch_and_a_dense_one_does_not() -> None:
    moe = Scenario(load_architecture("mixtral-8x7b"), H100, context=1)
    dense = Scenario(load_architecture("llama-3.1-70b"), H100, context=1)
    assert decode_step(moe, 8).cost.weight_bytes_read > 2 * decode_step(moe, 1).cost.weight_bytes_read
    rows = 7 * 8192 * 2  # a dense step of 8 gathers 7 more rows of the input table than a step of 1, nothing else
    assert decode_step(dense, 8).cost.weight_bytes_read == decode_step(dense, 1).cost.weight_bytes_read + rows
    # So the MoE's tokens/s bends below the line of a model that reads every expert whatever the batch:
    assert decode_step(moe, 1).floor_s < decode_step(moe, 1, every_expert=True).floor_s
    every = decode_step(moe, 4096, every_expert=True).cost
    assert decode_step(moe, 4096).cost.weight_bytes_read == pytest.approx(every.weight_bytes_read, rel=1e-6)


def test_sliding_layers_keep_their_window_and_only_full_layers_grow() -> None:
    a = load_architecture("gemma-3-27b")
    assert a.sliding_layers == 52 and set(a.windows) == {0, 1024}  # five sliding to one full, 62 layers
    per_position = 2 * a.kv_heads * a.head_dim * 2  # K and V, one layer, bfloat16
    for context in (100, 1024, 32_768):  # a sliding layer holds window - 1, as transformers' cache (the live run)
        by_hand = per_position * (10 * context + 52 * min(context, 1023))
        assert kv_bytes_at(a, context, "bfloat16") == by_hand
    assert kv_bytes_per_token(a, "bfloat16") == per_position * 62  # what one more position adds early on
    result = what_if(Scenario(a, H100, context=32_768))
    assert result.kv_bytes_per_token < result.kv_bytes_per_new_token  # per token of a long context: far less


def test_gpt_oss_alternates_sliding_and_full_layers() -> None:
    a = load_architecture("gpt-oss-20b")
    assert a.windows == (128, 0) * 12


def test_attention_pairs_under_a_window_by_brute_force() -> None:
    for first, last, window in [(1, 10, 4), (5, 5, 4), (1, 3, 8), (3, 20, 7), (10, 12, 0)]:
        brute = sum(min(i, window) if window else i for i in range(first, last + 1))
        assert causal_keys(first, last, window) == brute


def test_quantized_weights_and_kv_change_only_bytes() -> None:
    arch = load_architecture("llama-3.1-8b")
    bf16 = what_if(Scenario(arch, H100, context=8192))
    int4 = what_if(Scenario(arch, H100, context=8192, weights_dtype="int4", kv_dtype="fp8"))
    assert int4.weight_bytes == stored_bytes(bf16.params, "int4") == bf16.weight_bytes // 4
    assert int4.kv_bytes_per_token == bf16.kv_bytes_per_token // 2
    assert int4.decode.cost.flops == bf16.decode.cost.flops  # compute stays in bfloat16
    assert int4.decode.floor_s < bf16.decode.floor_s and int4.max_batch > 2 * bf16.max_batch
    assert int4.to_dict()["inputs"]["weights_dtype"] == "int4"


def test_an_unknown_storage_type_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "whatif", "--weights-dtype", "int3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "int3" in done.stderr


def test_qwen3_30b_a3b_states_its_published_figures_how_they_were_cut_and_the_exact_counts() -> None:
    """Qwen's card says "30.5B in total and 3.3B activated": both cut to 0.1 B, not rounded (the exact 3,353,032,704
    would round to 3.4 B). The what-if keeps its exact counts and states the published figures beside them."""
    from explorer.cli.whatif import format_whatif
    from explorer.ui.scale_view import active_help

    row = shipped()["qwen3-30b-a3b"]
    result = what_if(Scenario(load_architecture("qwen3-30b-a3b"), H100, batch=1, context=1))
    assert (result.params, result.active_params) == (30_532_122_624, 3_353_032_704)
    for exact, published in (
        (result.params, row.published_params),
        (result.active_params, row.published_active_params),
    ):
        step = row.published_step(published)
        assert step == 10**8 and exact // step * step == published  # truncated
    assert round(result.active_params / 10**8) * 10**8 != row.published_active_params  # rounding would give 3.4 B
    figures = result.to_dict()
    assert figures["active_params"] == 3_353_032_704
    assert figures["published"] == {
        "params": 30_500_000_000,
        "active_params": 3_300_000_000,
        "as": "30.5B in total and 3.3B activated",
        "rounding": "truncated (not rounded) to 0.1 B",
        "active_params_counts_embeddings": True,
        "source": "https://huggingface.co/Qwen/Qwen3-30B-A3B",
    }
    text = format_whatif(result)
    assert "3,353,032,704 per token" in text
    assert "published 3.3 B, truncated (not rounded) to 0.1 B: exact 3.353 B" in text
    assert "published 30.5 B, truncated (not rounded) to 0.1 B: exact 30.532 B" in text
    assert "published 3.3 B" in active_help(result)
    assert (
        what_if(Scenario(load_architecture("llama-3.1-8b"), H100))
        .to_dict()["published"]["rounding"]
        .startswith("exact")
    )


def test_gpt_oss_active_figures_are_compared_on_the_publishers_footing() -> None:
    """OpenAI's card counts active parameters without the input embedding table (a token reads one row of it): the
    exact count less that table is within the card's rounding, and the note says so rather than showing a 16 % gap."""
    for key in ("gpt-oss-20b", "gpt-oss-120b"):
        result = what_if(Scenario(load_architecture(key), H100, batch=1, context=1))
        row = shipped()[key]
        without = result.active_params - result.counts.embeddings
        assert abs(without - row.published_active_params) <= row.published_step(row.published_active_params) / 2
        assert abs(result.active_params - row.published_active_params) > 0.1 * row.published_active_params
        assert "without it, as the publisher counts" in result.published_active_note()
        assert result.to_dict()["published"]["active_params_counts_embeddings"] is False
    qwen = what_if(Scenario(load_architecture("qwen3-30b-a3b"), H100, batch=1, context=1))
    assert "without it" not in qwen.published_active_note()
    assert qwen.to_dict()["published"]["active_params_counts_embeddings"] is True


def test_gpt_oss_ships_its_experts_in_mxfp4_and_the_what_if_stores_them_so() -> None:
    """gpt-oss's config.json says its experts are MXFP4 (4-bit values, one 8-bit scale per 32: 4.25 bits, scales
    counted); attention, the router, the embedding and the LM head stay bf16. So the 20b's weights are 13.8 GB, not
    the 41.8 GB every parameter in bf16 would take, and fit a 16 GB card."""
    arch = load_architecture("gpt-oss-20b")
    assert arch.experts_shipped_as == "mxfp4" and load_architecture("mixtral-8x7b").experts_shipped_as == ""
    c = count_params(arch)
    expert_weights = 24 * 32 * 3 * 2880 * 2880  # every expert's projections, biases left out (they stay bf16)
    shipped_as = what_if(Scenario(arch, H100))
    assert shipped_as.scenario.experts_storage == "mxfp4"
    assert shipped_as.weight_bytes == 2 * (c.total - expert_weights) + expert_weights * 4.25 / 8
    assert 13e9 < shipped_as.weight_bytes < 14e9 < 16e9
    in_bf16 = what_if(Scenario(arch, H100, experts_dtype="bfloat16"))
    assert in_bf16.weight_bytes == 2 * c.total and round(in_bf16.weight_bytes / 1e9, 1) == 41.8
    assert shipped_as.decode.floor_s < in_bf16.decode.floor_s and shipped_as.max_batch > in_bf16.max_batch
    assert "expert weights x 0.53125 bytes (mxfp4)" in "\n".join(formula_lines(shipped_as))
    dense = what_if(Scenario(load_architecture("llama-3.1-8b"), H100, weights_dtype="mxfp4"))
    assert dense.weight_bytes == stored_bytes(dense.params, "mxfp4") == math.ceil(dense.params * 4.25 / 8)
    assert dense.to_dict()["inputs"]["experts_dtype"] is None
