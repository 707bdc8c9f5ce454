"""The architectures people bring, each as a tiny random save_pretrained folder: it loads (SDPA where the architecture
has it, eager where not), its greedy tokens equal generate()'s, its cache holds what the per-layer formula says on
every pass, its attention maps are captured, and an MoE's recorded experts are the ones its routers chose."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from explorer.core.attention import capture_attention
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel, routers
from explorer.core.report import format_trace, kv_per_token_text
from explorer.core.trace import DeviceProfile, Trace
from explorer.core.units import human_bytes
from explorer.models.loading import load_model
from tests.tiny_zoo import ALL, BY_NAME, WINDOW, Architecture, save_tiny

PROMPT = "sliding windows!"  # 16 byte tokens: past the tiny window of 8
NEW_TOKENS = 5
MOE_NAMES = [a.name for a in ALL if a.moe]


@pytest.fixture(scope="session")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedModel]:
    """Every architecture saved and loaded once per session (~0.1 s each)."""
    root = tmp_path_factory.mktemp("zoo")
    return {a.name: load_model(str(save_tiny(a, root / a.name)), device="cpu") for a in ALL}


@pytest.fixture(scope="session")
def traces(zoo: dict[str, LoadedModel], cpu_figures: DeviceProfile) -> dict[str, Trace]:
    """One run of PROMPT per architecture, shared by the tests that only read it (traces are frozen)."""
    return {name: run(lm, cpu_figures) for name, lm in zoo.items()}


def hf_greedy(lm: LoadedModel, prompt_ids: tuple[int, ...], new_tokens: int) -> list[int]:
    ids = torch.tensor([list(prompt_ids)])
    out = lm.model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0
    )
    return out[0, ids.shape[1] :].tolist()


def run(lm: LoadedModel, device: DeviceProfile, prompt: str = PROMPT, new_tokens: int = NEW_TOKENS) -> Trace:
    request = Request(prompt, max_new_tokens=new_tokens, use_chat_template=False)
    return generate(lm, check_request(lm, request), device)


def expected_layer_bytes(arch: Architecture, lm: LoadedModel, positions: int) -> tuple[int, ...]:
    """Written out from the architecture's table, not from ModelInfo: a sliding layer keeps window - 1 positions; a
    latent cache holds its two slots' widths (MLA's latent and rotary key), per-head K and V otherwise."""
    m = lm.info
    k_width, v_width = arch.cache_widths or (m.kv_heads * m.head_dim, m.kv_heads * m.head_dim)
    per_position = (k_width + v_width) * m.bytes_per_element
    return tuple(per_position * (min(positions, w - 1) if w else positions) for w in arch.windows)


@pytest.mark.parametrize("name", [a.name for a in ALL])
def test_loads_runs_true_and_the_cache_holds_the_per_layer_formula(
    name: str, zoo: dict[str, LoadedModel], traces: dict[str, Trace]
) -> None:
    arch, lm, trace = BY_NAME[name], zoo[name], traces[name]
    assert lm.info.attn_implementation == ("sdpa" if arch.sdpa else "eager")
    assert lm.info.windows == arch.windows
    assert (lm.info.experts is not None) == arch.moe
    assert list(trace.generated_token_ids) == hf_greedy(lm, trace.prompt_token_ids, NEW_TOKENS)
    for p in trace.passes:
        assert p.kv_layer_bytes == expected_layer_bytes(arch, lm, p.cache_len_after)
        assert p.kv_cache_bytes == sum(p.kv_layer_bytes)
    if not arch.moe:
        assert lm.info.active_params_per_token == lm.info.params
        assert all(p.experts_touched == () and p.cost.active_params == lm.info.params for p in trace.passes)


@pytest.mark.parametrize("name", [a.name for a in ALL])
def test_attention_maps_are_captured(name: str, zoo: dict[str, LoadedModel], traces: dict[str, Trace]) -> None:
    lm, trace = zoo[name], traces[name]
    maps = capture_attention(lm, trace)
    assert maps.same_tokens_as(trace)
    T = trace.prompt_len
    for layer, window in enumerate(lm.info.windows):
        pre = maps.prefill[layer].astype(np.float32)
        assert pre.shape == (lm.info.heads, T, T)
        assert np.all(pre[:, np.triu_indices(T, k=1)[0], np.triu_indices(T, k=1)[1]] == 0.0)  # causal
        if window:  # a query sees at most its window: keys further back are exactly 0
            assert np.all(pre[:, T - 1, : T - window] == 0.0)
        assert np.all(pre.sum(-1) <= 1.001)  # gpt-oss's attention sinks take a share of each row
        for row, p in zip(maps.decode[layer], trace.decodes):
            assert row.shape == (lm.info.heads, p.cache_len_after)


def routed_by_hand(lm: LoadedModel) -> tuple[list[list[set[int]]], list[torch.utils.hooks.RemovableHandle]]:
    """Per forward call, per MoE layer: the top-k experts recomputed from each router's input and its own weights."""
    calls: list[list[set[int]]] = []
    layers = routers(lm.model)

    def hook_for(i: int):  # noqa: ANN202
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].reshape(-1, args[0].shape[-1])
            logits = F.linear(x, module.weight, getattr(module, "bias", None))
            if i == 0:
                calls.append([set() for _ in layers])
            calls[-1][i] = set(logits.topk(module.top_k, dim=-1).indices.flatten().tolist())

        return hook

    handles = [r.router.register_forward_pre_hook(hook_for(i)) for i, r in enumerate(layers)]
    return calls, handles


@pytest.mark.parametrize("name", MOE_NAMES)
def test_experts_touched_are_the_routers_top_k(
    name: str, zoo: dict[str, LoadedModel], cpu_figures: DeviceProfile
) -> None:
    lm = zoo[name]
    run(lm, cpu_figures)  # its shapes warmed first, in any test order: the hooks then see the timed passes only
    calls, handles = routed_by_hand(lm)
    try:
        trace = run(lm, cpu_figures)
    finally:
        for handle in handles:
            handle.remove()
    assert len(calls) == trace.new_tokens  # one router call per layer per pass
    for p, by_hand in zip(trace.passes, calls):
        assert p.experts_chosen == tuple(tuple(sorted(s)) for s in by_hand)
        assert p.experts_touched == tuple(len(s) for s in by_hand)


def dense_bytes_read(lm: LoadedModel, tokens: int) -> int:
    """Every parameter outside the experts modules, an untied embedding table gathered row by row: from the modules."""
    experts = {id(p) for r in routers(lm.model) for p in r.experts.parameters()}
    dense = sum(p.numel() * p.element_size() for p in lm.model.parameters() if id(p) not in experts)
    m = lm.info
    if not m.tied_embeddings:
        dense -= m.input_embedding_params * m.bytes_per_element - tokens * m.hidden_size * m.bytes_per_element
    return dense


@pytest.mark.parametrize("name", MOE_NAMES)
def test_moe_decode_reads_k_experts_and_a_long_prefill_reads_more(
    name: str, zoo: dict[str, LoadedModel], cpu_figures: DeviceProfile
) -> None:
    lm = zoo[name]
    e = lm.info.experts
    assert e is not None and e.experts_per_token == 2 and e.n_experts == 4 and e.moe_layers == 2
    one_expert = sum(p.numel() * p.element_size() for p in routers(lm.model)[0].experts.parameters()) // 4
    assert e.expert_bytes == one_expert
    trace = run(lm, cpu_figures, prompt="a prompt of forty byte tokens, for MoE!!", new_tokens=3)
    prefill, decodes = trace.prefill, trace.decodes
    assert prefill.tokens_in == 40
    for p in decodes:  # batch 1, one token: exactly k experts per MoE layer
        assert p.experts_touched == (2, 2)
        assert p.cost.expert_bytes_read == 2 * 2 * one_expert
        assert p.cost.weight_bytes_read == dense_bytes_read(lm, 1) + 2 * 2 * one_expert
        assert p.cost.active_params == lm.info.active_params_per_token
    assert sum(prefill.experts_touched) > 2 * 2  # 40 tokens route to more distinct experts
    assert prefill.cost.weight_bytes_read == dense_bytes_read(lm, 40) + sum(prefill.experts_touched) * one_expert
    assert lm.info.active_params_per_token < lm.info.params
    assert "mixture of experts: 2 MoE layers x 4 experts, 2 per token" in format_trace(trace)


def test_per_token_line_is_true_on_a_hybrid_model(traces: dict[str, Trace]) -> None:
    """Gemma 3: two sliding layers plateau at window - 1 positions; the full layer grows by its bytes per token."""
    trace = traces["gemma3-text"]
    m = trace.model
    per_layer = m.kv_bytes_per_token_per_layer
    for before, after in zip(trace.passes, trace.passes[1:]):  # past the window: one full layer grows per token
        assert after.kv_cache_bytes - before.kv_cache_bytes == m.kv_bytes_per_token_full_layers == per_layer
    positions = trace.passes[-1].cache_len_after
    assert trace.final_kv_cache_bytes == per_layer * (positions + 2 * (WINDOW - 1))
    line = next(line for line in format_trace(trace).splitlines() if line.startswith("KV cache"))
    assert f"{human_bytes(per_layer)} per token in the 1 full-attention layers" in line
    assert f"{human_bytes(2 * (WINDOW - 1) * per_layer)} at most together" in line
    assert kv_per_token_text(m) in line
    shape = "attention sdpa; 2 sliding-window layers (window 8) and 1 full-attention layers; dense"
    assert shape in format_trace(trace)


def test_modelled_kv_reads_follow_each_layers_window(traces: dict[str, Trace]) -> None:
    """A decode pass reads, per layer, the positions the cache hands attention: window - 1 kept + 1 new in a sliding
    layer, every position in a full one; read twice (the update's concatenation, then attention) and written once."""
    trace = traces["gpt-oss"]
    m = trace.model
    last = trace.passes[-1]
    seen = WINDOW + last.cache_len_after  # layer 0 sliding (window - 1 kept + 1 new), layer 1 full
    assert last.cost.kv_bytes_written == seen * m.kv_bytes_per_token_per_layer
    assert last.cost.kv_bytes_read == 2 * seen * m.kv_bytes_per_token_per_layer


def test_a_real_folder_transformers_cannot_run_is_named_not_blamed(tmp_path: Path) -> None:
    from explorer.models.loading import _load_error

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["FancyNewForCausalLM"], "model_type": "fancy"}')
    message = str(_load_error(str(folder), ValueError("something inside transformers"), folder))
    assert "FancyNewForCausalLM" in message and "ValueError" in message and "save_pretrained" not in message


def test_kv_page_shows_full_and_sliding_layers_apart(traces: dict[str, Trace]) -> None:
    from explorer.charts import kv as kv_charts

    trace = traces["gemma3-text"]
    growth = kv_charts.growth_frame(trace)
    assert (growth["measured_bytes"] == growth["modelled_bytes"]).all()
    kinds = kv_charts.kinds_frame(trace)
    sliding = kinds[kinds["kind"].str.startswith(kv_charts.SLIDING_LAYERS)]["measured_bytes"].tolist()
    full = kinds[kinds["kind"].str.startswith(kv_charts.FULL_LAYERS)]["measured_bytes"].tolist()
    assert len(set(sliding)) == 1  # the prompt already passed the window: a plateau
    assert all(b > a for a, b in zip(full, full[1:]))  # full layers keep growing
    layers = kv_charts.layers_frame(trace, trace.new_tokens - 1)
    assert (layers["measured_bytes"] == layers["modelled_bytes"]).all()
    frame = kv_charts.formula_frame(trace.model, trace.passes[-1].cache_len_after)
    assert frame["value"].iloc[-1] == trace.final_kv_cache_bytes
    for chart in (kv_charts.growth_chart(growth), kv_charts.kinds_chart(kinds), kv_charts.layers_chart(layers)):
        chart.to_dict()
    assert "sliding layers capped" in kv_charts.weights_ratio_text(trace)


def test_cost_page_lists_the_experts_of_every_pass(traces: dict[str, Trace]) -> None:
    from explorer.charts import experts as cost_charts

    trace = traces["mixtral"]
    frame = cost_charts.experts_frame(trace)
    assert frame["experts per MoE layer"].tolist()[1:] == ["2 2"] * (trace.new_tokens - 1)
    assert (frame["expert_bytes_read"] == [p.cost.expert_bytes_read for p in trace.passes]).all()
    assert "a one-token decode touches 4" in cost_charts.experts_sentence(trace)


def test_a_moe_hybrid_trace_round_trips_and_passes_the_recording_checks(traces: dict[str, Trace]) -> None:
    from explorer.recording.checks import check_trace, parse

    trace = traces["gpt-oss"]
    assert Trace.from_json(trace.to_json()) == trace
    assert check_trace(parse(Trace, trace.to_json().encode(), "trace.json")) == trace
    assert "experts_touched" in trace.passes_csv().splitlines()[0]


def test_a_batched_moe_decode_step_reads_more_experts_as_b_grows(
    zoo: dict[str, LoadedModel], cpu_figures: DeviceProfile
) -> None:
    from explorer.core.batched import run_batched

    lm = zoo["qwen3-moe"]
    rows = [[(7 * r + i) % 256 for i in range(6)] for r in range(8)]
    touched = {b: run_batched(lm, cpu_figures, rows[:b], 3).passes[-1].experts_touched for b in (1, 8)}
    assert touched[1] == (2, 2)
    assert sum(touched[8]) > sum(touched[1])  # 8 sequences route to more distinct experts than 1


def test_the_batching_lab_shows_the_experts_read_per_step(
    zoo: dict[str, LoadedModel], cpu_figures: DeviceProfile
) -> None:
    from explorer.charts.serving import batch_frame
    from explorer.labs.batch import BatchConfig, run_batch_sweep

    config = BatchConfig(batch_sizes=(1, 4), prompt_tokens=6, new_tokens=3)
    frame = batch_frame(run_batch_sweep(zoo["qwen3-moe"], cpu_figures, config))
    assert frame["distinct_experts_per_step"].tolist()[0] == 4  # k = 2 in each of 2 MoE layers
    dense = BatchConfig(batch_sizes=(2,), prompt_tokens=6, new_tokens=3, distinct_prompts=False)
    assert "distinct_experts_per_step" not in batch_frame(run_batch_sweep(zoo["llama"], cpu_figures, dense))


def test_a_sliding_layer_keeps_a_view_whose_storage_is_the_whole_concatenation(zoo: dict[str, LoadedModel]) -> None:
    """What the cache really keeps: after a prefill of 40 positions a sliding layer's K is a view of window - 1 of them,
    but the memory behind it holds all 40 until the next pass concatenates window - 1 + 1."""
    from explorer.core.engine import decode_one_token, new_cache, prefill

    lm = zoo["gemma3-text"]
    cache = new_cache(lm.model)

    def positions(layer: int) -> tuple[int, int]:
        keys = cache.layers[layer].keys
        per_position = keys.element_size() * keys.shape[1] * keys.shape[-1]
        return keys.shape[-2], keys.untyped_storage().nbytes() // per_position

    logits = prefill(lm.model, torch.arange(40)[None, :], cache)
    assert positions(0) == (WINDOW - 1, 40) and positions(2) == (40, 40)
    decode_one_token(lm.model, logits.argmax(-1, keepdim=True), cache)
    assert positions(0) == (WINDOW - 1, WINDOW)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2"])
def test_a_latent_cache_is_modelled_as_what_it_holds(
    name: str, zoo: dict[str, LoadedModel], traces: dict[str, Trace]
) -> None:
    """MLA as transformers 5 runs it: the cache keeps the compressed latent (kv_lora_rank) in its key slot and the
    shared rotary key (qk_rope_head_dim) in its value slot, one "head" each; every pass expands all the positions
    attention reads into per-head K (nope + rope) and V (v_head_dim) with kv_b_proj. The config's head_dim is only the
    rotary width, neither of these."""
    from tests.tiny_zoo import LATENT, NOPE, ROPE, V_DIM

    lm, trace = zoo[name], traces[name]
    m = lm.info
    assert lm.model.config.head_dim == ROPE
    assert (m.cache_key_width, m.cache_value_width, m.head_dim, m.sv_head_dim) == (LATENT, ROPE, NOPE + ROPE, V_DIM)
    assert m.latent_cache and m.kv_expand_params == LATENT * m.heads * (NOPE + V_DIM)
    assert m.kv_bytes_per_token == m.layers * (LATENT + ROPE) * 4  # float32
    for p in trace.passes:
        keys = m.layers * p.cache_len_after
        # the useful causal pairs: query i of the pass sees the cache and the new positions up to itself
        pairs = m.layers * sum(p.cache_len_before + i for i in range(1, p.tokens_in + 1))
        attention = 2 * m.heads * (NOPE + ROPE + V_DIM) * pairs
        expand = 2 * m.kv_expand_params * keys
        lm_head = 2 * m.lm_head_params
        experts = 2 * 2 * 2 * lm.info.experts.expert_params * p.tokens_in  # k = 2 in each of 2 MoE layers
        assert p.cost.flops == 2 * m.matmul_params * p.tokens_in + experts + lm_head + attention + expand
        assert p.cost.kv_bytes_written == keys * (LATENT + ROPE) * 4
    line = next(line for line in format_trace(trace).splitlines() if line.startswith("KV cache"))
    assert f"{human_bytes(m.kv_bytes_per_token)} per token: transformers caches MLA's compressed latent" in line
    assert f"{LATENT} latent values (kv_lora_rank) + {ROPE} rotary key values" in line
    assert f"K {NOPE + ROPE} + V {V_DIM} values per head" in line


def test_kv_b_proj_is_counted_once_on_the_positions_it_expands(
    zoo: dict[str, LoadedModel], traces: dict[str, Trace]
) -> None:
    """matmul_params leaves kv_b_proj out (it multiplies cached positions, not the new tokens); its weights are still
    read once per pass, and the operator table sums back to the pass."""
    from explorer.core.operators import KV_EXPAND, pass_operators, summed

    lm, trace = zoo["deepseek-v3"], traces["deepseek-v3"]
    kv_b = sum(mod.kv_b_proj.weight.numel() for mod in lm.model.modules() if hasattr(mod, "kv_b_proj"))
    linear = sum(mod.weight.numel() for mod in lm.model.modules() if isinstance(mod, nn.Linear))
    assert lm.info.matmul_params == linear - lm.info.lm_head_params - kv_b
    for p in trace.passes:
        ops = pass_operators(lm.info, trace.device, p)
        expand = [op for op in ops if op.kind == KV_EXPAND]
        assert len(expand) == lm.info.layers
        assert sum(op.cost.flops for op in expand) == 2 * kv_b * p.cache_len_after
        total, pass_cost = summed(ops), p.cost
        for field in ("flops", "weight_bytes_read", "kv_bytes_read", "kv_bytes_written"):
            assert getattr(total, field) == getattr(pass_cost, field), field
        assert total.t_kv_s == pytest.approx(pass_cost.t_kv_s)


def test_a_latent_cache_trace_round_trips_and_the_kv_page_says_what_it_holds(traces: dict[str, Trace]) -> None:
    from explorer.charts import kv as kv_charts
    from explorer.recording.checks import check_trace, parse
    from explorer.teach.quiz import kv_formula

    trace = traces["deepseek-v3"]
    assert Trace.from_json(trace.to_json()) == trace
    assert check_trace(parse(Trace, trace.to_json().encode(), "trace.json")) == trace
    m, cache_len = trace.model, trace.passes[-1].cache_len_after
    frame = kv_charts.formula_frame(m, cache_len)
    assert frame["value"].iloc[-1] == trace.final_kv_cache_bytes
    assert frame["value"].tolist()[:2] == [m.cache_key_width, m.cache_value_width]
    assert "compressed latent" in kv_charts.formula_text(m, cache_len)
    assert "Multi-head latent attention" in kv_charts.gqa_text(m, cache_len)
    assert f"= {m.kv_bytes_per_token:,} bytes" in kv_formula(m)


def test_the_tour_and_the_quiz_say_a_sliding_model_grows_only_in_its_full_layers(traces: dict[str, Trace]) -> None:
    """Gemma 3 (two sliding layers, one full): past the windows a decode pass adds one full layer's share, and the
    tour's cache slide and the quiz's KV evidence say so rather than quoting every layer's share per token."""
    from explorer.teach import tour
    from explorer.teach.quiz import evidence_kv_growth

    trace = traces["gemma3-text"]
    m = trace.model
    grown = {b.kv_cache_bytes - a.kv_cache_bytes for a, b in zip(trace.passes, trace.passes[1:])}
    assert grown == {m.kv_bytes_per_token_full_layers} != {m.kv_bytes_per_token}  # the prompt passed the windows
    cache = tour.cache_slide(tour.Run(trace, None, "Attention capture was off for this run.", 300))
    assert f"then {m.kv_bytes_per_token_full_layers:,} B once the 2 sliding-window layers" in cache.sentences[0]
    evidence = evidence_kv_growth(trace, None).text
    assert f"grew by exactly {m.kv_bytes_per_token_full_layers:,} bytes at every decode pass" in evidence
    full = m.kv_bytes_per_token_full_layers
    assert f"past the windows a token adds 1 full layers × that = {full:,} bytes" in evidence


def test_a_trace_from_before_the_cache_widths_loads_with_per_head_k_and_v(traces: dict[str, Trace]) -> None:
    """Older trace JSON has no kv_cache_key_width, kv_cache_value_width, v_head_dim or kv_expand_params: it loads
    with 0s, which mean per-head K and V of head_dim, and its figures are unchanged."""
    import json

    trace = traces["llama"]
    data = json.loads(trace.to_json())
    for key in ("kv_cache_key_width", "kv_cache_value_width", "v_head_dim", "kv_expand_params"):
        assert data["model"].pop(key) == 0
    old = Trace.from_json(json.dumps(data))
    assert old == trace
    m = old.model
    assert m.kv_bytes_per_token == 2 * m.layers * m.kv_heads * m.head_dim * m.bytes_per_element


def test_the_shapes_and_the_kv_term_of_a_latent_model_name_what_is_cached(traces: dict[str, Trace]) -> None:
    from explorer.charts.cost import kv_traffic_formula
    from explorer.charts.run import shapes_frame
    from tests.tiny_zoo import LATENT, NOPE, ROPE, V_DIM

    trace = traces["deepseek-v3"]
    last = trace.passes[-1]
    shapes = dict(zip(shapes_frame(trace, last.index)["tensor"], shapes_frame(trace, last.index)["shape"]))
    assert shapes["latent (new, cached)"] == f"[1, 1, 1, {LATENT}]"
    assert shapes["rotary key (new, cached)"] == f"[1, 1, 1, {ROPE}]"
    assert shapes["K (expanded, read)"] == f"[1, 4, {last.cache_len_after}, {NOPE + ROPE}]"
    assert shapes["V (expanded, read)"] == f"[1, 4, {last.cache_len_after}, {V_DIM}]"
    assert "compressed latent" in kv_traffic_formula(trace, last)
    assert "compressed latent" not in kv_traffic_formula(traces["llama"], traces["llama"].passes[-1])
