"""Tables a room can read: a static table in large type in presenter mode, the scrollable data grid on a laptop.

Why not one `st.dataframe` for both: the grid draws its cells on a canvas, which no stylesheet reaches, so its type
stays small on a projector; a static table is HTML, which the presenter stylesheet enlarges.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.ui.widgets import current_theme, presenting, table


def readable_table(data: pd.DataFrame, caption: str, source: str) -> None:
    """`widgets.table` on a laptop; in presenter mode the first rows only, as a static table in the large type."""
    if not presenting():
        table(data, caption, source)
        return
    rows = current_theme().table_rows
    shown = data if rows is None else data.head(rows)
    st.table(shown, hide_index=True)
    more = (
        f" · the first {len(shown)} of {len(data)} rows (presenter mode off shows all)"
        if len(shown) < len(data)
        else ""
    )
    st.caption(f"{caption} — *{source}*{more}")
