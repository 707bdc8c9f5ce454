"""Nothing raw on screen: every page, after a live run and with a bundled recording, read as a visitor reads it (text,
tables, chart titles, axis and legend titles, labels drawn from data, tooltips) holds no snake_case name, no `None`,
no true/false and no unit-less number of five or more digits. How it reads a page: `tests/rendered_text.py`.

One name, one figure (issue 42), on the same walks: no byte figure larger than the cache it names is called the KV
cache (traffic is called traffic); Cost, Latency and At scale state one decode median, the run's; and with device
figures taken under load, each page says so at most once (never inside its sentences)."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.figure_correction import recost
from explorer.core.roofline import kv_cache_bytes
from explorer.core.trace import Trace
from explorer.recording.pdx import bundled
from explorer.ui import recordings as ui_recordings
from explorer.ui import state as ui_state
from explorer.ui.presenter import PRESENTER_PARAM
from tests.apptest_support import ROOT, navigation_like_a_server  # noqa: F401 - an autouse fixture
from tests.rendered_text import (
    Finding,
    Piece,
    cache_figures,
    decode_medians,
    findings,
    page_pieces,
    under_load_mentions,
)

PAGES = re.findall(r'st\.Page\("(pages/[a-z_]+\.py)"', (ROOT / "app.py").read_text())
RECORDING, COMPARED = "short-chat", "bfloat16"  # bundled: `?recording=A&compare=B` opens both (Compare has a pair)
# What is meant as it is, each with why (a regular expression: what it matches is left out before the rules).
ALLOWED = {
    r"<\|[a-z_]+\|>": "the model's own special tokens (<|im_start|>), shown verbatim as its tokenizer writes them, "
    "like the prompt's text",
    r"\[\d+(?:, \d+)+\]": "a tensor's shape, written as torch prints it ([1, 49152]: the vocabulary is one dimension)",
}


def walk_every_page(at: AppTest, after_step: bool = False) -> tuple[list[Finding], dict[str, list[Piece]]]:
    """Every page of the app, in the navigation's order: what breaks a rule, and each page's pieces of text. With
    `after_step`, the Step page is read after Prefill and one Next token (its request's view)."""
    found: list[Finding] = []
    pieces_per_page: dict[str, list[Piece]] = {}
    for page in PAGES:
        started = time.perf_counter()
        at.switch_page(page).run()
        if after_step and page == "pages/step.py":
            next(b for b in at.main.button if b.label == "Prefill").click().run()  # the form's button has no key
            at.button(key="step-next").click().run()
            assert at.session_state[ui_state.STEPPED].passes, "the Step page drew no pass"
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
        pieces = page_pieces(at)
        pieces_per_page[page] = pieces
        found += findings(page, pieces, ALLOWED)
        print(f"{page}: {len(pieces)} pieces of text, {time.perf_counter() - started:.1f} s")
    return found, pieces_per_page


def assert_nothing_raw(found: list[Finding], pieces_per_page: dict[str, list[Piece]]) -> None:
    assert all(len(pieces) > 5 for pieces in pieces_per_page.values()), pieces_per_page  # every page was read
    assert not found, "raw text on screen:\n" + "\n".join(map(str, found))


# Pages whose KV figures are not this run's cache: a what-if of other models and GPUs, a lab's own result (its bundled
# one until its button runs it), a remote server's requests.
NOT_THIS_RUNS_CACHE = {"pages/at_scale.py", "pages/batching.py", "pages/nocache.py", "pages/scheduling.py"}
DECODE_MEDIAN_PAGES = ("pages/cost.py", "pages/latency.py", "pages/at_scale.py")


def kv_cache_findings(pieces_per_page: dict[str, list[Piece]], trace: Trace) -> list[str]:
    """Every figure a page calls the KV cache that is larger than the cache it names: the run's (the largest any pass
    of any repeat held, or a static cache's reservation), or the model's at the context and batch its clause names."""
    held = max([trace.allocated_kv_cache_bytes, *(p.kv_cache_bytes for passes in trace.repeats for p in passes)])
    wrong = []
    for page, pieces in pieces_per_page.items():
        if page in NOT_THIS_RUNS_CACHE:
            continue
        for figure in cache_figures(pieces):
            cache = held if figure.context is None else kv_cache_bytes(trace.model, figure.context, figure.batch or 1)
            if figure.bytes > cache * 1.005 + 1:  # human_bytes keeps 3-4 significant figures
                wrong.append(
                    f"{page}: {figure.bytes:,.0f} B called the KV cache (it holds {cache:,} B): {figure.text!r}"
                )
    return wrong


def assert_one_name_one_figure(pieces_per_page: dict[str, list[Piece]], trace: Trace) -> None:
    """No traffic called the cache, and one decode median, the run's, on Cost, Latency and At scale (and any other
    page that states one)."""
    wrong = kv_cache_findings(pieces_per_page, trace)
    assert not wrong, "KV figures called the cache that are not its size:\n" + "\n".join(wrong)
    medians = {page: decode_medians(pieces) for page, pieces in pieces_per_page.items()}
    assert all(medians[page] for page in DECODE_MEDIAN_PAGES), medians
    said = set().union(*medians.values())
    assert len(said) == 1, f"more than one decode median on screen: { {p: m for p, m in medians.items() if m} }"
    value, unit = next(iter(said)).split(",")[0].split()
    walls_s = [p.wall_s for passes in trace.repeats for p in passes[1:]]
    expected_ms = float(np.median(walls_s)) * 1e3  # every repeat's decode passes, computed here
    assert float(value.replace(",", "")) * (1e3 if unit == "s" else 1) == pytest.approx(expected_ms, rel=5e-3), said
    assert next(iter(said)).endswith(f", median of {len(walls_s):,}")


def test_the_rules_find_what_the_issue_found() -> None:
    """The walk's rules catch each kind of raw text the issue listed, and leave alone what is meant."""
    from tests.rendered_text import Piece

    raw = [
        Piece("caption", "wall_over_roofline is how many times slower; flops, bytes and t_* modelled"),
        Piece("dataframe column 'layers'", "None (an empty cell)"),
        Piece("dataframe column 'passes'", "true/false cells (a boolean column)"),
        Piece("chart 3 text", "max_batch = 188"),
        Piece("dataframe column 'projected (ms)'", "6696000 (a number not grouped in thousands)"),
    ]
    rules = sorted({f.rule for f in findings("p", raw)})
    assert rules == ["None", "boolean", "raw name", "unit-less large number"], rules
    assert {f.found for f in findings("p", raw[:1])} == {"wall_over_roofline", "t_"}
    meant = [
        Piece("markdown", "a _measured_ figure, 6,696,000 ms, on 2026-11-24 at 00:22, 0.000123456 s"),
        Piece("chart 1 x label", "0:<|im_start|>"),
        Piece("dataframe column 'shape'", "[1, 49152]"),
    ]
    assert findings("p", meant, ALLOWED) == []


def test_the_one_name_rules_find_what_issue_42_found() -> None:
    """Latency's "1.13 GB of KV" at 8,192 tokens (the cache holds 377.5 MB there), Cost's "6.91 MB of KV cache" (it held
    2.30 MB), two decode medians, and a sentence that repeats the under-load warning are each caught; traffic named as
    traffic beside the cache it moves through is not."""
    from types import SimpleNamespace

    from tests.test_roofline import smollm2_by_hand

    model = smollm2_by_hand()  # 46,080 B a position: 8,192 positions hold 377.5 MB
    held = 50 * 46_080  # 2.30 MB
    passes = (SimpleNamespace(kv_cache_bytes=held, wall_s=0.2),)
    trace = SimpleNamespace(model=model, allocated_kv_cache_bytes=held, repeats=(passes,))
    found = {
        "pages/latency.py": [
            Piece(
                "caption", "Modelled, at the model's maximum of 8,192 tokens, 1.13 GB of KV against 538.1 MB of weights"
            )
        ],
        "pages/cost.py": [Piece("markdown", "its floor is reading 538.1 MB of weights and 6.91 MB of KV cache")],
        "pages/step.py": [Piece("metric label", "KV cache"), Piece("metric value", "6.91 MB")],
    }
    assert len(kv_cache_findings(found, trace)) == 3  # type: ignore[arg-type]
    meant = {
        "pages/latency.py": [
            Piece(
                "caption",
                "Modelled, this run's last decode pass (at 50 tokens) moved 6.91 MB of KV traffic (= 3.0x the 2.30 MB "
                "cache); at the model's maximum of 8,192 tokens, 1.13 GB of KV traffic (= 3.0x the 377.5 MB cache).",
            )
        ],
        "pages/kv_cache.py": [Piece("metric label", "KV cache now"), Piece("metric value", "2.30 MB")],
        "pages/tour.py": [Piece("markdown", "with it on its own machine, which ships 2.30 MB of KV.")],
    }
    assert kv_cache_findings(meant, trace) == []  # type: ignore[arg-type]
    two = [Piece("caption", "a decode pass: 86.1 ms (measured, median of 14)"), Piece("caption", "86.40 ms")]
    assert decode_medians(two) == {"86.1 ms, median of 14"}
    repeated = [Piece("markdown", "memory-bound (figures taken under load: unreliable) by the model")] * 2
    assert len(under_load_mentions(repeated)) == 2


@pytest.mark.slow  # the real model: one run, one prefill and one step, then 15 pages
def test_every_page_after_a_live_run_shows_no_raw_text() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.run()
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(8)
    at.button(key="sidebar-run").click().run()  # the sidebar form's Run: its other values as they are
    trace = at.session_state[ui_state.RUN].trace
    assert trace.new_tokens > 1
    found, pieces = walk_every_page(at, after_step=True)
    assert_nothing_raw(found, pieces)
    assert_one_name_one_figure(pieces, trace)


@pytest.mark.slow  # 15 pages drawn from a recording, in presenter mode (the static tables' path)
@pytest.mark.skipif(not {RECORDING, COMPARED} <= set(bundled()), reason="the recordings are not bundled")
def test_every_page_with_a_bundled_recording_in_presenter_mode_shows_no_raw_text() -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params[ui_recordings.QUERY] = RECORDING
    at.query_params[ui_recordings.COMPARE_QUERY] = COMPARED
    at.query_params[PRESENTER_PARAM] = "1"
    at.run()
    assert at.session_state[ui_state.RUN].recorded is not None
    found, pieces = walk_every_page(at)
    assert_nothing_raw(found, pieces)
    assert_one_name_one_figure(pieces, at.session_state[ui_state.RUN].trace)


# The pages that show this run's device figures, each of which must say once that they were taken under load.
UNDER_LOAD_PAGES = ("pages/cost.py", "pages/latency.py", "pages/kv_cache.py", "pages/tour.py", "pages/at_scale.py")


@pytest.mark.slow  # 15 pages drawn from a recording whose device figures are marked as taken under load
@pytest.mark.skipif(RECORDING not in bundled(), reason="the recordings are not bundled")
def test_every_page_says_at_most_once_that_figures_were_taken_under_load() -> None:
    """Issue 42: the Tour repeated "(figures taken under load: unreliable)" inside its sentences. With a run whose
    figures were taken under load, a page says so once near its top, and nowhere else."""
    recording = ui_recordings.bundled_recording(bundled()[RECORDING])
    busy = replace(recording.trace.device, figures_taken_under_load=True, figures_note="the matmul repeats spread 2.3x")
    flagged = ui_recordings.as_result(replace(recording, trace=recost(recording.trace, busy)))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state[ui_state.RUN] = flagged  # as the sidebar leaves a run: every page reads it
    at.run()
    found, pieces = walk_every_page(at)
    assert_nothing_raw(found, pieces)
    said = {page: [m.text for m in under_load_mentions(drawn)] for page, drawn in pieces.items()}
    assert all(len(mentions) <= 1 for mentions in said.values()), {p: m for p, m in said.items() if len(m) > 1}
    assert all(len(said[page]) == 1 for page in UNDER_LOAD_PAGES), {page: said[page] for page in UNDER_LOAD_PAGES}
    assert all(m[0].startswith("The device figures were taken under load") for m in said.values() if m), said
