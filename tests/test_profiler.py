"""The profiled pass: groups plus remainder make its wall time, ops land in the group of the module they ran in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent

from explorer.cli.profile import check_pass_reachable, format_profile
from explorer.core import profiler
from explorer.core.engine import Request, check_request, generate
from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.core.profiler import (
    ATTENTION,
    CPU_REMAINDER,
    EMBEDDING_LM_HEAD,
    KV_UPDATE,
    LINEAR,
    NORMS_ACTIVATIONS,
    OP_GROUPS,
    OTHER_OPS,
    PassProfile,
    profile_pass,
)
from explorer.core.trace import DeviceProfile, Trace
from tests.cli_support import run_cli

ROOT = Path(__file__).resolve().parents[1]


def greedy_trace(lm: LoadedModel, device: DeviceProfile, new_tokens: int) -> Trace:
    request = Request("The cat sat on the", max_new_tokens=new_tokens, use_chat_template=False)
    return generate(lm, check_request(lm, request), device)


@pytest.fixture(scope="module")
def llama_trace(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> Trace:
    return greedy_trace(tiny_lm, cpu_figures, 5)


@pytest.fixture(scope="module")
def gpt2_trace(tiny_gpt2: LoadedModel, cpu_figures: DeviceProfile) -> Trace:
    return greedy_trace(tiny_gpt2, cpu_figures, 5)


def op_count(profile: PassProfile, group: str, op: str) -> int:
    return sum(o.count for o in profile.group(group).ops if o.name == op)


# The op self times come from the profiler's clock, the wall from ours: on a busy machine the two can disagree by a
# little, so "the groups alone fit in the wall" holds within the 5 %, not to the nanosecond. Counting an op
# twice, or a parent's inclusive time beside its children's, would still break it.
CLOCKS_TOLERANCE = 0.05


def assert_adds_up(profile: PassProfile) -> None:
    """The invariants every profile keeps, whatever the machine's load."""
    assert [g.name for g in profile.groups] == list(OP_GROUPS)
    assert profile.remainder_s == profile.wall_s_profiled - profile.op_total_s  # the remainder is what no op took
    assert 0 < profile.op_total_s <= profile.wall_s_profiled * (1 + CLOCKS_TOLERANCE)
    for group in profile.groups:
        assert group.self_s == pytest.approx(sum(o.self_s for o in group.ops), abs=1e-12)
        assert all(o.count >= 1 and o.self_s >= 0 for o in group.ops)
        assert [o.self_s for o in group.ops] == sorted((o.self_s for o in group.ops), reverse=True)
    assert profile.group(LINEAR).self_s > 0
    assert profile.wall_s_unprofiled > 0 and profile.wall_s_run > 0
    assert len(profile.wall_s_unprofiled_samples) == profiler.UNPROFILED_REPEATS
    assert profile.wall_s_unprofiled == sorted(profile.wall_s_unprofiled_samples)[1]  # the median of three


def test_a_decode_pass_on_the_tiny_llama(tiny_lm: LoadedModel, llama_trace: Trace) -> None:
    profile = profile_pass(tiny_lm, llama_trace, 3)
    assert_adds_up(profile)
    assert (profile.pass_index, profile.phase, profile.tokens_in) == (3, "decode", 1)
    assert profile.cache_len_before == llama_trace.prompt_len + 2
    assert profile.device_kind == "cpu" and profile.remainder_name == CPU_REMAINDER
    assert profile.group(KV_UPDATE).self_s > 0
    layers = tiny_lm.info.layers
    # The cache concatenates K and V once per layer; rotary's own concatenations stay with attention.
    assert op_count(profile, KV_UPDATE, "aten::cat") == 2 * layers
    assert op_count(profile, ATTENTION, "aten::cat") >= 2 * layers
    assert op_count(profile, LINEAR, "aten::linear") == 7 * layers  # q, k, v, o, gate, up, down
    assert op_count(profile, EMBEDDING_LM_HEAD, "aten::linear") == 1  # the LM head, not a linear layer
    assert op_count(profile, EMBEDDING_LM_HEAD, "aten::embedding") == 1
    assert op_count(profile, NORMS_ACTIVATIONS, "aten::silu") == layers
    # The replayed pass computed from the same cache state as the run: a greedy run's token comes out.
    assert profile.replay_argmax_token_id == llama_trace.passes[3].token_id


def test_the_prefill_pass(tiny_lm: LoadedModel, llama_trace: Trace) -> None:
    profile = profile_pass(tiny_lm, llama_trace, 0)
    assert_adds_up(profile)
    assert (profile.phase, profile.tokens_in, profile.cache_len_before) == ("prefill", llama_trace.prompt_len, 0)
    assert op_count(profile, KV_UPDATE, "aten::cat") == 2 * tiny_lm.info.layers
    assert profile.replay_argmax_token_id == llama_trace.prefill.token_id


def test_a_decode_pass_on_the_tiny_gpt2(tiny_gpt2: LoadedModel, gpt2_trace: Trace) -> None:
    profile = profile_pass(tiny_gpt2, gpt2_trace, 2)
    assert_adds_up(profile)
    assert profile.group(KV_UPDATE).self_s > 0
    layers = tiny_gpt2.info.layers
    assert op_count(profile, LINEAR, "aten::addmm") == 4 * layers  # Conv1D: c_attn, c_proj, c_fc, mlp c_proj
    assert op_count(profile, KV_UPDATE, "aten::cat") == 2 * layers
    assert op_count(profile, EMBEDDING_LM_HEAD, "aten::embedding") == 2  # tokens and learned positions
    assert op_count(profile, NORMS_ACTIVATIONS, "aten::native_layer_norm") == 2 * layers + 1
    assert profile.replay_argmax_token_id == gpt2_trace.passes[2].token_id


def test_one_decode_pass_on_the_real_model(real_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    trace = greedy_trace(real_lm, cpu_figures, 2)
    profile = profile_pass(real_lm, trace, 1)
    assert_adds_up(profile)
    assert profile.group(KV_UPDATE).self_s > 0
    assert op_count(profile, KV_UPDATE, "aten::cat") == 2 * 30
    assert op_count(profile, LINEAR, "aten::linear") == 7 * 30
    assert profile.replay_argmax_token_id == trace.passes[1].token_id


def test_profiling_leaves_the_model_and_cache_as_they_were(tiny_lm: LoadedModel, llama_trace: Trace) -> None:
    model = tiny_lm.model
    cache = profiler.new_cache(model)
    with pytest.raises(RuntimeError, match="boom"), profiler.regions(model, cache):
        assert "update" in vars(cache)

        def fail(_module: nn.Module, _args: object) -> None:
            raise RuntimeError("boom")

        handle = model.model.layers[0].mlp.register_forward_pre_hook(fail)
        try:
            model(input_ids=torch.tensor([[1, 2]]), past_key_values=cache, use_cache=True)
        finally:
            handle.remove()
    assert "update" not in vars(cache)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert profile_pass(tiny_lm, llama_trace, 1).replay_argmax_token_id == llama_trace.passes[1].token_id


def test_module_groups(tiny_lm: LoadedModel, tiny_gpt2: LoadedModel) -> None:
    llama = tiny_lm.model
    head = llama.get_output_embeddings()
    layer = llama.model.layers[0]
    assert profiler.module_group(layer.self_attn.q_proj, head) == LINEAR
    assert profiler.module_group(head, head) == EMBEDDING_LM_HEAD
    assert profiler.module_group(llama.model.embed_tokens, head) == EMBEDDING_LM_HEAD
    assert profiler.module_group(layer.input_layernorm, head) == NORMS_ACTIVATIONS
    assert profiler.module_group(layer.mlp.act_fn, head) == NORMS_ACTIVATIONS
    assert profiler.module_group(layer.mlp, head) == NORMS_ACTIVATIONS
    assert profiler.module_group(layer.self_attn, head) == ATTENTION
    assert profiler.module_group(llama.model.rotary_emb, head) == ATTENTION
    assert profiler.module_group(layer, head) is None and profiler.module_group(llama, head) is None
    assert profiler.module_group(nn.Softmax(dim=-1), head) is None
    gpt2 = tiny_gpt2.model
    block = gpt2.transformer.h[0]
    assert profiler.module_group(block.attn.c_attn, gpt2.get_output_embeddings()) == LINEAR  # Conv1D
    assert profiler.module_group(gpt2.transformer.wpe, gpt2.get_output_embeddings()) == EMBEDDING_LM_HEAD


# --- attribution on a hand-built event tree: exact microseconds, and the GPU path without a GPU ---------------------
def event(
    name: str, start_us: float, end_us: float, parent: FunctionEvent | None, annotation: bool = False
) -> FunctionEvent:
    made = FunctionEvent(
        id=0,
        name=name,
        thread=0,
        start_us=start_us,
        end_us=end_us,
        use_device="cuda",
        is_user_annotation=annotation,
    )
    if parent is not None:
        made.set_cpu_parent(parent)
        parent.append_cpu_child(made)
    return made


def hand_tree() -> list[FunctionEvent]:
    """A pass of 100 us: a linear region holding linear -> mm, the cache's cat, an add outside every module, and an
    op before the pass that must not count."""
    before = event("aten::zeros", 0, 5, None)
    top = event(profiler.PASS_REGION, 10, 110, None, annotation=True)
    linear_region = event(profiler.REGION_PREFIX + LINEAR, 12, 52, top, annotation=True)
    linear = event("aten::linear", 14, 50, linear_region)
    mm = event("aten::mm", 16, 46, linear)  # self 30 us; linear's self is 36 - 30 = 6 us
    mm.append_kernel("gemm", 0, 7.0)
    kv_region = event(profiler.REGION_PREFIX + KV_UPDATE, 60, 80, top, annotation=True)
    cat = event("aten::cat", 62, 72, kv_region)
    cat.append_kernel("cat_kernel", 0, 2.0)
    add = event("aten::add", 90, 94, top)
    add.append_kernel("add_kernel", 0, 1.0)
    return [before, top, linear_region, linear, mm, kv_region, cat, add]


def test_cpu_self_times_by_region_by_hand() -> None:
    groups = {g.name: g for g in profiler.group_events(hand_tree(), on_gpu=False)}
    assert groups[LINEAR].self_s == pytest.approx(36e-6, abs=1e-12)
    assert [(o.name, o.count, o.self_s) for o in groups[LINEAR].ops] == [
        ("aten::mm", 1, pytest.approx(30e-6)),
        ("aten::linear", 1, pytest.approx(6e-6)),
    ]
    assert groups[KV_UPDATE].self_s == pytest.approx(10e-6) and groups[OTHER_OPS].self_s == pytest.approx(4e-6)
    assert groups[ATTENTION].self_s == 0 and groups[ATTENTION].ops == ()
    # The regions' own 50 us are Python between ops: no group holds them, and aten::zeros ran before the pass.
    assert sum(g.self_s for g in groups.values()) == pytest.approx(50e-6)


def test_gpu_kernel_times_by_region_by_hand() -> None:
    groups = {g.name: g for g in profiler.group_events(hand_tree(), on_gpu=True)}
    assert groups[LINEAR].self_s == pytest.approx(7e-6)
    assert {o.name: o.self_s for o in groups[LINEAR].ops} == {"aten::mm": pytest.approx(7e-6), "aten::linear": 0}
    assert groups[KV_UPDATE].self_s == pytest.approx(2e-6) and groups[OTHER_OPS].self_s == pytest.approx(1e-6)


# --- the result, the checks, the command ---------------------------------------------------------------------------
def test_bad_passes_are_refused(tiny_lm: LoadedModel, llama_trace: Trace, tiny_gpt2: LoadedModel) -> None:
    with pytest.raises(BadInput, match="Pass 5 is not in this run: it made 5 passes"):
        profile_pass(tiny_lm, llama_trace, 5)
    with pytest.raises(BadInput, match="Pass -1"):
        profile_pass(tiny_lm, llama_trace, -1)
    with pytest.raises(BadInput, match="another model"):
        profile_pass(tiny_gpt2, llama_trace, 1)
    with pytest.raises(BadInput, match="at least 4 new tokens"):
        check_pass_reachable(3, 3)
    with pytest.raises(BadInput, match="--pass must be 0"):
        check_pass_reachable(-1, 3)
    check_pass_reachable(2, 3)


def test_json_and_text_hold_every_op_and_both_walls(tiny_lm: LoadedModel, llama_trace: Trace) -> None:
    profile = profile_pass(tiny_lm, llama_trace, 2)
    data = json.loads(profile.to_json())
    assert [g["name"] for g in data["groups"]] == list(OP_GROUPS)
    kv = next(g for g in data["groups"] if g["name"] == KV_UPDATE)
    cat = next(o for o in kv["ops"] if o["name"] == "aten::cat")
    assert cat["count"] == 2 * tiny_lm.info.layers and cat["self_s"] > 0
    assert data["wall_s_unprofiled"] == profile.wall_s_unprofiled
    assert data["profiler_cost_s"] == profile.wall_s_profiled - profile.wall_s_unprofiled
    assert data["remainder_name"] == CPU_REMAINDER and set(data["group_contents"]) == set(OP_GROUPS)
    text = format_profile(profile)
    assert all(name in text for name in (*OP_GROUPS, CPU_REMAINDER, "without the profiler"))


def test_the_profile_command_writes_json(
    tiny_llama_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = run_cli(
        "profile", "--model", str(tiny_llama_dir), "--prompt", "The cat sat on the", "--pass", "3", "--json",
        str(tmp_path / "p.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    stderr = out.stderr + capfd.readouterr().err  # kineto writes to the file descriptor itself, past sys.stderr
    assert "profiler_start" not in stderr and "USDT" not in stderr  # kineto's banners stay quiet
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["pass_index"] == 3 and data["phase"] == "decode"
    assert next(g for g in data["groups"] if g["name"] == KV_UPDATE)["self_s"] > 0
    assert "profiled wall" in out.stdout and "timed without the profiler" in out.stdout


def test_the_profile_command_refuses_an_unreachable_pass_before_loading(tmp_path: Path) -> None:
    out = run_cli(
        "profile", "--model", str(tmp_path / "missing"), "--prompt", "x", "--pass", "4", "--max-new-tokens", "2"
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: --pass 4 needs at least 5 new tokens (pass 0 is the prefill): raise --max-new-tokens or pick a "
        "lower pass."
    )


# A profile started in another thread than the one that imported torch, as the Cost page's Profile runs in a
# Streamlit script thread; `before` runs first in the main thread.
PROFILE_IN_A_THREAD = """
import threading
import torch
{before}
from torch.profiler import ProfilerActivity, profile

def profile_once():
    with profile(activities=[ProfilerActivity.CPU]):
        torch.ones(8) @ torch.ones(8)

worker = threading.Thread(target=profile_once)
worker.start()
worker.join()
print("profiled")
"""
KINETO_ERROR = "External init callback must run in same thread as registerClient"


def _stderr_of(before: str, script: str = PROFILE_IN_A_THREAD) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script.format(before=before)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "EXPLORER_WARM": "0"},
    )
    assert done.returncode == 0 and "profiled" in done.stdout, done.stderr[-2000:]
    return done.stderr


def test_priming_the_profiler_where_torch_was_imported_keeps_a_profile_in_a_script_thread_free_of_kineto_errors() -> (
    None
):
    """Issue 31's "ERROR: External init callback must run in same thread…" after Profile: Kineto sets up its client
    only in the thread that loaded torch. Without the priming the error is printed (the cause, shown); primed in that
    thread, as the server does at start, it is gone."""
    assert KINETO_ERROR in _stderr_of("")
    assert KINETO_ERROR not in _stderr_of("from explorer.core.profiler import prime_profiler\nprime_profiler()")


OWNER_THEN_PROFILE_IN_A_THREAD = """
import threading
{before}
from explorer.owner.state import Owner

owner = Owner()
owner.start_torch()  # torch imported, and the profiler primed, in the owner's start-up thread
owner.torch_ready.wait()
import torch
from torch.profiler import ProfilerActivity, profile

def profile_once():
    with profile(activities=[ProfilerActivity.CPU]):
        torch.ones(8) @ torch.ones(8)

worker = threading.Thread(target=profile_once)
worker.start()
worker.join()
print("profiled")
"""


def test_the_device_owner_imports_torch_and_primes_the_profiler_in_one_thread() -> None:
    """The device owner's start (`Owner.start_torch`, a thread of its own, after its port opens) imports torch and
    primes the profiler there: a Profile job in another thread then prints no Kineto error. The web tier never
    profiles, so app.py primes nothing."""
    assert KINETO_ERROR not in _stderr_of("", OWNER_THEN_PROFILE_IN_A_THREAD)
    assert "prime_profiler" not in (ROOT / "app.py").read_text()
