"""Recordings: a finished run written to one file and read back with no model loaded (the `.pdx` format, its bounds
and its checks), and a run exported as a Perfetto timeline."""
