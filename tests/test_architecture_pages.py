"""The KV cache page on a hybrid sliding-window model and the Cost page on a mixture of experts, through AppTest: each
shows what its architecture adds (sliding and full layers apart; the experts each pass's routers chose)."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.core.engine import Request, check_request, generate
from explorer.core.trace import DeviceProfile
from explorer.models.loading import load_model
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture
from tests.tiny_zoo import BY_NAME, save_tiny


def result_of(name: str, folder: Path, device: DeviceProfile) -> ui_state.RunResult:
    lm = load_model(str(save_tiny(BY_NAME[name], folder)), device="cpu")
    request = Request("a prompt past the window", max_new_tokens=4, use_chat_template=False)
    trace = generate(lm, check_request(lm, request), device)
    return ui_state.RunResult(trace=trace, attention=None, attention_note="not requested", label=name)


@pytest.mark.parametrize(
    ("name", "page", "words"),
    [
        ("gemma3-text", "pages/kv_cache.py", "Full and sliding layers apart"),
        ("mixtral", "pages/cost.py", "Experts routed to, pass by pass"),
    ],
)
def test_the_page_shows_what_the_architecture_adds(
    name: str, page: str, words: str, tmp_path: Path, cpu_figures: DeviceProfile
) -> None:
    at = open_page(page, result_of(name, tmp_path / name, cpu_figures))
    assert not at.error, [e.value for e in at.error]
    titles = [e.proto.label for e in at.main.get("expander")]
    assert any(words in t for t in titles), titles
