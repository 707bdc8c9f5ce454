"""Decode on CUDA graphs, and the first run timed right, on real hardware: graph tokens equal eager's and generate()'s,
a fresh process's first repeat is no slower than the later ones, and random-weight models of real shapes (built on
the GPU from a shipped config: timings depend on shapes, not on weight values) decode near their weight-read floor."""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from explorer.checks.bench import BenchConfig, run_bench
from explorer.checks.greedy_reference import generate_tokens
from explorer.core.device import FiguresStore
from explorer.core.engine import Request, check_request
from explorer.core.floor_share import pass_share
from explorer.core.graph_decode import CacheShape, GraphPool
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure, prepare_device
from explorer.core.roofline import kv_cache_bytes
from explorer.core.trace import PassRecord, Trace
from explorer.core.warm_shapes import WarmShapes
from explorer.models.loading import describe, eos_ids, load_model
from tests.gpu import RecordProperty, requires_cuda

pytestmark = requires_cuda

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "explorer" / "scale" / "configs"
FIRST_REPEAT_MOST = 1.15  # the first repeat's time at most this many times the later repeats' median
GRAPH_8B_MOST_FLOORS = 1.5  # Llama-3.1-8B shape, bf16: a graph decode pass at most this many weight-read floors
SMALL_SHAPE_MOST_S = 2e-3  # SmolLM2-135M shape, bf16: a graph decode pass at most this long
PREFILL_8B_MOST_ROOFLINES = 1.3  # an 8B prefill of 2,048 tokens at most this many rooflines at the measured peak
NO_SLOWER_SLACK = 1.05  # graph decode against transformers' compiled static path: equal within 5 % of noise
PROMPT_TOKENS, NEW_TOKENS = 512, 64  # the shapes


def free_gpu_memory() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def shape_model(name: str, tokenizer: object) -> LoadedModel:
    """A random-weight model of a shipped config's shape, built on the GPU in bfloat16, with the embedded tokenizer
    (ids past its vocabulary decode to ''). Its tokens are noise; its timings, bytes and FLOPs are real."""
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8"))
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    config.eos_token_id = None  # a random model would otherwise stop on a random token
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    device = torch.device("cuda")
    info = describe(model, f"shape:{name}", f"{name} shape (random weights)", device)
    return LoadedModel(model, tokenizer, info, device, eos_ids(model, tokenizer), 0.0)


def fixed_ids(count: int) -> list[int]:
    return [(7 * i + 11) % 49_152 for i in range(count)]  # within every vocabulary here


def shape_run(lm: LoadedModel, prompt_tokens: int, new_tokens: int, path: str = "graph") -> Trace:
    request = Request("", max_new_tokens=new_tokens, stop_at_eos=False, decode_path=path)  # type: ignore[arg-type]
    return measure(lm, check_request(lm, request, fixed_ids(prompt_tokens)))


def median_decode_s(passes: tuple[object, ...]) -> float:
    return statistics.median(p.wall_s for p in passes[1:])  # type: ignore[attr-defined]


def median_pass(trace: Trace) -> PassRecord:
    """The decode pass with the median measured time (the one the Cost page shows)."""
    decodes = sorted(trace.decodes, key=lambda p: p.wall_s)
    return decodes[len(decodes) // 2]


@pytest.fixture(scope="module")
def llama_8b(cuda_lm: LoadedModel) -> Iterator[LoadedModel]:
    lm = shape_model("llama-3.1-8b", cuda_lm.tokenizer)
    yield lm
    del lm
    free_gpu_memory()


@pytest.fixture(scope="module")
def smollm_shape(cuda_lm: LoadedModel) -> Iterator[LoadedModel]:
    lm = shape_model("smollm2-135m", cuda_lm.tokenizer)
    yield lm
    del lm
    free_gpu_memory()


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def embedded_in(request: pytest.FixtureRequest, cuda_lm: LoadedModel, gpu_model_name: str) -> Iterator[LoadedModel]:
    if request.param == "float32":
        yield cuda_lm
        return
    lm = load_model(gpu_model_name, device="cuda", dtype=request.param)
    yield lm
    del lm
    free_gpu_memory()


def test_graph_decode_tokens_equal_eager_and_generate(
    embedded_in: LoadedModel, monkeypatch: pytest.MonkeyPatch, record_property: RecordProperty
) -> None:
    """The captured forward replays eager's own kernels: its tokens equal generate()'s in every dtype. The compiled
    step (the default where Triton is) fuses norms and casts: in float32 its tokens equal too, in bfloat16 a near tie
    can go the other way, as in transformers' own compiled static path (on the H200, a random-weight shape's 12th
    token did), so there its agreement is recorded."""
    lm = embedded_in
    events: list[bool] = []
    real_event = torch.cuda.Event
    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: events.append(True) or real_event(*a, **k))
    request = Request("What is the capital of France?", max_new_tokens=12, stop_at_eos=False)
    graph = measure(lm, request)  # the default on CUDA
    assert graph.decode_path == "graph" and len(events) >= 2 * graph.new_tokens  # every pass timed by events
    eager = measure(lm, replace(request, decode_path="eager"))
    reference = generate_tokens(lm, graph.prompt_token_ids, 12)
    assert eager.generated_token_ids == reference
    uncompiled = replace(lm, warmed=WarmShapes(), graphs=GraphPool(compile_steps=False))
    assert measure(uncompiled, request).generated_token_ids == reference
    unfused = replace(lm, warmed=WarmShapes(), graphs=GraphPool(compile_steps=False, fuse_steps=False))
    assert measure(unfused, request).generated_token_ids == reference  # the projections as transformers runs them
    record_property("graph step's projections fused", "yes" if not lm.graphs.why_unfused else lm.graphs.why_unfused)
    same = next((i for i, (a, b) in enumerate(zip(graph.generated_token_ids, reference)) if a != b), len(reference))
    record_property("compiled step: tokens equal generate()'s for the first", f"{same} of {len(reference)}")
    if lm.info.dtype == "float32" or not lm.graphs.compile_steps:
        assert graph.generated_token_ids == reference
    for p in graph.passes:  # held: the positions written; reserved: the whole capacity
        assert p.kv_cache_bytes == kv_cache_bytes(graph.model, p.cache_len_after)
    assert graph.allocated_kv_cache_bytes == kv_cache_bytes(graph.model, graph.kv_cache_capacity or 0)


def test_a_warm_up_captures_the_graph_and_the_run_reuses_it(cuda_lm: LoadedModel) -> None:
    lm = replace(cuda_lm, warmed=WarmShapes(), graphs=GraphPool())  # the same weights, nothing run or captured yet
    checked = check_request(lm, Request("Name three colours.", max_new_tokens=20, decode_path="graph"))
    said: list[str] = []
    prepare_device(lm, FiguresStore(), checked, progress=lambda _f, text: said.append(text))
    assert lm.graphs.captures == 1 and any("Capturing the decode step as a CUDA graph" in text for text in said)
    assert lm.graphs.idle_shapes() == [CacheShape(1, checked.cache_capacity or 0)]
    trace = measure(lm, checked)
    assert lm.graphs.captures == 1 and trace.decode_path == "graph"  # the warm-up's graph, leased again


@pytest.mark.parametrize("path", ["eager", "graph"])
def test_a_fresh_processs_first_repeat_is_no_slower_than_the_later_ones(
    path: str, tmp_path: Path, gpu_model_name: str, record_property: RecordProperty
) -> None:
    """The issue's case: a new process, the request run 4 times; repeat 0 was 3x slow after an 8-token warm-up."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(" ".join(["The history of the printing press in Europe begins in Mainz."] * 45), "utf-8")
    out = tmp_path / "run.json"
    argv = ["run", "--model", gpu_model_name, "--device", "cuda", "--dtype", "bfloat16", "--prompt-file", str(prompt)]
    argv += ["--no-chat-template"]
    argv += ["--max-new-tokens", str(NEW_TOKENS), "--repeats", "4", "--decode-path", path, "--json", str(out)]
    done = subprocess.run([sys.executable, "-m", "explorer", *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    trace = Trace.from_json(out.read_text(encoding="utf-8"))
    first, later = trace.repeats[0], trace.repeats[1:]
    decode_later = statistics.median(median_decode_s(passes) for passes in later)
    prefill_later = statistics.median(passes[0].wall_s for passes in later)
    record_property("repeat 0's decode median / later repeats' (ratio)", f"{median_decode_s(first) / decode_later:.3f}")
    record_property("repeat 0's prefill / later repeats' median (ratio)", f"{first[0].wall_s / prefill_later:.3f}")
    record_property("decode median, later repeats (ms)", f"{decode_later * 1e3:.3f}")
    record_property("prompt tokens", str(trace.prompt_len))
    record_property("prefill per repeat (ms)", ", ".join(f"{passes[0].wall_s * 1e3:.2f}" for passes in trace.repeats))
    assert median_decode_s(first) <= FIRST_REPEAT_MOST * decode_later, (median_decode_s(first), decode_later)
    assert first[0].wall_s <= FIRST_REPEAT_MOST * prefill_later, (first[0].wall_s, prefill_later)


def test_8b_graph_decode_is_within_1_5x_its_weight_read_floor(
    llama_8b: LoadedModel, record_property: RecordProperty
) -> None:
    trace = shape_run(llama_8b, PROMPT_TOKENS, NEW_TOKENS)
    floor_s = trace.decodes[0].cost.t_weight_read_s  # weight bytes / measured read bandwidth
    decode_s = median_decode_s(trace.passes)
    record_property("graph decode median (ms)", f"{decode_s * 1e3:.3f}")
    record_property("weight-read floor (ms)", f"{floor_s * 1e3:.3f}")
    record_property("decode / floor (ratio)", f"{decode_s / floor_s:.3f}")
    record_property("graph step compiled", "yes" if not llama_8b.graphs.why_uncompiled else "no")
    record_property("graph step's projections fused", "yes" if not llama_8b.graphs.why_unfused else "no")
    record_property("bandwidth share (median decode pass)", pass_share(median_pass(trace), trace.device).sentence())
    assert decode_s <= GRAPH_8B_MOST_FLOORS * floor_s, f"{decode_s * 1e3:.2f} ms against {floor_s * 1e3:.2f} ms"


def test_8b_prefill_of_2048_tokens_is_within_1_3x_its_roofline_at_the_measured_peak(
    llama_8b: LoadedModel, record_property: RecordProperty
) -> None:
    trace = shape_run(llama_8b, 2048, 2)
    prefill = trace.prefill
    bound = prefill.cost.roofline_time_s
    record_property("prefill (ms)", f"{prefill.wall_s * 1e3:.2f}")
    record_property("roofline (ms)", f"{bound * 1e3:.2f}")
    record_property("prefill / roofline (ratio)", f"{prefill.wall_s / bound:.3f}")
    record_property("matmul share", pass_share(prefill, trace.device).sentence())
    assert prefill.wall_s <= PREFILL_8B_MOST_ROOFLINES * bound, f"{prefill.wall_s * 1e3:.1f} ms, {bound * 1e3:.1f} ms"


def test_135m_shape_graph_decode_is_under_2_ms_a_pass(
    smollm_shape: LoadedModel, record_property: RecordProperty
) -> None:
    trace = shape_run(smollm_shape, PROMPT_TOKENS, NEW_TOKENS)
    record_property("graph decode median (ms)", f"{median_decode_s(trace.passes) * 1e3:.3f}")
    record_property("graph step compiled", "yes" if not smollm_shape.graphs.why_uncompiled else "no")
    record_property("bandwidth share (median decode pass)", pass_share(median_pass(trace), trace.device).sentence())
    unfused = replace(smollm_shape, warmed=WarmShapes(), graphs=GraphPool(fuse_steps=False))
    record_property(
        "graph decode median, unfused projections (ms)",
        f"{median_decode_s(shape_run(unfused, PROMPT_TOKENS, NEW_TOKENS).passes) * 1e3:.3f}",
    )
    uncompiled = replace(smollm_shape, warmed=WarmShapes(), graphs=GraphPool(compile_steps=False))
    plain = shape_run(uncompiled, PROMPT_TOKENS, NEW_TOKENS)
    record_property("graph decode median, uncompiled capture (ms)", f"{median_decode_s(plain.passes) * 1e3:.3f}")
    eager = shape_run(smollm_shape, PROMPT_TOKENS, NEW_TOKENS, path="eager")
    record_property("eager decode median, same request (ms)", f"{median_decode_s(eager.passes) * 1e3:.3f}")
    assert median_decode_s(trace.passes) <= SMALL_SHAPE_MOST_S, f"{median_decode_s(trace.passes) * 1e3:.2f} ms"


def test_graph_decode_is_no_slower_than_transformers_compiled_static_path(
    smollm_shape: LoadedModel, record_property: RecordProperty
) -> None:
    result = run_bench(smollm_shape, BenchConfig(PROMPT_TOKENS, NEW_TOKENS, repeats=3, decode_path="graph"))
    assert result.hf_static_compiled  # transformers compiled its static path on CUDA, as the column says
    s = result.summary()
    for key in ("explorer_itl_s", "hf_itl_s", "hf_static_itl_s"):
        record_property(f"{key.removesuffix('_s')} (ms)", f"{s[key] * 1e3:.3f}")
    assert s["explorer_itl_s"] <= NO_SLOWER_SLACK * s["hf_static_itl_s"], s
