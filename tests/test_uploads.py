"""An uploaded sweep file is data: the checks of `explorer.remote.upload` by hand (a good file round-trips, each bad
one is one line naming its first bad field), then the Endpoint page on a hosted server given each bad upload (one
line, no traceback, under 2 s of CPU), anyone's text shown as text, one read per upload and the rate limit."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from streamlit.testing.v1 import AppTest

from explorer.charts import remote as charts
from explorer.core.errors import BadInput
from explorer.hosting import settings
from explorer.remote import records, upload
from explorer.remote.endpoint import make_endpoint
from explorer.ui import endpoint_view
from explorer.ui import state as ui_state
from explorer.ui.widgets import PRESENTER_KEY
from tests.apptest_support import navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

CPU_LIMIT_S = 2.0  # what handling one bad upload may cost the server (the 20M-token file once cost 28.5 s)
MARKDOWN = "![x](http://example.invalid/pixel.png) **bold** <img src=x onerror=alert(1)>"
UNESCAPED = re.compile(r"(?<!\\)(!\[|<img|\*\*bold)")  # an image, a tag or bold that Markdown would render


# --- a real small sweep, as tests/test_charts_remote.py builds one ---------------------------------------------------
def record(index: int, arrivals: tuple[float, ...], tokens: tuple[int, ...], **kw: Any) -> records.RequestRecord:
    values: dict[str, Any] = dict(
        index=index,
        start_s=0.0,
        ttft_s=arrivals[0],
        e2e_s=arrivals[-1],
        chunk_arrivals_s=arrivals,
        chunk_tokens=tokens,
        output_tokens=sum(tokens),
        output_tokens_from="usage",
        chunk_tokens_from="chunks",
        prompt_tokens=5,
        finish_reason="length",
        text="t" * len(arrivals),
    )
    values.update(kw)
    return records.RequestRecord(**values)


def small_sweep(**kw: Any) -> records.SweepResult:
    failed = records.RequestRecord.failed(2, 0.0, "connection reset")
    one = records.LevelResult(1, 1.0, (record(0, (0.1, 0.14, 0.18), (1, 1, 1)), record(1, (0.2, 0.26), (1, 3))))
    two = records.LevelResult(2, 0.5, (record(0, (0.3, 0.35), (1, 1)), record(1, (0.1, 0.19), (1, 3)), failed))
    values: dict[str, Any] = dict(
        endpoint=make_endpoint("http://127.0.0.1:8000/v1", "m"),
        prompt="p",
        max_tokens=4,
        requests_per_level=3,
        ttft_slo_s=0.25,
        itl_slo_s=0.05,
        levels=(one, two),
        warmup=record(-1, (0.5, 0.6), (1, 1)),
        created_at="2026-01-01T00:00:00+00:00",
    )
    values.update(kw)
    return records.SweepResult(**values)


GOOD = small_sweep().to_json()


def changed(change: Callable[[dict[str, Any]], object]) -> bytes:
    """The good file with one change made to its JSON."""
    data = json.loads(GOOD)
    change(data)
    return json.dumps(data).encode()


def setter(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """A change that sets one field, by a dotted path with list indices as numbers: "levels.1.records.1.ttft_s"."""

    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value

    return change


# Each bad upload: (its name, its bytes, the start of the one line that refuses it, after "damaged: ").
BAD_UPLOADS: list[tuple[str, bytes, str]] = [
    (
        "huge chunk_tokens",
        changed(setter("levels.0.records.0.chunk_tokens", [1, 20_000_000, 1])),
        "levels[0].records[0].chunk_tokens[1]: must be a whole number from 0 to 4 (the sweep's max_tokens), "
        "not 20000000",
    ),
    ("records of numbers", changed(setter("levels.0.records", [1])), "levels[0].records[0]: must be an object, not 1"),
    (
        "ttft as a word",
        changed(setter("levels.1.records.1.ttft_s", "fast")),
        "levels[1].records[1].ttft_s: must be a finite number ≥ 0, not 'fast'",
    ),
    (
        "output_tokens as text",
        changed(setter("levels.0.records.1.output_tokens", "5")),
        "levels[0].records[1].output_tokens: must be a whole number from 0 to 8, not '5'",
    ),
    ("levels as an object", changed(setter("levels", {})), "levels: must be a list of 1 to 16 items, not an object"),
    (
        "markdown as a token source",
        changed(setter("levels.0.records.0.chunk_tokens_from", MARKDOWN)),
        "levels[0].records[0].chunk_tokens_from: must be one of 'usage', 'tokenizer', 'chunks', not '![x](",
    ),
]
BOMB = b"[" * 100_000


# --- the checks, by hand ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("limits", [upload.LOCAL_LIMITS, upload.HOSTED_LIMITS], ids=["local", "hosted"])
def test_a_good_file_round_trips(limits: upload.UploadLimits) -> None:
    assert upload.read_sweep(GOOD.encode(), limits) == small_sweep()
    assert upload.read_sweep(("\ufeff" + GOOD).encode(), limits) == small_sweep()  # a BOM from a Windows editor


@pytest.mark.parametrize(("name", "body", "words"), BAD_UPLOADS, ids=[case[0] for case in BAD_UPLOADS])
def test_each_bad_upload_is_one_line_naming_its_first_bad_field(name: str, body: bytes, words: str) -> None:
    with pytest.raises(BadInput) as caught:
        upload.read_sweep(body, upload.HOSTED_LIMITS)
    message = str(caught.value)
    assert message.startswith("This sweep file is damaged: " + words), message
    assert "\n" not in message and len(message) < 300


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (setter("levels.0.records.0.ttft_s", float("nan")), "ttft_s: must be a finite number ≥ 0, not nan"),
        (setter("levels.0.wall_s", 1e999), "levels[0].wall_s: must be a finite number ≥ 0, not inf"),
        (setter("levels.0.records.0.chunk_tokens", [1, 1]), "chunk_tokens: must be a list of one count per chunk"),
        (setter("levels.0.records.0.chunk_arrivals_s", [0.3, 0.1, 0.2]), "chunk_arrivals_s[1]: must be no earlier"),
        (setter("levels.0.records.1.chunk_arrivals_s", [0.1] * 9), "chunk_arrivals_s: must be a list of 0 to 8 items"),
        (setter("levels.0.records.0.chunk_tokens", [4, 4, 4]), "levels[0].records[0].chunk_tokens: must be at most 8"),
        (setter("max_tokens", True), "max_tokens: must be a whole number from 1 to 4,096, not true"),
        (setter("max_tokens", 5000), "max_tokens: must be a whole number from 1 to 4,096, not 5000"),
        (setter("requests_per_level", 65), "requests_per_level: must be a whole number from 1 to 64"),
        (setter("levels.0.records", [{}] * 65), "levels[0].records: must be a list of 1 to 64 items"),
        (setter("levels", [{}] * 17), "levels: must be a list of 1 to 16 items"),
        (setter("levels", []), "levels: must be a list of 1 to 16 items"),
        (setter("levels.0.concurrency", 17), "levels[0].concurrency: must be a whole number from 1 to 16"),
        (setter("endpoint.api", "grpc"), "endpoint.api: must be one of 'chat', 'completions', not 'grpc'"),
        (setter("endpoint.model", ["m"]), "endpoint.model: must be text of at most 2,000 characters, not a list"),
        (setter("interrupted", "yes"), "interrupted: must be true or false, not 'yes'"),
        (setter("warmup.chunk_tokens", [1, -1]), "warmup.chunk_tokens[1]: must be a whole number from 0 to 4"),
        (lambda data: data["levels"][0]["records"][0].pop("text"), "levels[0].records[0].text: is missing"),
    ],
)
def test_types_finite_numbers_bounds_and_lengths(change: Callable[[dict[str, Any]], object], words: str) -> None:
    with pytest.raises(BadInput, match="^This sweep file is damaged: .*" + re.escape(words)):
        upload.read_sweep(changed(change), upload.HOSTED_LIMITS)


def test_the_total_of_tokens_is_bounded_by_the_servers_cap() -> None:
    small = upload.UploadLimits(1 << 20, 16, 64, 16, max_total_tokens=10)
    with pytest.raises(BadInput, match=r"levels\[1\] brings its tokens to 13, over the 10 it reads"):
        upload.read_sweep(GOOD.encode(), small)
    assert upload.HOSTED_LIMITS.max_total_tokens == 16 * settings.HOSTED_MAX_REQUESTS * settings.HOSTED_MAX_TOKENS


def test_size_nesting_and_json_are_checked_before_any_field() -> None:
    with pytest.raises(BadInput, match="this server reads sweep files of at most 1 MiB"):
        upload.read_sweep(b" " * ((1 << 20) + 1), upload.UploadLimits(1 << 20, 16, 64, 16, 100))
    for bomb in (BOMB, b'{"a":' * 100_000, b"[" * 17 + b"]" * 17):
        with pytest.raises(BadInput, match="nests deeper than 16 levels"):
            upload.read_sweep(bomb, upload.HOSTED_LIMITS)
    upload.check_depth("[" * 16 + "]" * 16, 16)  # as deep as allowed
    upload.check_depth(json.dumps({"prompt": "[" * 100 + '\\"{{{'}), 2)  # brackets inside strings do not count
    for text, words in [(b"\xff\xfe", "not UTF-8"), (b"{not json", "not JSON"), (b"1" * 5000, "not JSON")]:
        with pytest.raises(BadInput, match=words):
            upload.read_sweep(text, upload.HOSTED_LIMITS)
    with pytest.raises(BadInput, match="the file: must be an object, not a list"):
        upload.read_sweep(b"[1, 2]", upload.HOSTED_LIMITS)
    with pytest.raises(BadInput, match="not a remote sweep of schema 1"):
        upload.read_sweep(b'{"schema": 2}', upload.HOSTED_LIMITS)


def test_a_bomb_is_refused_fast() -> None:
    started = time.process_time()
    for _ in range(10):
        with pytest.raises(BadInput):
            upload.read_sweep(BOMB, upload.HOSTED_LIMITS)
    assert time.process_time() - started < 1.0


# --- the page, hosted ------------------------------------------------------------------------------------------------
@pytest.fixture
def hosted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.HOSTED_ENV, "1")
    monkeypatch.delenv(settings.ALLOWED_MODELS_ENV, raising=False)
    monkeypatch.delenv(settings.RUNS_PER_MINUTE_ENV, raising=False)


def upload_file(at: AppTest, body: bytes, name: str = "sweep.json") -> float:
    """Upload `body` on the Endpoint page and rerun it; returns the process CPU seconds the rerun took."""
    started = time.process_time()
    at.get("file_uploader")[0].set_value((name, body, "application/json")).run()
    return time.process_time() - started


MARKDOWN_KINDS = ("markdown", "caption", "info", "warning", "error", "success", "title")  # rendered as Markdown


def every_text(at: AppTest, kinds: tuple[str, ...] = (*MARKDOWN_KINDS, "text", "code", "exception")) -> list[str]:
    """Every string the page drew in elements of these kinds."""
    return [str(getattr(e, "value", "")) for kind in kinds for e in at.get(kind)]


def assert_one_line_refusal(at: AppTest) -> str:
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    drawn = " ".join(every_text(at))
    assert "Traceback" not in drawn and 'File "' not in drawn and "site-packages" not in drawn
    assert not at.get("vega_lite_chart")
    return errors[0].replace("\\", "")  # as a visitor reads it: the app escapes markdown with backslashes


BAD_PAGE_UPLOADS = [*BAD_UPLOADS, ("JSON bomb", BOMB, "")]


@pytest.mark.usefixtures("hosted")
@pytest.mark.parametrize(("name", "body", "words"), BAD_PAGE_UPLOADS, ids=[case[0] for case in BAD_PAGE_UPLOADS])
def test_a_bad_upload_is_one_line_in_a_fraction_of_a_cpu_second(name: str, body: bytes, words: str) -> None:
    at = open_page("pages/endpoint.py")
    cpu_s = upload_file(at, body)
    line = assert_one_line_refusal(at)
    assert line.startswith("This sweep file is damaged: " + words if words else "This file nests deeper"), line
    print(f"[{name}] {cpu_s:.3f} s of CPU")
    assert cpu_s < CPU_LIMIT_S, f"{name}: {cpu_s:.2f} s of CPU"
    at.run()  # a rerun with the same file keeps saying so, in one line
    assert assert_one_line_refusal(at) == line


@pytest.mark.usefixtures("hosted")
def test_anyones_text_in_a_good_file_is_shown_as_text() -> None:
    failed = records.RequestRecord.failed(1, 0.0, MARKDOWN)
    hostile = small_sweep(
        endpoint=make_endpoint("http://127.0.0.1:8000/v1", MARKDOWN),
        stopped=MARKDOWN,
        levels=(records.LevelResult(1, 1.0, (record(0, (0.1, 0.2), (1, 1), finish_reason=MARKDOWN), failed)),),
    )
    at = open_page("pages/endpoint.py")
    upload_file(at, hostile.to_json().encode())
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(MARKDOWN in t.value for t in at.text)  # the model name, literally, in plain text
    at.sidebar.toggle(key=PRESENTER_KEY).set_value(True).run()  # static tables render Markdown in their cells
    assert not at.exception
    tables = [t.value for t in at.table]
    assert any((table.astype(str) == endpoint_view.escape_markdown(MARKDOWN)).any().any() for table in tables)
    for value in every_text(at, MARKDOWN_KINDS) + [str(table.to_dict()) for table in tables]:
        assert not UNESCAPED.search(value), value  # nothing a browser would fetch or run


# --- one read per upload, and the rate limit -------------------------------------------------------------------------
@pytest.mark.usefixtures("hosted")
def test_a_rerun_with_the_same_file_reads_and_derives_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.RUNS_PER_MINUTE_ENV, "2")
    checks = mock.patch.object(upload, "check_sweep", wraps=upload.check_sweep)
    derives = mock.patch.object(charts, "levels_frame", wraps=charts.levels_frame)
    at = open_page("pages/endpoint.py")
    with checks as checked, derives as derived:
        upload_file(at, GOOD.encode())
        # the SLO charts and throughput against speed per user (the recorded sweep has no server figures to draw)
        assert not at.error and len(at.get("vega_lite_chart")) == 3, [e.value for e in at.error]
        assert (checked.call_count, derived.call_count) == (1, 1)
        at.run()
        at.get("file_uploader")[0].set_value(("again.json", GOOD.encode(), "application/json")).run()  # same bytes
        assert (checked.call_count, derived.call_count) == (1, 1)
        next(n for n in at.number_input if n.label == "ITL SLO (ms)").set_value(100.0).run()
        assert (checked.call_count, derived.call_count) == (1, 2)  # new SLOs re-read the tables, never the file
        upload_file(at, small_sweep(prompt="q").to_json().encode())  # new content: the second of 2 per minute
        assert not at.error and checked.call_count == 2
        upload_file(at, small_sweep(prompt="r").to_json().encode())  # the third: refused before it is read
    assert checked.call_count == 2 and not at.exception
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and "2 runs per minute per visitor" in errors[0], errors


def test_the_page_hands_the_uploaded_bytes_to_the_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page and these tests run the same function on the same bytes."""
    seen: list[bytes] = []
    read = upload.read_sweep
    monkeypatch.setattr(upload, "read_sweep", lambda raw, limits: seen.append(raw) or read(raw, limits))
    at = open_page("pages/endpoint.py")
    upload_file(at, GOOD.encode())
    assert seen == [GOOD.encode()] and at.session_state[ui_state.ENDPOINT_RESULT] == small_sweep()
