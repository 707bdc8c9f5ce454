"""Tour: eight slides through prefill and decode, each one chart and one or two sentences from the current run."""

from explorer.ui import tour_view

tour_view.show_tour()
