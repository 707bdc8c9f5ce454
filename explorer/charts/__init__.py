"""Pure chart builders, one module per page: `*_frame(...)` turns a Trace into the table behind a chart (also offered
as a download), `*_chart(frame)` turns that table into an Altair chart. No Streamlit, no torch."""
