"""How a page starts: a Run pressed in the sidebar, executed at its top, then its title and the run it shows;
without a run, the prompt and Run where the visitor is looking, and with a recording, the banner that says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from explorer.charts.step_mode import disturbed_sentence
from explorer.core.device_profile import DeviceProfile
from explorer.core.errors import BadInput
from explorer.core.figure_trust import figures_line
from explorer.core.trace import Trace
from explorer.recording.pdx import RecordingMeta
from explorer.ui.chart_first import ChartFirst
from explorer.ui.runner import execute_run
from explorer.ui.sidebar import sidebar_downloads, sidebar_inputs, sidebar_prompt
from explorer.ui.state import PROMPT_TYPED, RunInputs, RunResult, Slot, current_run
from explorer.ui.widgets import escape_markdown, presenting

NO_RUN_YET = (
    "No run yet: run this prompt on the real model (every pass timed as it runs), or open a recording in the sidebar."
)


# --- a Run pressed in the sidebar ----------------------------------------------------------------------------------
def run_if_asked(inputs: RunInputs | None) -> RunResult | None:
    """The sidebar's Run, executed in the script run its click started, at the top of the page (its tokens stream
    there), then the sidebar's downloads of the current run, so they are never one run behind. The page below is drawn
    with the new run."""
    result = None if inputs is None else execute_run(inputs)
    sidebar_downloads()
    return result


def page_title(title: str) -> None:
    """The page's title: nothing else (no page title ever runs the model)."""
    st.title(title)


# --- without a run: the prompt and Run where the visitor is looking --------------------------------------------------
def run_here(key: str, lead: str = NO_RUN_YET) -> None:
    """`lead`, the sidebar's prompt in a box and Run, in the page itself. Pressed: the run streams right below, with the
    sidebar's other settings, the sidebar's box then shows this prompt, and the page is drawn again with the run."""
    st.info(lead)
    with st.form(f"run-here-{key}", border=False):
        prompt = st.text_area("Prompt", value=sidebar_prompt(), height=90, key=f"run-here-{key}-prompt")
        pressed = st.form_submit_button("Run", type="primary", key=f"run-here-{key}-run")
    # Acted on after the form: waiting in line draws a "Leave the queue" button (a callback), which no form may hold.
    if pressed and execute_run(sidebar_inputs(prompt)) is not None:
        PROMPT_TYPED.set(prompt)
        st.rerun()


def require_run(key: str = "page") -> RunResult:
    """The current run; without one, the prompt and Run (`run_here`) and the page stops here (it has nothing else to
    draw)."""
    run = current_run()
    if run is None:
        run_here(key)
        st.stop()
    if run.recorded is not None:
        recorded_banner(run.recorded)
    if run.trace.model.random_weights:
        shape_banner(run.trace)
    under_load_warning(run.trace.device)
    disturbed = disturbed_sentence(run.trace.passes)
    if disturbed:  # never a disturbed timing shown as a clean one, on any page that draws this run
        st.caption(f"⚠ {disturbed}")
    return run


def under_load_warning(device: DeviceProfile) -> None:
    """The page's one line that its device figures were taken under load, near its top; nothing when they look sound.
    Said once here, so every bound and ridge below is stated plainly rather than marked inside each sentence."""
    line = figures_line(device)
    if line:
        st.warning(escape_markdown(line), icon=":material/speed:")  # a recording's figures note is anyone's text


def shape_banner(trace: Trace) -> None:
    """Above every page that shows a shape model's run: its tokens are noise, its timings and bytes are not."""
    m = trace.model
    st.warning(f"**Shape model** ({escape_markdown(m.display_name)}): {m.shape_note}.", icon=":material/shape_line:")


def recorded_banner(meta: RecordingMeta) -> None:
    """Above every page that shows a recording: what it is, that it is recorded, where and when (when presenting, only
    that: two lines at most, so a page's main chart stays in the first screen)."""
    more = "" if presenting() else " · every figure was measured then. **Run** in the sidebar makes a live run."
    st.warning(escape_markdown(meta.banner) + more, icon=":material/videocam:")


def page_with_run(title: str, caption: str) -> RunResult:
    """A page's title and what to notice, then the current run (the page stops here without one)."""
    page_title(title)
    st.caption(caption)
    return require_run()


def chart_first_page(title: str, caption: str, more: str = "") -> tuple[RunResult, ChartFirst]:
    """A "One request" page's title and caption, its run (the page stops here without one) and its slots. On a laptop
    the caption says all of it; when presenting it is the one line `caption`, and `more` goes below the main chart."""
    result = page_with_run(title, f"{caption} {more}" if more and not presenting() else caption)
    layout = ChartFirst()
    if more and layout.below is not None:
        layout.below.caption(more)
    return result, layout


def lab_page(
    title: str, caption: str, inputs: Callable[[Any], object], key: Slot[object], hint: str, recorded: str | None = None
) -> Any:
    """A lab page's title, what to notice and its inputs, then the result the session keeps under `key`. Without
    one, the lab's bundled result `recorded` (`explorer.labs.bundled`) under a banner saying it is recorded and that
    `hint`'s button replaces it; without that either, `hint` and the page stops here (a lab runs only when its button
    is pressed, never on a view change). A bundled file that cannot be read is one line. The inputs are given the
    result shown under them (None without one), so the form shows the parameters that made it, not its defaults."""
    from explorer.labs import bundled

    page_title(title)
    st.caption(caption)
    result = st.session_state.get(key)
    shown, problem = None, None
    if result is None and recorded is not None:
        try:
            shown = bundled.read(recorded)
        except BadInput as exc:
            problem = str(exc)
    inputs(result if result is not None else shown.result if shown is not None else None)
    fresh = st.session_state.get(key)
    if fresh is not None and fresh is not result:  # the inputs just ran the lab: show its result, not the older one
        return fresh
    if problem is not None:
        st.caption(escape_markdown(problem))
    if shown is not None:
        st.info(f"{shown.banner} {hint} A live result replaces this recorded one.", icon=":material/history:")
        return shown.result
    if result is None:
        st.info(hint)
        st.stop()
    return result
