"""A recording is data from anyone, on every page that draws one: each file the checks refuse is one line by upload
and by link (the 30 MiB list in a fraction of a CPU second and under 100 MB), each file at the edge of a bound draws
every page, markdown and HTML in any of its texts is drawn as text, and uploads count against the rate limit."""

from __future__ import annotations

import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer.hosting import settings
from explorer.recording import pdx as recording
from explorer.ui import recordings as ui_recordings
from explorer.ui import state as ui_state
from explorer.ui.widgets import PRESENTER_KEY
from tests.apptest_support import ROOT, navigation_like_a_server  # noqa: F401 - an autouse fixture
from tests.recording_support import (
    HOSTILE,
    PAGE_BOUNDARIES,
    REFUSED,
    edited,
    forged_kv_recording,
    hostile_text_recording,
)

RECORDING_PAGES = (
    "pages/run.py",
    "pages/attention.py",
    "pages/kv_cache.py",
    "pages/cost.py",
    "pages/latency.py",
    "pages/compare.py",
    "pages/tour.py",
    "pages/by_hand.py",
    "pages/check_yourself.py",
    "pages/at_scale.py",
)
MARKDOWN_KINDS = ("markdown", "caption", "info", "warning", "error", "success", "title", "header", "subheader")
# What a browser would render from HOSTILE if it reached Markdown unescaped: a link, an image, a tag, or a bare URL,
# which Markdown links even with every character escaped (http\://127\.0\.0\.1 still became an <a href>).
RENDERED = re.compile(r"(?<!\\)\]\(|(?<!\\)!\\?\[|(?<!\\)<img|https?\\?://127")
CPU_LIMIT_S = 1.0
MEMORY_LIMIT_BYTES = 100e6


def new_app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def upload(at: AppTest, raw: bytes, name: str = "talk.pdx") -> None:
    at.get("file_uploader")[0].set_value((name, raw, "application/octet-stream")).run()


def errors_of(at: AppTest) -> list[str]:
    return [e.value.replace("\\", "") for e in at.error]  # as a visitor reads them: the app escapes with backslashes


def one_line_naming(at: AppTest, words: str) -> str:
    assert not at.exception, at.exception
    errors = errors_of(at)
    assert len(errors) == 1 and "\n" not in errors[0] and words in errors[0], errors
    return errors[0]


def walk_pages(at: AppTest) -> None:
    """Every page that draws a recording: each draws or says one line, never an exception."""
    for page in RECORDING_PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert len(at.error) <= 1, (page, errors_of(at))


# --- refused: one line, by upload and by link ------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "make", "words"), REFUSED, ids=[case[0] for case in REFUSED])
def test_a_refused_recording_is_one_line_by_upload_and_no_page_breaks(
    name: str, make: Callable[[], bytes], words: str
) -> None:
    at = new_app()
    upload(at, make())
    one_line_naming(at, words)
    assert ui_state.RUN not in at.session_state
    if name == REFUSED[0][0]:  # the pages then have no run (every refused file is refused here): one walk is enough
        walk_pages(at)


@pytest.fixture
def bundled_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled recordings' folder, as this test fills it: a link opens what a server ships."""
    monkeypatch.setattr(recording, "BUNDLED_DIR", tmp_path)
    return tmp_path


def cost_of(action: Callable[[], None], tries: int = 3) -> tuple[float, float]:
    """(CPU seconds, peak bytes allocated) of `action`, each from its own calls (tracing slows the clock). The CPU
    figure is the least of `tries`: other processes on a shared machine only ever add to it."""
    cpu_s = float("inf")
    for _ in range(tries):
        started = time.process_time()
        action()
        cpu_s = min(cpu_s, time.process_time() - started)
    tracemalloc.start()
    try:
        action()
        return cpu_s, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # eight refusals of a 30 MiB member, four of them traced
def test_the_30_mib_list_is_refused_by_link_and_by_upload_in_a_fraction_of_a_second_and_100_mb(
    bundled_dir: Path,
) -> None:
    """Each way in is measured on a running app (a link by a new name, an upload by a new file), so the figure is the
    refusal's, not the app's start."""
    raw = forged_kv_recording()
    assert len(raw) < 100_000
    at = new_app()
    links = iter(range(4))

    def by_link() -> None:  # a file the server has not read yet (the sidebar reads each bundled one once)
        name = f"forged-{next(links)}"
        (bundled_dir / f"{name}.pdx").write_bytes(raw)
        at.query_params[ui_recordings.QUERY] = name
        at.run()
        one_line_naming(at, "kv_layer_bytes: a list of 15,728,640 values")

    def by_upload() -> None:
        upload(at, raw, f"forged-{time.monotonic_ns()}.pdx")
        one_line_naming(at, "kv_layer_bytes: a list of 15,728,640 values")

    for how, action in (("link", by_link), ("upload", by_upload)):
        cpu_s, peak_bytes = cost_of(action)
        print(f"by {how}: {cpu_s:.2f} s of CPU, {peak_bytes / 1e6:.0f} MB at most")
        assert cpu_s < CPU_LIMIT_S and peak_bytes < MEMORY_LIMIT_BYTES, (how, cpu_s, peak_bytes)


# --- at the edge of a bound: every page draws ------------------------------------------------------------------------
@pytest.mark.slow  # every page drawn: ~10 s
@pytest.mark.parametrize(("name", "make"), PAGE_BOUNDARIES, ids=[case[0] for case in PAGE_BOUNDARIES])
def test_a_recording_at_the_edge_of_a_bound_draws_every_page(name: str, make: Callable[[], bytes]) -> None:
    at = new_app()
    upload(at, make())
    assert not at.error and not at.exception, errors_of(at)
    assert at.session_state[ui_state.RUN].recorded is not None
    walk_pages(at)


# --- anyone's text is text -------------------------------------------------------------------------------------------
def rendered_markup(at: AppTest) -> list[str]:
    """The bodies of elements rendered as Markdown that would draw a link, an image or a tag from the file."""
    drawn = [str(getattr(e, "value", "")) for kind in MARKDOWN_KINDS for e in at.get(kind)]
    return [text for text in drawn if RENDERED.search(text)]


@pytest.mark.slow  # every page drawn: ~10 s
@pytest.mark.parametrize("presenting", [False, True], ids=["laptop", "presenter"])
def test_markdown_and_html_in_a_recordings_texts_are_drawn_as_text_on_every_page(presenting: bool) -> None:
    at = new_app()
    if presenting:  # static tables render Markdown in their cells
        at.sidebar.toggle(key=PRESENTER_KEY).set_value(True).run()
    upload(at, hostile_text_recording())
    assert not at.error and not at.exception, errors_of(at)
    literal = False
    for page in RECORDING_PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert not rendered_markup(at), (page, rendered_markup(at))
        literal |= any(HOSTILE in str(e.value) for kind in ("text", "code") for e in at.get(kind))
    assert literal, "the file's text is shown somewhere, literally"


# --- the rate limit --------------------------------------------------------------------------------------------------
def test_recording_uploads_count_against_the_sessions_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.HOSTED_ENV, "1")
    monkeypatch.delenv(settings.ALLOWED_MODELS_ENV, raising=False)
    monkeypatch.setenv(settings.RUNS_PER_MINUTE_ENV, "2")
    at = new_app()
    for i in range(2):
        upload(at, edited(meta=lambda d, i=i: d.update(title=f"upload {i}")), f"upload-{i}.pdx")
        assert not at.error, errors_of(at)
    upload(at, edited(meta=lambda d: d.update(title="one too many")), "upload-2.pdx")
    one_line_naming(at, "2 runs per minute")
    assert at.session_state[ui_state.RUN].recorded.title == "upload 1"
