"""Room: everyone's prompt served together as one batch on the real model, each person's request inside the steps."""

import streamlit as st

from explorer.ui import room_view

st.title("Room: the room is the batch")
st.caption(
    "Everyone types a prompt; the presenter starts the round; the server runs all of them together through "
    "transformers' continuous batching, one forward pass per step for everyone in it, then each prompt alone. "
    "Notice how little a step slows down when more people ride in it: it reads the weights once for all of them."
)
room = room_view.current_room()
if room is None:
    room_view.open_or_join()
    st.stop()
room_view.room_header(room)
room_view.prompt_panel(room)  # a participant's first screen: who they are, then their prompt box
room_view.room_footer(room)
room = room_view.presenter_panel(room)  # read again after a start that did not finish
room_view.live_line(room)
room_view.results(room)
