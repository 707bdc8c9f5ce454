"""Step by step: one real pass per click, so a room can watch prefill and then decode happen."""

import streamlit as st

from explorer.ui import step_mode, step_mode_view
from explorer.ui.page_start import page_title
from explorer.ui.presenter import presenting
from explorer.ui.widgets import escape_markdown, hide_key_hints_on_touch, key_hint

page_title("Step by step")  # the sidebar's Run, if pressed, streams under the title
current = step_mode.stepped()
active = current is not None
# Presenting a request under way, the first 1280 × 720 screen is for its newest pass, its attention row and its KV
# cache: the one-line caption stays, the locked prompt folds away (it still shows the prompt being stepped).
compact = presenting() and active
st.caption(
    "Prefill: ONE pass over every prompt token, writing the KV cache; each Next token: ONE decode pass."
    if compact
    else "Press Prefill: ONE pass computes every prompt token at once and writes the KV cache. Then each Next token "
    "runs ONE decode pass: one new token, reading the cache."
)
shown = current.request if active else step_mode.DEFAULT_STEP
# A locked form shows the request being stepped; a free one what was typed last (the defaults at first). Set through
# the widgets' keys before they are drawn: a keyed widget keeps its state when its default changes.
for key, value in (
    ("step-prompt", shown.prompt),
    ("step-new-tokens", shown.max_new_tokens),
    ("step-template", shown.use_chat_template),
):
    if active or key not in st.session_state:
        st.session_state[key] = value
with (
    st.expander(f"Prompt: {escape_markdown(shown.prompt[:60])}", expanded=False) if compact else st.container(),
    st.form("step-form", border=False),
):
    # No `value=`: the keys above hold it (a default beside a set key draws Streamlit's warning in the server log).
    prompt = st.text_input("Prompt", disabled=active, key="step-prompt")
    left, right = st.columns(2)
    new_tokens = left.number_input("Max new tokens", 1, 256, disabled=active, key="step-new-tokens")
    template = right.toggle("Use the chat template", disabled=active, key="step-template")
    prefill_pressed = st.form_submit_button("Prefill", type="primary", disabled=active, key="step-prefill")
# Acted on after the form: waiting in line draws a "Leave the queue" button (a callback), which no form may hold.
if prefill_pressed and step_mode.start_request(prompt, int(new_tokens), template):
    st.rerun()  # the form is drawn again, locked, above the request's first pass
# else its one-line error stays on screen (a rerun would wipe it) and the form stays usable

autoplay = bool(st.session_state.get("step-autoplay")) and current is not None and not current.done
pace_s = float(st.session_state.get("step-pace", 1.0))


# A click on Next token (or →) reruns this fragment alone: its buttons and the request's view, not the sidebar, the
# form or the page around them, so the new row is drawn a pass and a view's drawing after the key.
@st.fragment(run_every=pace_s if autoplay else None)
def stepping() -> None:
    current = step_mode.stepped()
    steps_disabled = current is None or current.done  # nothing to step, or the request has finished
    if steps_disabled:
        st.session_state["step-autoplay"] = False  # a finished request stops autoplay (before its switch is drawn)
    # One row at any width, a phone's 390 px too (columns stack below 640 px, and each new pass's line then landed at
    # the bottom of the screen): the row wraps only where it cannot fit, and the keys' hint is hidden on a touch screen.
    with st.container(horizontal=True, gap="xsmall", vertical_alignment="center", key=step_mode_view.BUTTONS_KEY):
        next_pressed = st.button(
            "Next token",
            key="step-next",
            disabled=steps_disabled,
            shortcut="Right",
            help="Key: → (right arrow). One pass.",
        )
        end_pressed = st.button("Run to end", key="step-end", disabled=steps_disabled)
        playing = st.toggle("Autoplay", key="step-autoplay", disabled=steps_disabled)
        reset_pressed = st.button(
            "Reset", key="step-reset", disabled=current is None, shortcut="Home", help="Key: Home. Frees the KV cache."
        )
        if presenting():  # the buttons' own key badges say it: the large type leaves the row no room for more
            hide_key_hints_on_touch()
        else:
            key_hint("Keys (outside the text boxes): → = next token, Home = reset.", "step")
    if reset_pressed:
        step_mode.reset_step_mode()
        st.rerun()  # the whole page: the form unlocks
    if playing != autoplay:
        st.rerun()  # the whole page: the fragment's timer starts or stops with it
    stepped_now = (next_pressed or playing) and step_mode.step_once()
    if end_pressed:
        step_mode.run_to_end()
    current = step_mode.stepped()
    if current is not None and current.done and (stepped_now or end_pressed):
        st.rerun()  # the whole page, so the sidebar offers the finished request as the session's run
    if current is None or not current.passes:
        st.info("Type a prompt and press **Prefill**: one real pass on the model, then one decode pass per click.")
        return
    step_mode_view.step_view(current)


stepping()
st.select_slider("Autoplay pace (s per pass)", [0.5, 1.0, 2.0, 3.0], value=1.0, key="step-pace", disabled=not autoplay)
