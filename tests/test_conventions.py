"""One convention per quantity: a live run and At scale, for the same config and context, agree on the KV bytes per
token (and the KV cache held), the weight bytes a decode pass reads and the attention FLOPs of a decode pass and of a
prefill, on a dense, a sliding-window and a mixture-of-experts tiny model (tests/tiny_zoo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.core.engine import Request, check_request, generate
from explorer.core.gpu_specs import GPU_SPECS
from explorer.core.trace import DeviceProfile, Trace
from explorer.models.loading import load_model
from explorer.scale.config import load_architecture
from explorer.scale.params import kv_bytes_at
from explorer.scale.whatif import Scenario, decode_step, prefill_floor, what_if
from tests.tiny_zoo import BY_NAME, save_tiny

NAMES = ("llama", "mistral-sliding", "gemma3-text", "mixtral")  # dense; sliding; sliding and full; experts
PROMPT = "sliding windows!"  # 16 byte tokens: past the tiny window of 8
HAND = DeviceProfile("hand", "cpu", "float32", 1e12, "measured", 1e11, "measured")
GPU = next(spec for spec in GPU_SPECS if spec.name == "H100 SXM")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Trace, Path]]:
    """Each tiny model saved as a user's folder, and a live run of it (4 new tokens, greedy)."""
    root = tmp_path_factory.mktemp("conventions")
    found = {}
    for name in NAMES:
        folder = save_tiny(BY_NAME[name], root / name)
        lm = load_model(str(folder), device="cpu")
        request = Request(PROMPT, max_new_tokens=4, use_chat_template=False)
        found[name] = (generate(lm, check_request(lm, request), HAND), folder)
    return found


@pytest.mark.parametrize("name", NAMES)
def test_the_live_run_and_at_scale_agree_for_the_same_config_and_context(
    name: str, runs: dict[str, tuple[Trace, Path]]
) -> None:
    trace, folder = runs[name]
    arch = load_architecture(str(folder))  # At scale reads the same config.json the live run loaded
    assert arch.windows == trace.model.windows and arch.is_moe == (trace.model.experts is not None)
    result = what_if(Scenario(arch, GPU, dtype="float32", context=trace.prompt_len))
    assert result.kv_bytes_per_new_token == trace.model.kv_bytes_per_token
    assert result.weight_bytes == trace.model.weight_bytes  # every parameter once, float32
    for record in trace.decodes:
        context = record.cache_len_before  # the positions the decode step's request holds
        step = decode_step(result.scenario, 1, context).cost
        # The KV cache held after the pass: measured from the real tensors, and what At scale says it holds.
        assert record.kv_cache_bytes == kv_bytes_at(arch, context + 1, "float32")
        assert step.weight_bytes_read == record.cost.weight_bytes_read  # a MoE: k experts a layer, one table row
        assert step.attention_flops == record.cost.attention_flops > 0
    first = prefill_floor(Scenario(arch, GPU, dtype="float32", prompt_tokens=trace.prompt_len)).cost
    assert first.attention_flops == trace.prefill.cost.attention_flops  # the useful causal pairs, both
