"""Stepped decode passes against a Run's, on the real model in one process: are stepped passes timed as cleanly?

Times a normal Run's decode passes (`explorer.core.measure.measure`), then steps the same prompt with
`SteppedRequest` (prefill, then 8 decodes) with a pause between clicks, as a presenter leaves between them, and prints
the medians and their ratio. `--busy` keeps both cores busy during each pause (a page redraw in the browser on the same
machine). Usage: python benchmarks/stepped_timing.py [--pause-s 2] [--busy] [--passes 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

from explorer.core.engine import Request, check_request
from explorer.core.loading import load_model
from explorer.core.measure import measure
from explorer.labs.stepping import SteppedRequest

PROMPT = "Explain in one sentence why the sky is blue."


def burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def pause(seconds: float, busy: bool) -> None:
    if not busy:
        time.sleep(seconds)
        return
    workers = [multiprocessing.Process(target=burn, args=(seconds,)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pause-s", type=float, default=2.0)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--passes", type=int, default=8)
    args = parser.parse_args()
    lm = load_model("embedded", device="cpu", dtype="float32")
    request = Request(PROMPT, max_new_tokens=args.passes + 1)
    run = measure(lm, request)
    run_ms = [p.wall_s * 1e3 for p in run.decodes]
    stepped = SteppedRequest.start(lm, check_request(lm, request))
    prefill = stepped.step()
    stepped_ms = []
    for _ in range(args.passes):
        pause(args.pause_s, args.busy)
        stepped_ms.append(stepped.step().wall_s * 1e3)
    run_median, step_median = statistics.median(run_ms), statistics.median(stepped_ms)
    print(f"prefill (stepped) {prefill.wall_s * 1e3:.1f} ms")
    print(f"run decode ms     {[round(v, 1) for v in run_ms]}")
    print(f"stepped decode ms {[round(v, 1) for v in stepped_ms]}")
    print(
        f"median: run {run_median:.1f} ms, stepped {step_median:.1f} ms, ratio {step_median / run_median:.2f} "
        f"(pause {args.pause_s} s{', cores busy meanwhile' if args.busy else ''})"
    )


if __name__ == "__main__":
    main()
