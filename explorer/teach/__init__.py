"""Teaching aids read beside a run: seed 1's attention head by hand, and the quiz."""
