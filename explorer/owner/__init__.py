"""The device owner, the one process that runs the model on a device: its HTTP and events (`server`), its state
(`state`: the models, the figures, the warm-up, the stepped requests), a job as it runs (`job`), the line jobs wait
in (`line`), the warm-up (`warm`), how large a room one owner serves (`room_size`), and what it does for each kind of
job (`registry`: `run`, `steps`, `labs`, `room`). The web tier imports only `line` and `room_size`: no torch."""
