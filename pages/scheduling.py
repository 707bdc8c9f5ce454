"""Serving lab 2: a workload served by transformers' continuous batching engine, step by step, against the baselines."""

from explorer import ui
from explorer.ui import scheduling as sections

run = ui.lab_page(
    "Scheduling: continuous batching, step by step",
    "A server runs one forward pass per step over every request it has admitted: some need their prompt computed "
    "(prefill), the others one new token each (decode). transformers' continuous batching engine decides who joins "
    "each step, splits long prompts to fit a token budget, keeps the KV cache in fixed-size blocks, and reuses the "
    "blocks of a shared prefix. This page runs it on the real model and records every step.",
    sections.workload_form,
    sections.SCHEDULE_RUN,
    "No scheduling run yet: set a workload above and press **Run** (the defaults take about a minute).",
    "schedule",  # the bundled result shown until Run replaces it (recordings/labs/)
)

sections.steps_section(run)  # the main chart first
sections.summary_section(run)
sections.other_views(run)
