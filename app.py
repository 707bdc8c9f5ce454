"""Prefill–Decode Explorer: the router. Page config, the shared sidebar (and the run it starts), navigation."""

import streamlit as st

from explorer import ui
from explorer.ui.device_link import device_route
from explorer.ui.links import every_link_lands
from explorer.ui.memory import cap_malloc_arenas
from explorer.ui.warm_start import warm_lifespan

st.set_page_config(page_title="Prefill–Decode Explorer", page_icon="⏱", layout="wide")

pages = {
    "One request": [
        st.Page("pages/run.py", title="Inside one inference", default=True),
        st.Page("pages/attention.py", title="Attention"),
        st.Page("pages/kv_cache.py", title="KV cache"),
        st.Page("pages/cost.py", title="Cost (roofline)"),
        st.Page("pages/latency.py", title="Latency"),
        st.Page("pages/compare.py", title="Compare two runs"),
    ],
    "Talk": [st.Page("pages/tour.py", title="Tour")],  # after the default page's section, which opens on a run
    "Workshop": [
        st.Page("pages/step.py", title="Step by step"),
        st.Page("pages/by_hand.py", title="By hand"),
        st.Page("pages/check_yourself.py", title="Check yourself"),
        st.Page("pages/room.py", title="Room"),
    ],
    "Serving": [
        st.Page("pages/nocache.py", title="Without a KV cache"),
        st.Page("pages/batching.py", title="Batching"),
        st.Page("pages/scheduling.py", title="Scheduling"),
        st.Page("pages/endpoint.py", title="Endpoint"),
        st.Page("pages/at_scale.py", title="At scale"),
    ],
}
if __name__ != "__main__":  # `streamlit run app.py` imports this file once, as the server (st.App): it warms up
    cap_malloc_arenas()  # before the sessions' threads, each of which would keep an arena (explorer/ui/memory.py)
    ui.route_every_link_through_the_app()  # a deep link on a fresh server runs this router, not the page file alone
    # It warms up at start (explorer/ui/warm_start.py) and sends a path of several segments where it lands
    # (explorer/ui/links.py); sessions run this file as __main__.
    app = st.App(__file__, lifespan=warm_lifespan, middleware=every_link_lands(), routes=[device_route()])
else:
    navigation = st.navigation(pages, expanded=True)  # all pages listed, not the first ten
    with ui.one_line_errors("sidebar"):  # an unexpected error is one line here, its traceback in the server log
        ui.presenter_toggle()
        ui.open_from_link()  # /?recording=NAME on any page: a talk's slide links straight to a view
        asked = ui.sidebar()
        ui.recordings_sidebar()
        ui.remeasure_button()
    with ui.one_line_errors("run"):
        ui.run_if_asked(asked)  # in the click's own script run, at the page's top; then the sidebar's downloads
    with ui.one_line_errors("page"):
        navigation.run()
