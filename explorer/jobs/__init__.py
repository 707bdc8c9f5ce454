"""The device owner's side: its state (`owner_state`), the line its jobs take turns in (`line`), a job as it runs
(`job`), its warm-up (`warm`), and what it does for each kind of job (`registry`: a Run, a step, a lab, a Room round).
Nothing here is imported by the web tier but the line's plain records and sentences (`line`), which need no torch."""
