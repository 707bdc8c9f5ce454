"""At scale's calibrated column: the what-if's datasheet floors beside the same floors scaled by how far this
machine's last run landed from its own (`explorer.scale.calibrated`)."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
import streamlit as st

from explorer.scale.calibrated import CALIBRATED, calibrate, efficiency_of
from explorer.scale.whatif import WhatIf
from explorer.ui.state import RunResult
from explorer.ui.widgets import escape_markdown, table


def calibrated_section(result: WhatIf, run: RunResult | None) -> None:
    """The what-if's decode step, tokens/s ceiling and prefill: modelled at the datasheet's peaks, and calibrated by
    the last run's measured / floor; nothing without a run (the section above says how to make one)."""
    if run is None:
        return
    calibrated = calibrate(result, efficiency_of(run.trace))
    s, e = result.scenario, calibrated.efficiency
    frame = pd.DataFrame([asdict(row) for row in calibrated.rows]).rename(
        columns={
            "modelled": f"what-if: {s.gpu.name}, {s.dtype} (modelled, datasheet)",
            "calibrated": f"{CALIBRATED} by this machine (an assumption)",
            "factor": "factor applied (measured here / modelled floor here)",
        }
    )
    table(
        frame,
        f"The what-if's floors scaled by how far the last run on {escape_markdown(e.device)} landed from its own "
        "floors: what the GPU would give if its kernels were as far from their floor as this machine's are (they "
        "differ: a GPU's launch overhead and kernels are its own).",
        "modelled · factor measured here · calibrated = modelled x factor",
    )
    if e.decode_factor is None:
        st.caption("The last run made one token: only its prefill calibrates the what-if.")
