"""Pure builders for what a page draws, one module per page: `*_frame(...)` turns a Trace into the table behind a
chart (also offered as a download), `*_chart(frame)` turns that table into an Altair chart, and a page's computed
sentences and tables come from the same figures; beside them what every page shares: colours and vocabulary
(`common`), readable tables (`tables`), the themes (`theme`) and image export (`export`). No Streamlit, no torch.
Importing it keeps Altair's schema table once per process, hashes a layer's data by content and validates each spec
shape once (`altair_speed`): every chart's shorthand channels and layers build several times faster, and draw without
a schema check each time."""

from explorer.charts.altair_speed import cache_schema_table, hash_layer_data_by_content, validate_each_shape_once

cache_schema_table()
hash_layer_data_by_content()
validate_each_shape_once()
