"""Step mode: one real pass per step gives a normal run's tokens, grows the cache one position at a time, frees it."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer import ui
from explorer.engine import Request
from explorer.loading import LoadedModel
from explorer.measure import measure
from explorer.stepping import SteppedRequest
from explorer.trace import DeviceProfile
from explorer.ui import stepper
from tests.test_app import navigation_like_a_server, new_app  # noqa: F401 - the fixture patches AppTest's pages


def test_a_stepped_request_is_a_normal_run(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> None:
    request = Request("hello", max_new_tokens=5, use_chat_template=False)
    stepped = SteppedRequest.start(tiny_lm, request, cpu_figures)
    per_token = tiny_lm.info.kv_bytes_per_token
    first = stepped.step()
    assert first.is_prefill and first.kv_cache_bytes == first.tokens_in * per_token
    while not stepped.done:
        before = stepped.passes[-1].kv_cache_bytes
        assert stepped.step().kv_cache_bytes == before + per_token  # exactly one position per decode step
    trace = stepped.to_trace()
    assert trace.generated_token_ids == measure(tiny_lm, request).generated_token_ids
    maps = stepped.attention()
    assert maps.same_tokens_as(trace) and len(maps.decode[0]) == 4
    stepped.free()
    assert stepped.freed and stepped.replay.cache is None


def test_the_step_page_steps_one_pass_per_click_and_resets(tiny_llama_dir: Path, tiny_lm: LoadedModel) -> None:
    at: AppTest = new_app()
    at.session_state[ui.LAST_INPUTS] = ui.RunInputs(model=str(tiny_llama_dir), device="cpu")
    at.switch_page("pages/step.py").run()
    at.text_input[0].input("hi there")
    at.number_input[0].set_value(6)
    at.toggle[0].set_value(False)  # no chat template, as the CLI's --no-chat-template
    at.button[0].click().run()  # Prefill
    assert not at.exception and not at.error, [e.value for e in at.error]
    sizes = [at.session_state[stepper.STEPPED].passes[-1].kv_cache_bytes]
    for _ in range(3):
        at.button(key="step-next").click().run()
        assert not at.exception
        sizes.append(at.session_state[stepper.STEPPED].passes[-1].kv_cache_bytes)
    stepped = at.session_state[stepper.STEPPED]
    assert len(stepped.passes) == 4
    assert [b - a for a, b in zip(sizes, sizes[1:])] == [tiny_lm.info.kv_bytes_per_token] * 3
    expected = measure(tiny_lm, Request("hi there", max_new_tokens=6, use_chat_template=False)).generated_token_ids
    assert tuple(p.token_id for p in stepped.passes) == expected[:4]
    assert len(at.get("vega_lite_chart")) == 3
    at.button(key="step-end").click().run()  # finishes: the stepped request becomes the current run
    assert at.session_state[ui.RUN].trace.generated_token_ids == expected
    assert at.session_state[ui.RUN].attention is not None
    at.button(key="step-reset").click().run()
    assert stepper.STEPPED not in at.session_state  # the session holds no cache tensors any more
    assert stepped.freed


@pytest.mark.parametrize("prompt", [""])
def test_an_empty_prompt_is_one_line_and_nothing_steps(tiny_llama_dir: Path, prompt: str) -> None:
    at: AppTest = new_app()
    at.session_state[ui.LAST_INPUTS] = ui.RunInputs(model=str(tiny_llama_dir), device="cpu")
    at.switch_page("pages/step.py").run()
    at.text_input[0].input(prompt)
    at.button[0].click().run()
    assert not at.exception and any("empty" in e.value for e in at.error)
    assert stepper.STEPPED not in at.session_state
