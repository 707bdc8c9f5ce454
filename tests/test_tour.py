"""The Tour: every slide built from a tiny model's real run (with and without attention maps, one token, a recording's
wording), the modelled figures checked by hand, and the page driven through AppTest with no model loadable."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import pytest
import transformers
from streamlit.testing.v1 import AppTest

from explorer.charts import tables
from explorer.charts import tour as charts
from explorer.core.attention import capture_attention
from explorer.core.attention_maps import AttentionMaps
from explorer.core.engine import Request, check_request, generate
from explorer.core.loaded_model import LoadedModel
from explorer.core.roofline import pass_cost, pass_flops, ridge_batch
from explorer.core.trace import DeviceProfile, Trace
from explorer.core.units import ms, short_time
from explorer.recording.checks import read_recording
from explorer.recording.pdx import bundled
from explorer.teach import tour
from explorer.ui import recordings as ui_recordings
from explorer.ui import state as ui_state
from explorer.ui import tour_view
from explorer.ui.widgets import PRESENTER_KEY, TOUCH_HIDES_KEY_HINTS_CSS
from tests.apptest_support import ROOT, navigation_like_a_server, open_page  # noqa: F401 - an autouse fixture

PAGE = "pages/tour.py"
NEW_TOKENS = 8
HEIGHT_PX = 380


@pytest.fixture(scope="module")
def run(tiny_lm: LoadedModel, cpu_figures: DeviceProfile) -> tuple[Trace, AttentionMaps]:
    request = check_request(tiny_lm, Request("The tour of the two phases", max_new_tokens=NEW_TOKENS))
    trace = generate(tiny_lm, request, cpu_figures)
    return trace, capture_attention(tiny_lm, trace)


def one_token(trace: Trace) -> Trace:
    return replace(trace, repeats=(trace.passes[:1],), shown_repeat=0)


def all_slides(trace: Trace, maps: AttentionMaps | None, **settings: object) -> list[tour.Slide]:
    run = tour.Run(trace, maps, "Attention capture was off for this run.", HEIGHT_PX, **settings)
    return [tour.slide(i, run) for i in range(tour.SLIDE_COUNT)]


# --- the slides ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_maps", [True, False], ids=["maps", "no-maps"])
def test_every_slide_is_one_chart_and_one_or_two_labelled_sentences(
    run: tuple[Trace, AttentionMaps], with_maps: bool
) -> None:
    trace, maps = run
    slides = all_slides(trace, maps if with_maps else None)
    assert [s.title for s in slides] == list(tour.TITLES) and len(slides) == 8
    for s in slides:
        assert 1 <= len(s.sentences) <= 2, s.title
        labelled = re.compile(r"measured|modelled|recorded|counted from this (run|recording)", re.IGNORECASE)
        assert labelled.search(s.sentences[0]), (s.title, s.sentences[0])
        for sentence in s.sentences:  # every time, size or rate says where it comes from
            if re.search(r"\d[\d.,]* ?(ms|s|B|kB|MB|GB|tokens/s)\b|×", sentence):
                assert labelled.search(sentence), (s.title, sentence)
        assert not s.frame.empty, s.title
        assert s.chart.to_dict()  # a valid Vega-Lite spec
        assert s.caption and s.source and s.more


def test_the_sentences_quote_the_run(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    tokens, prefill, decode, cache, time, latency, batching, serving = all_slides(trace, maps)
    assert f"**{trace.prompt_len} tokens**" in tokens.sentences[0]
    assert f"{NEW_TOKENS - 1} more for the other {NEW_TOKENS - 1} of {NEW_TOKENS} new tokens" in tokens.sentences[1]
    T = trace.prompt_len
    assert f"a {T} × {T} map" in prefill.sentences[0] and ms(trace.prefill.wall_s) in prefill.sentences[0]
    assert f"The {T * (T - 1) // 2:,} cells above the diagonal" in prefill.sentences[1]
    assert "largest probability there is 0 (measured)" in prefill.sentences[1]  # exactly zero, captured
    first, last = trace.decodes[0].cache_len_after, trace.decodes[-1].cache_len_after
    assert f"{first} keys at the first, {last} at the last" in decode.sentences[0]
    assert f"{trace.model.kv_bytes_per_token:,} B (modelled)" in cache.sentences[0]
    assert ms(trace.prefill.cost.roofline_time_s) in time.sentences[0]
    assert ms(trace.ttft_s) in latency.sentences[0] and ms(trace.itl_p50_s) in latency.sentences[1]
    assert batching.sentences[0].startswith("Modelled:")
    ratio = trace.pass_wall_spread(0).median / charts.median_decode_s(trace)
    assert f"{ratio:,.1f} decode steps' time (measured)" in serving.sentences[0]


def test_without_maps_the_slides_show_what_the_trace_holds(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    _, prefill, decode, *_ = all_slides(trace, None)
    T = trace.prompt_len
    assert "No attention maps were captured" in prefill.sentences[1]
    assert "Attention capture was off" in prefill.note and "Attention" not in prefill.more  # the run's reason, as text
    assert len(prefill.frame) == T * T and (prefill.frame["cell"] == charts.MASKED).sum() == T * (T - 1) // 2
    assert decode.frame["keys_read"].tolist() == [p.cache_len_after for p in trace.decodes]


def test_maps_of_a_window_only_fall_back_to_the_trace(run: tuple[Trace, AttentionMaps]) -> None:
    """A recording may keep a window of a long prompt's map: the slide does not read it as the whole prompt."""
    trace, maps = run
    windowed = replace(maps, prefill={layer: a[:, :4, :4] for layer, a in maps.prefill.items()})
    assert not tour.full_maps(tour.Run(trace, windowed, "", HEIGHT_PX))
    assert "No attention maps were captured" in all_slides(trace, windowed)[1].sentences[1]


def test_a_one_token_run_and_a_recording_still_make_every_slide(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    single = all_slides(one_token(trace), None)
    assert "no decode pass" in single[2].sentences[0] and len(single[4].sentences) == 1
    assert "modelled" in single[7].sentences[0]  # the decode step it compares with is modelled, and says so
    recorded = all_slides(trace, maps, measured="recorded")
    text = " ".join(sentence for s in recorded for sentence in s.sentences)
    assert "(recorded)" in text and "(measured" not in text


def test_a_slide_out_of_range_is_refused(run: tuple[Trace, AttentionMaps]) -> None:
    with pytest.raises(ValueError, match="not one of the 8"):
        tour.slide(8, tour.Run(run[0], None, "", HEIGHT_PX))


# --- the builders, by hand -------------------------------------------------------------------------------------------
def test_a_long_prompt_keeps_its_start_a_count_and_the_sampled_token(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    frame = charts.tokens_frame(trace, max_rows=2, per_row=6)
    assert len(frame) == 12 and frame["row"].max() == 1
    assert frame.iloc[10]["token"] == f"… +{trace.prompt_len - 10}"
    assert frame.iloc[-1]["role"] == "sampled by this pass"
    assert len(charts.tokens_frame(trace, max_rows=100)) == trace.prompt_len + 1  # all of it fits


def test_the_mask_shape_in_blocks() -> None:
    small = charts.mask_frame(5, 48)
    assert len(small) == 25 and (small["cell"] == charts.MASKED).sum() == 10
    pooled = charts.mask_frame(100, 48)  # blocks of 3: 34 x 34
    assert pooled["block"].iloc[0] == 3 and len(pooled) == 34 * 34
    masked = pooled[pooled["cell"] == charts.MASKED]
    assert (masked["key_start"] > masked["query_stop"] - 1).all()  # a block is masked only if wholly in the future
    assert (masked["key_start"] >= masked["query_start"] + 3).all()


def test_batching_is_modelled_from_the_runs_own_figures(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    frame = charts.batch_frame(trace)
    context = charts.decode_context(trace)
    assert frame["batch"].tolist() == list(charts.BATCHES)
    # The weights are read once per step whatever B; an untied input table only gathers one row per sequence.
    model, device = trace.model, trace.device
    row_bytes = 0 if model.tied_embeddings else model.hidden_size * model.bytes_per_element
    extra_ms = (frame["batch"] - 1) * row_bytes / device.effective_read_bandwidth_bytes_per_s * 1e3
    assert (frame["weight_read_ms"] - frame["weight_read_ms"].iloc[0]).tolist() == pytest.approx(extra_ms.tolist())
    for row in frame.itertuples():
        cost = pass_cost(trace.model, trace.device, 1, context, batch=row.batch)
        assert row.step_ms == pytest.approx(cost.roofline_time_s * 1e3)
        assert row.tokens_per_s == pytest.approx(row.batch / cost.roofline_time_s)
    assert frame["measured_ms"].notna().tolist() == [True] + [False] * (len(frame) - 1)
    assert frame["measured_ms"].iloc[0] == pytest.approx(charts.median_decode_s(trace) * 1e3)


def test_the_batching_slide_draws_tokens_per_s_on_its_own_axis_not_as_labels_over_the_bars(
    run: tuple[Trace, AttentionMaps],
) -> None:
    """Issue 31: slide 7's labels above each bar ran together ("51 tok/1/01 tok/s196 tok/s"): tokens/s is a line on
    a right-hand axis of its own, the step times stay on the left."""
    trace, _ = run
    spec = charts.batch_chart(charts.batch_frame(trace), 400).to_dict()
    assert spec["resolve"]["scale"]["y"] == "independent"
    units = [spec["layer"][1], *spec["layer"][0]["layer"]]
    marks = [u["mark"]["type"] if isinstance(u["mark"], dict) else u["mark"] for u in units]
    assert "text" not in marks and "line" in marks
    rate = units[marks.index("line")]["encoding"]["y"]
    assert rate["field"] == "tokens_per_s" and rate["axis"]["orient"] == "right"


def test_slide_3_labels_every_row_it_draws_and_keeps_its_end_of_prompt_away_from_the_legend(
    run: tuple[Trace, AttentionMaps],
) -> None:
    trace, maps = run
    slide = tour.slide(2, tour.Run(trace, maps, "", HEIGHT_PX, narrow=True))
    assert slide.frame["step"].nunique() <= HEIGHT_PX // 50  # rows a slide's 18 px labels can each be read on
    text = next(layer for layer in slide.chart.to_dict()["layer"] if layer["mark"]["type"] == "text")
    assert text["mark"]["align"] == "right"  # the prompt ends near the right: the label reads leftwards


def test_the_token_grid_draws_its_tokens_at_the_themes_text_size(run: tuple[Trace, AttentionMaps]) -> None:
    """Issue 31: the token grid's text looked about 8 px. It sets no size of its own, so the theme's applies: 18 px
    when presenting (measured in the browser walk), never under the theme's label size on a laptop either."""
    from explorer.charts import theme

    trace, maps = run
    grid = tour.slide(0, tour.Run(trace, maps, "", HEIGHT_PX)).chart
    for chosen in (theme.NORMAL, theme.PRESENTER):
        spec = theme.apply(grid, chosen).to_dict()
        text = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "text")
        assert "fontSize" not in text["mark"]
        assert spec["config"]["text"]["fontSize"] == chosen.mark_text_px >= chosen.label_px


def test_slide_7_says_which_cache_it_models_and_where_a_read_once_cache_crosses(
    run: tuple[Trace, AttentionMaps],
) -> None:
    trace, _ = run
    context = charts.decode_context(trace)

    def crossing(layout: str, device: DeviceProfile) -> int | None:
        return ridge_batch(lambda b: pass_cost(trace.model, device, 1, context, batch=b, cache_layout=layout))

    at_16 = pass_cost(trace.model, trace.device, 1, context, batch=16, cache_layout="read_once")
    device = replace(trace.device, peak_flops=0.99 * at_16.flops / at_16.t_memory_s)  # read once: B = 16 just crosses
    concatenating, read_once = crossing("concatenating", device), crossing("read_once", device)
    assert read_once is not None and 1 < read_once <= 16
    assert concatenating is None or concatenating > read_once  # re-read and re-written every step: more bytes
    text = " ".join(tour.slide(6, tour.Run(replace(trace, device=device), None, "", HEIGHT_PX)).sentences)
    said = f"compute-bound from B = {concatenating:,}" if concatenating else "memory-bound at every B up to 1,048,576"
    assert f"Modelled: {said} for transformers' DynamicCache (re-read, re-written each step)" in text
    assert f", compute-bound from B = {read_once:,} for a read-once cache (vLLM's paged one)" in text


def test_the_serving_lanes_by_hand(run: tuple[Trace, AttentionMaps]) -> None:
    frame = charts.serving_frame(prefill_s=0.5, decode_s=0.05, chunks_s=[0.2, 0.15, 0.15, 0.1])
    gaps = charts.longest_gaps_ms(frame)
    assert gaps["one piece"] == pytest.approx(550)  # the prefill, then the decode that brings the next token
    assert gaps["4 chunks"] == pytest.approx(250)  # each chunk's step does the decode's own work too
    assert gaps["decode GPU"] == pytest.approx(50) and "prefill GPU" not in gaps
    assert set(frame["lane_label"]) >= {"one piece: 550 ms", "4 chunks: 250 ms", "prefill GPU"}
    added = frame.drop_duplicates("lane").set_index("lane")["added_ms"]
    assert added["one piece"] == pytest.approx(500) and added["4 chunks"] == pytest.approx(200)  # the prompt's share
    assert added["decode GPU"] == pytest.approx(0)
    trace, _ = run  # the chunks split the measured prefill in the ratio of their FLOPs
    chunks = charts.chunk_times_s(trace, 4)
    T, model = trace.prompt_len, trace.model
    scale = trace.pass_wall_spread(0).median / pass_flops(model, T, T)
    assert chunks[0] == pytest.approx(pass_flops(model, round(T / 4), round(T / 4), logits_tokens=0) * scale)
    # the chunks' useful pairs and matmuls are the whole pass's, and only the last computes logits: they add up to it
    assert sum(chunks) == pytest.approx(trace.pass_wall_spread(0).median, rel=1e-12)
    assert len(charts.chunk_times_s(one_token(trace), 4)) == 4 and len(charts.chunk_times_s(trace, 10_000)) == T


def serving_runs(tiny: Trace) -> list[tuple[str, Trace, str]]:
    recorded = [(name, read_recording(path.read_bytes()).trace, "recorded") for name, path in bundled().items()]
    return [("tiny model", tiny, "measured"), *recorded]


def test_a_chunk_and_decode_step_is_never_shorter_than_a_decode_step(run: tuple[Trace, AttentionMaps]) -> None:
    """Over a tiny model's run and every bundled recording: a step that carries a chunk does the decode's own work
    too, and the sentence names the lanes' own measure, each lane's longest wait between tokens."""
    assert bundled(), "no bundled recordings to check"
    for name, trace, word in serving_runs(run[0]):
        slide = tour.slide(7, tour.Run(trace, None, "", HEIGHT_PX, measured=word))
        frame, decode_s = slide.frame, charts.median_decode_s(trace)
        assert decode_s is not None, name
        mixed = frame[frame["work"] == charts.WORK_DOMAIN[2]]["step_ms"]
        decode_only = frame[frame["work"] == charts.WORK_DOMAIN[0]]["step_ms"]
        assert len(mixed) and mixed.min() > decode_only.max() - 1e-9, name
        prefill_ms = trace.pass_wall_spread(0).median * 1e3
        lanes = frame.drop_duplicates("lane").set_index("lane")
        assert lanes.loc["one piece", "added_ms"] == pytest.approx(prefill_ms), name
        assert lanes.loc["one piece", "longest_gap_ms"] == pytest.approx(prefill_ms + decode_s * 1e3), name
        # The sentence says what the lanes' labels say (one measure: the longest wait between tokens), never the
        # prefill's share of it beside the whole gap.
        longest = short_time(lanes.loc["one piece", "longest_gap_ms"] / 1e3)
        assert f"longest wait between tokens: {longest} with the prefill in one piece" in slide.sentences[1], name
        for lane, gap_ms in lanes["longest_gap_ms"].dropna().items():
            assert f"{lane}: {short_time(gap_ms / 1e3)}" in set(frame["lane_label"]), name
            assert short_time(gap_ms / 1e3) in slide.sentences[1], (name, lane)


def test_the_median_decode_is_a_true_median(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    walls = [0.5, 0.04, 0.01, 0.03, 0.07]  # decodes 0.04 0.01 0.03 0.07: the median is (0.03 + 0.04) / 2
    even = replace(trace, repeats=(tuple(replace(p, wall_s=w) for p, w in zip(trace.passes, walls)),), shown_repeat=0)
    assert charts.median_decode_s(even) == pytest.approx(0.035)
    assert charts.phase_time_frame(even)["ms"].iloc[2] == pytest.approx(35)
    time_slide = tour.slide(4, tour.Run(even, None, "", HEIGHT_PX))
    assert "A decode pass: 35.00 ms measured (median)" in time_slide.sentences[1]
    assert charts.median_decode_s(one_token(trace)) is None


def test_each_phases_time_beside_its_bound(run: tuple[Trace, AttentionMaps]) -> None:
    trace, _ = run
    frame = charts.phase_time_frame(trace)
    assert len(frame) == 4 and frame["phase"].nunique() == 2
    measured = frame[frame["kind"] == "measured"]["ms"].tolist()
    assert measured[0] == pytest.approx(trace.pass_wall_spread(0).median * 1e3)
    assert measured[1] == pytest.approx(charts.median_decode_s(trace) * 1e3)
    bound = frame[frame["kind"] != "measured"]["ms"].tolist()
    assert bound[0] == pytest.approx(trace.prefill.cost.roofline_time_s * 1e3)


# --- the page --------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_model() -> Iterator[None]:
    """No model can load: the page must draw from the session's run alone (as from a recording)."""
    refuse = AssertionError("the Tour loaded a model")
    with (
        mock.patch.object(transformers.AutoModelForCausalLM, "from_pretrained", side_effect=refuse),
        mock.patch.object(transformers.AutoTokenizer, "from_pretrained", side_effect=refuse),
    ):
        yield


def result_of(trace: Trace, maps: AttentionMaps | None) -> ui_state.RunResult:
    return ui_state.RunResult(trace, maps, "" if maps else "Attention capture was off for this run.", "run 1: tour")


def assert_slide(at, index: int) -> None:  # noqa: ANN001 - AppTest
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.title[0].value == tour.TITLES[index]
    assert f"slide {index + 1} of 8" in " ".join(c.value for c in at.caption)
    assert len(at.get("vega_lite_chart")) == 1  # one chart per slide


@pytest.mark.parametrize("with_maps", [True, False], ids=["maps", "no-maps"])
def test_the_page_goes_through_every_slide_with_no_model(
    run: tuple[Trace, AttentionMaps], no_model: None, with_maps: bool
) -> None:
    trace, maps = run
    at = open_page(PAGE, result_of(trace, maps if with_maps else None))
    assert_slide(at, 0)
    assert at.button(key="tour-previous").disabled
    for index in range(1, tour.SLIDE_COUNT):
        at.button(key="tour-next").click().run()
        assert_slide(at, index)
    assert at.button(key="tour-next").disabled and at.query_params["slide"] == "8"
    at.button(key="tour-previous").click().run()
    assert_slide(at, tour.SLIDE_COUNT - 2)


def test_a_link_opens_a_slide_and_keeps_the_other_parameters(run: tuple[Trace, AttentionMaps], no_model: None) -> None:
    trace, maps = run
    at = open_page(PAGE, result_of(trace, maps))
    at.query_params["slide"] = "5"
    at.query_params["talk"] = "keep-me"
    at.run()
    assert_slide(at, 4)
    at.button(key="tour-next").click().run()
    assert_slide(at, 5)
    assert at.query_params["slide"] == "6" and at.query_params["talk"] == "keep-me"
    at.run()  # the link's old value is not applied again over a key press
    assert_slide(at, 5)
    at.query_params["slide"] = "99"  # not a slide: the nearest one, and the slides there are (tests/test_links.py)
    at.run()
    assert_slide(at, tour.SLIDE_COUNT - 1)


def test_in_presenter_mode_the_chart_sits_beside_its_sentences(
    run: tuple[Trace, AttentionMaps], no_model: None
) -> None:
    trace, maps = run
    at = open_page(PAGE, result_of(trace, maps))
    at.sidebar.toggle(key=PRESENTER_KEY).set_value(True).run()
    assert_slide(at, 0)
    columns = at.main.columns
    assert len(columns) == 2 and len(columns[0].get("vega_lite_chart")) == 1
    assert columns[1].markdown[0].value == tour.slide(0, tour.Run(trace, maps, "", 400, narrow=True)).sentences[0]
    assert at.expander[0].proto.expanded is False  # the longer text waits below, collapsed


def test_without_a_run_the_page_says_how_to_make_one() -> None:
    at = open_page(PAGE)
    assert at.title[0].value == tour.TITLES[0]
    assert "No run yet" in at.info[0].value and not at.get("vega_lite_chart")
    assert tour_view.SLIDE_PARAM == "slide"


@pytest.mark.parametrize("name", sorted(bundled()))
def test_the_tour_runs_from_each_bundled_recording_with_no_model(name: str, no_model: None) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params[ui_recordings.QUERY] = name
    at.run()
    at.switch_page(PAGE).run()
    result = at.session_state[ui_state.RUN]
    assert result.recorded is not None and result.recorded.name == name
    assert f"recorded run “{name}” on" in at.caption[0].value.replace("\\", "")  # under the title (escaped)
    assert any(result.recorded.device in w.value for w in at.warning)  # and the full banner
    for index in range(tour.SLIDE_COUNT):
        assert_slide(at, index)
        sentences = " ".join(m.value for m in at.markdown)
        assert re.search(r"\brecord(ed|ing)\b", sentences), sentences  # its figures are said to be recorded
        assert "measured" not in " ".join(
            tour.slide(index, tour.Run(result.trace, result.attention, "", 380, measured="recorded")).sentences
        )
        if index < tour.SLIDE_COUNT - 1:
            at.button(key="tour-next").click().run()


def test_the_attention_slide_explains_the_first_token_column(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    prefill = tour.slide(1, tour.Run(trace, maps, "", HEIGHT_PX, measured="recorded"))
    assert "attention sink" in prefill.more and "recorded)" in prefill.more
    assert "attention sink" not in tour.slide(1, tour.Run(trace, None, "no maps", HEIGHT_PX)).more
    assert "is_causal=True" in prefill.more and "eager" in prefill.more  # which pass computes all T × T: the replay


# --- presenter mode: figures a room can read, no tooltip over the title, whole tokens (issue 42) --------------------
@pytest.mark.parametrize(
    ("value", "shown"),
    [(209.63, "210"), (86.40, "86.4"), (1.13, "1.13"), (0.5012, "0.501"), (0.000123456, "0.000123"), (99.96, "100"),
     (12345.6, "12,346"), (0.0, "0"), (-3.14159, "-3.14")],
)  # fmt: skip
def test_a_readable_number_has_three_significant_digits(value: float, shown: str) -> None:
    assert tables.readable_number(value) == shown


def test_readable_figures_rounds_decimals_in_text_and_leaves_the_rest() -> None:
    text = (
        "A decode pass: 209.63 ms (measured); 1,234.56 tokens/s, 0.50 FLOP per byte against a ridge of 10.8. "
        "Layer 15, B = 1,024, https://arxiv.org/abs/2403.02310, version 3.12.1, 2.00×."
    )
    assert tables.readable_figures(text) == (
        "A decode pass: 210 ms (measured); 1,235 tokens/s, 0.5 FLOP per byte against a ridge of 10.8. "
        "Layer 15, B = 1,024, https://arxiv.org/abs/2403.02310, version 3.12.1, 2×."
    )


def too_precise(text: str) -> list[str]:
    """Decimal figures in `text` with more than three significant digits (or a trailing zero)."""
    figures = [m.group(0) for m in tables.DECIMAL_FIGURE.finditer(text)]
    return [f for f in figures if tables.readable_figures(f) != f]


def test_a_readable_slide_rounds_every_figure_in_its_text(run: tuple[Trace, AttentionMaps]) -> None:
    trace, maps = run
    plain = all_slides(trace, maps, narrow=True)
    readable = all_slides(trace, maps, narrow=True, readable=True)
    assert any(too_precise(" ".join(s.sentences)) for s in plain)  # "12.34 ms": the test can fail
    for before, after in zip(plain, readable):
        for text in (*after.sentences, after.caption, after.more):
            assert not too_precise(text), text
        assert after.sentences == tuple(tables.readable_figures(s) for s in before.sentences)
        assert after.source == before.source and after.note == before.note  # where figures come from: as written


def test_in_presenter_mode_the_tour_shows_figures_to_three_significant_digits(
    run: tuple[Trace, AttentionMaps], no_model: None
) -> None:
    trace, maps = run
    at = open_page(PAGE, result_of(trace, maps))
    at.button(key="tour-next").click().run()  # slide 2 names the prefill's time
    normal = " ".join(m.value for m in at.markdown)
    at.button(key="tour-previous").click().run()
    at.sidebar.toggle(key=PRESENTER_KEY).set_value(True).run()
    shown: list[str] = []
    for index in range(tour.SLIDE_COUNT):
        assert_slide(at, index)
        shown += [m.value for m in at.main.columns[1].markdown]
        if index < tour.SLIDE_COUNT - 1:
            at.button(key="tour-next").click().run()
    assert shown and not [f for text in shown for f in too_precise(text)], shown
    laptop = ms(trace.prefill.wall_s)  # the prefill's time, in the first slide's sentence on a laptop: unrounded
    assert laptop in normal and (tables.readable_figures(laptop) in " ".join(shown))


def test_next_and_previous_carry_no_tooltip_and_show_no_key_on_a_touch_screen(
    run: tuple[Trace, AttentionMaps], no_model: None
) -> None:
    """A tooltip on Next covered the slide's title while the pointer rested on it: the buttons have none (each shows
    its key in it, Streamlit's shortcut badge), and a touch screen, which has no arrow keys, is not shown the keys."""
    trace, maps = run
    at = open_page(PAGE, result_of(trace, maps))
    for key in ("tour-previous", "tour-next"):
        assert at.button(key=key).help in ("", None)
        assert at.button(key=key).proto.shortcut  # the key is still bound
    styles = " ".join(getattr(h.proto, "body", "") for h in at.get("html"))
    assert TOUCH_HIDES_KEY_HINTS_CSS in styles and "(pointer: coarse)" in TOUCH_HIDES_KEY_HINTS_CSS
    assert '[data-testid="stButton"] kbd' in TOUCH_HIDES_KEY_HINTS_CSS  # the badge inside Previous and Next


def test_token_cells_hold_whole_tokens(run: tuple[Trace, AttentionMaps]) -> None:
    """Issue 42: "‹|im_st…" was cut to a fixed 80 px. A token longer than a cell holds takes as many cells as its
    text needs, no box runs past its row or into the next box, and no label has a length limit of its own."""
    trace, _ = run
    chat = replace(trace, prompt_tokens_text=("<|im_start|>", "user", "\n", "Why", " is", "<|im_end|>"))
    per_row, cell_chars = tour.NARROW_TOKENS_PER_ROW, tour.NARROW_CELL_CHARS
    frame = charts.tokens_frame(chat, max_rows=10, per_row=per_row, cell_chars=cell_chars)
    assert frame["token"].iloc[0] == "<|im_start|>" and frame["span"].iloc[0] == 2
    assert (frame["span"] * cell_chars >= frame["token"].str.len() + 1).all()
    assert (frame["column_end"] <= per_row).all()
    for _, row in frame.groupby("row"):
        assert (row["column"].iloc[1:].to_numpy() >= row["column_end"].iloc[:-1].to_numpy()).all()
    slide = tour.slide(0, tour.Run(chat, None, "", HEIGHT_PX, narrow=True))
    layers = slide.chart.to_dict()["layer"]
    text = next(layer for layer in layers if layer["mark"]["type"] == "text")
    assert "limit" not in text["mark"] and {"position", "token"} <= {t["field"] for t in text["encoding"]["tooltip"]}
    assert next(layer for layer in layers if layer["mark"]["type"] == "rect")["encoding"]["x2"]["field"] == "column_end"
