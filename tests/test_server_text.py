"""What a server says, made safe (`explorer.remote.server_text`): control characters out, its own error message
found in each JSON shape servers use, one bounded line."""

from __future__ import annotations

import json

import pytest

from explorer.remote.server_text import MESSAGE_CHARS, error_message, one_line, output_text, server_error


def test_output_keeps_line_breaks_and_tabs_and_drops_every_other_control() -> None:
    assert output_text("a\tb\nc\x1b]0;title\x07d\u202ee") == "a\tb\nc]0;titlede"


def test_one_line_replaces_controls_folds_spaces_and_cuts_at_the_limit() -> None:
    assert one_line("bad\x1b[2J\nthing  here") == "bad [2J thing here"
    long = one_line("x" * (MESSAGE_CHARS + 5))
    assert long == "x" * MESSAGE_CHARS + "…"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"error": {"message": "model not found"}}, "model not found"),  # OpenAI
        ({"error": "overloaded"}, "overloaded"),  # TGI
        ({"object": "error", "message": "too long"}, "too long"),  # vLLM
        ({"detail": [{"msg": "field required"}, {"msg": "bad type"}]}, "field required; bad type"),  # FastAPI
        ({"message": "go away"}, "go away"),
    ],
)
def test_each_servers_error_shape_gives_its_message(body: dict[str, object], said: str) -> None:
    assert server_error(body) == said
    assert error_message(json.dumps(body).encode()) == said


def test_a_chunk_is_no_error_and_a_body_that_is_not_json_is_its_own_text() -> None:
    assert server_error({"choices": [], "message": "not an error"}) is None
    assert error_message(b"Bad Gateway\r\n") == "Bad Gateway"
    assert error_message(b"") == "(no message)"
