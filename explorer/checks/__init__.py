"""Checks of the explorer itself: its loop against HF generate() (bench), and memory over many runs (soak)."""
