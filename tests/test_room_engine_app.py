"""The Room page sends a round to an engine (a loopback stand-in for vLLM here; tests/test_browser_room_engine.py
drives the real one): three sessions, each seeing their own TTFT, ITL and cached tokens, the others' text never."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from explorer.labs.room_engine import EngineRound
from explorer.ui import room_view
from explorer.ui.room_view import room_store
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.test_remote import stdlib_server
from tests.test_room_app import PROMPTS, assert_no_error, open_room, page_text, room_page, submit


class Engine(BaseHTTPRequestHandler):
    """Streams "Hello there" in two chunks to a streamed request; answers "Hello world" (a near tie at token 1) to a
    request alone, so the round differs from alone where the page must say where and why."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("stream"):
            chunks = [{"choices": [{"delta": {"content": t}, "finish_reason": None}]} for t in ("Hello", " there")]
            chunks += [{"choices": [{"delta": {}, "finish_reason": "length"}]}]
            usage = {"prompt_tokens": 30, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 16}}
            chunks += [{"choices": [], "usage": usage}]
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.answer("text/event-stream", data.encode())
            return
        top = [[{"token": "Hello", "logprob": -0.1}], [{"token": " world", "logprob": -0.70},
                                                      {"token": " there", "logprob": -0.72}]]  # fmt: skip
        content = [{"token": t[0]["token"], "logprob": t[0]["logprob"], "top_logprobs": t} for t in top]
        answer = {"choices": [{"message": {"content": "Hello world"}, "logprobs": {"content": content}}]}
        self.answer("application/json", json.dumps(answer).encode())

    def answer(self, kind: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


def test_a_round_on_the_engine_shows_each_person_their_own_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    with stdlib_server(Engine) as base_url:
        monkeypatch.setattr(room_view, "engine_target", lambda: (base_url, "stand-in"))
        presenter, code = open_room()
        people = {1: presenter, 2: room_page(new_app(), code), 3: room_page(new_app(), code)}
        for number, at in people.items():
            assert_no_error(submit(at, PROMPTS[number]))
        presenter.toggle(key="room-on-engine").set_value(True).run()
        presenter.number_input(key="room-new-tokens").set_value(2)
        presenter.button(key="room-start").click().run()
        assert_no_error(presenter)

    finished = room_store().view(code, "an observer").finished
    assert len(finished) == 1 and isinstance(finished[0].result, EngineRound)
    for number, at in people.items():
        text = page_text(room_page(at))
        assert "3 requests served by the engine (stand-in)" in text
        assert "Your cached prompt tokens 16 of 30" in text and "Same tokens alone NO" in text
        assert "Character 6 (the alone answer's token 1): the round wrote 'there', alone 'world'." in text
        assert "by 0.0200 in log-probability: a near tie" in text
        assert PROMPTS[number] in text and not [p for k, p in PROMPTS.items() if k != number and p in text]
