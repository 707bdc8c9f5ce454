"""Teaching aids read beside a run: a tiny attention head by hand, and the quiz."""
