"""Step by step: one real pass per click, so a room can watch prefill and then decode happen."""

import streamlit as st

from explorer.ui import step_view, stepper
from explorer.ui.page_start import page_title
from explorer.ui.presenter import presenting
from explorer.ui.widgets import escape_markdown

page_title("Step by step")  # the sidebar's Run, if pressed, streams under the title
current = stepper.stepped()
active = current is not None
# Presenting a request under way, the first 1280 × 720 screen is for its attention map and its KV cache: the one-line
# caption stays, the locked prompt folds away (it still shows the prompt being stepped) and the pace goes below.
compact = presenting() and active
st.caption(
    "Prefill: ONE pass over every prompt token, writing the KV cache; each Next token (→): ONE decode pass."
    if compact
    else "Press Prefill: ONE pass computes every prompt token at once and writes the KV cache. Then each Next token "
    "runs ONE decode pass: one new token, reading the cache. Keys (outside the text boxes): → = next token, Home = "
    "reset."
)
shown = current.request if active else stepper.DEFAULT_STEP  # a locked form shows the request being stepped
with (
    st.expander(f"Prompt: {escape_markdown(shown.prompt[:60])}", expanded=False) if compact else st.container(),
    st.form("step-form", border=False),
):
    prompt = st.text_input("Prompt", value=shown.prompt, disabled=active)
    left, right = st.columns(2)
    new_tokens = left.number_input("Max new tokens", 1, 256, shown.max_new_tokens, disabled=active)
    template = right.toggle("Use the chat template", value=shown.use_chat_template, disabled=active)
    prefill_pressed = st.form_submit_button("Prefill", type="primary", disabled=active)
# Acted on after the form: waiting in line draws a "Leave the queue" button (a callback), which no form may hold.
if prefill_pressed and stepper.prefill(prompt, int(new_tokens), template):
    st.rerun()  # the form is drawn again, locked, above the request's first pass
# else its one-line error stays on screen (a rerun would wipe it) and the form stays usable

steps_disabled = current is None or current.done  # nothing to step, or the request has finished
buttons = st.columns(4)
if buttons[0].button(
    "Next token",
    key="step-next",
    disabled=steps_disabled,
    shortcut="Right",
    help="Key: → (right arrow). One decode pass.",
):
    stepper.step_once()
if buttons[1].button("Run to end", key="step-end", disabled=steps_disabled):
    stepper.run_to_end()
if steps_disabled:  # nothing left to play: the switch goes off, not greyed out while still on
    st.session_state["step-autoplay"] = False  # before the toggle is drawn in this run
autoplay = buttons[2].toggle("Autoplay", key="step-autoplay", disabled=steps_disabled)
if buttons[3].button(
    "Reset", key="step-reset", disabled=not active, shortcut="Home", help="Key: Home. Frees the KV cache."
):
    stepper.reset_stepping()
    st.rerun()
view_slot = st.container() if presenting() else None  # presenting: the request's view above the pace, charts first
pace_s = st.select_slider("Autoplay pace (s per pass)", [0.5, 1.0, 2.0, 3.0], value=1.0, disabled=not autoplay)

current = stepper.stepped()
if current is None or not current.passes:
    st.info("Type a prompt and press **Prefill**: one real pass on the model, then one decode pass per click.")
    st.stop()


@st.fragment(run_every=pace_s if autoplay and not current.done else None)
def live_view() -> None:
    if autoplay and not current.done and stepper.step_once() and current.done:
        st.rerun()  # the whole page, so the buttons drawn above it show the request as finished
    step_view.step_view(current)


with view_slot if view_slot is not None else st.container():
    live_view()
