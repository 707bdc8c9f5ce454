"""The Tour page: eight slides through the two phases, ← and → through native shortcut buttons (each shows its key,
except on a touch screen), each slide's chart first (in presenter mode sized to lie inside a 1280 × 720 window
with its sentences beside it, its figures rounded for a room), the longer text below."""

from __future__ import annotations

import streamlit as st

from explorer.recording.pdx import RecordingMeta
from explorer.teach import tour
from explorer.ui.page_start import page_title, require_run
from explorer.ui.state import TOUR_PARAM_SEEN, TOUR_SLIDE, RunResult, current_run
from explorer.ui.widgets import chart, escape_markdown, hide_key_hints_on_touch, presenting, secondary

SLIDE_PARAM = "slide"  # ?slide=N (1-based) opens slide N; other query parameters are left as they are
PARAM_SEEN = "explorer_tour_param_seen"  # the ?slide value last applied, so a stale one does not undo a key press
# Chart heights: in presenter mode the chart's box (plot, axes, legend) must end above 720 px with the title and the
# buttons above it and the sidebar open; on a laptop the page scrolls, so the chart can be taller.
PRESENTER_HEIGHT_PX = 400
NORMAL_HEIGHT_PX = 380


def nearest_slide(raw: str) -> tuple[int, str]:
    """The 0-based slide `?slide=raw` opens, and what to say when it is not one of the tour's: the nearest slide (the
    first for a value that is not a whole number) and which slides exist."""
    try:
        number: int | None = int(raw.strip())
    except ValueError:
        number = None
    if number is not None and 1 <= number <= tour.SLIDE_COUNT:
        return number - 1, ""
    index = tour.SLIDE_COUNT - 1 if number is not None and number > tour.SLIDE_COUNT else 0
    asked = f"slide {number}" if number is not None else f"“{raw[:24]}”, not a slide number"
    return index, f"The tour has slides 1–{tour.SLIDE_COUNT}: opened slide {index + 1} (the link asked for {asked})."


def slide_from_query() -> int | None:
    """The 0-based slide a ?slide=N link asks for, once per new value; None when absent or unchanged. A value outside
    the tour opens the nearest slide, says so and which slides exist, and the link then names the slide it shows."""
    raw = st.query_params.get(SLIDE_PARAM)
    if raw is None or raw == TOUR_PARAM_SEEN.get():
        return None
    wanted, said = nearest_slide(raw)
    if said:
        st.toast(escape_markdown(said), icon=":material/info:", duration="long")  # the link's own text: escaped
        raw = str(wanted + 1)
        st.query_params[SLIDE_PARAM] = raw
    TOUR_PARAM_SEEN.set(raw)
    return wanted


def current_slide() -> int:
    wanted = slide_from_query()
    if wanted is not None:
        TOUR_SLIDE.set(wanted)
    return min(max(0, int(TOUR_SLIDE.get() or 0)), tour.SLIDE_COUNT - 1)


def move(step: int) -> None:
    """A button's callback: runs before the script, so the slide it leads to is drawn in the same rerun."""
    index = min(max(0, current_slide() + step), tour.SLIDE_COUNT - 1)
    TOUR_SLIDE.set(index)
    st.query_params[SLIDE_PARAM] = str(index + 1)  # a link to this slide; other parameters are untouched
    TOUR_PARAM_SEEN.set(str(index + 1))


def navigation(index: int, recorded: RecordingMeta | None) -> None:
    """← Previous and Next →, each bound to its arrow key (outside text boxes), where the talk is, and a recording's
    name, device and date (its full banner is drawn too)."""
    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        st.button(
            "← Previous",
            key="tour-previous",
            shortcut="Left",
            disabled=index == 0,
            on_click=move,
            args=(-1,),
        )
        st.button(
            "Next →",
            key="tour-next",
            shortcut="Right",
            disabled=index == tour.SLIDE_COUNT - 1,
            on_click=move,
            args=(1,),
        )
        where = f"Tour: slide {index + 1} of {tour.SLIDE_COUNT}"
        if recorded is not None:  # the file's own words: escaped
            where += escape_markdown(
                f" · recorded run “{recorded.name}” on {recorded.device}, {recorded.recorded_at[:10]}"
            )
        st.caption(where)
    # The arrow keys are said on the buttons themselves (Streamlit draws a button's shortcut in it), not in a tooltip:
    # one on Next covered the slide's title while the pointer rested on it. A touch screen has no arrow keys.
    hide_key_hints_on_touch()


def show_tour() -> None:
    """The page: the slide's title and buttons, then (with a run) its chart and sentences, then the longer text.

    In presenter mode a recording's banner goes below the slide, not above it: above, its few lines would push the
    chart out of a 1280 × 720 window. The slide still says so first: the caption under the title names the
    recording, and every figure in its sentences is called recorded."""
    index = current_slide()
    page_title(tour.TITLES[index])
    run = current_run()
    navigation(index, run.recorded if run is not None else None)
    if presenting():
        slide_area = st.container()
        result = require_run()  # the hint without a run; a recording's banner, under the slide
        with slide_area:
            show_slide(index, result)
    else:
        show_slide(index, require_run())


def show_slide(index: int, result: RunResult) -> None:
    on_stage = presenting()
    run = tour.Run(
        trace=result.trace,
        maps=result.attention,
        attention_note=result.attention_note,
        height_px=PRESENTER_HEIGHT_PX if on_stage else NORMAL_HEIGHT_PX,
        measured="recorded" if result.recorded is not None else "measured",
        narrow=on_stage,
        capture_cut_short=result.capture_cut_short,  # capture on, its replay cut short by a click: slide 2 says so
        readable=on_stage,  # figures a room can read: 3 significant digits
    )
    slide = tour.slide(index, run)
    if on_stage:  # the chart first, its sentences beside it: both inside the first screen
        left, right = st.columns([3, 2], gap="medium")
        with right:
            for sentence in slide.sentences:
                st.markdown(sentence)  # numbers and fixed words only
        with left:
            draw_chart(slide)
    else:
        for sentence in slide.sentences:
            st.markdown(sentence)
        draw_chart(slide)
    with secondary("More on this slide"):
        st.markdown(slide.more)  # numbers and fixed words only
        if slide.note:
            st.text(slide.note)  # text, not markdown: a recording file's own words


def draw_chart(slide: tour.Slide) -> None:
    chart(slide.chart, slide.frame, f"tour-{slide.index + 1}", slide.caption, slide.source)
