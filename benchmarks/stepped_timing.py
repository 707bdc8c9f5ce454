"""Stepped passes against a Run's, on the real model in one process: are stepped passes timed as cleanly?

Three comparisons, each printed with its medians and their ratio:
- decode: a normal Run's decode passes (`explorer.core.measure.measure`) against the same prompt stepped with
  `SteppedRequest` (prefill, then `--passes` decodes) with a pause between clicks, as a presenter leaves between them
  (`--busy` keeps both cores busy during each pause: a page redraw in a browser on the same machine), each stepped
  pass after its warm twin (as the device owner steps it) and, interleaved, without one: whether the twin is needed;
- room: `--room K` requests stepped round-robin, each click right after another session's, against the Run's decode
  passes: what a room's passes cost;
- prefill: `--rounds` Run prefills against stepped prefills of the same prompt, interleaved: the stepped one with its
  warm twin (as Step mode runs it) and without.
Usage: python benchmarks/stepped_timing.py [--pause-s 2] [--busy] [--passes 8] [--room 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

from explorer.core.device import FiguresStore
from explorer.core.engine import Request, check_request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure
from explorer.labs.step_mode import SteppedRequest
from explorer.models.loading import load_model

PROMPT = "Explain in one sentence why the sky is blue."
STEP_PROMPT = "What is the capital of France?"  # the Step page's default, as the Run's default is PROMPT


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


def line(name: str, ms: list[float], reference_ms: float | None = None) -> str:
    median = statistics.median(ms)
    ratio = f", ratio {median / reference_ms:.2f}" if reference_ms else ""
    return f"{name:<28} median {median:7.1f} ms{ratio}  {[round(v, 1) for v in ms]}"


def decode(lm: LoadedModel, figures: FiguresStore, args: argparse.Namespace) -> float:
    request = Request(PROMPT, max_new_tokens=args.passes + 1)
    run_ms = [p.wall_s * 1e3 for p in measure(lm, request, figures).decodes]
    twin = SteppedRequest.start(lm, check_request(lm, request), figures=figures)
    alone = SteppedRequest.start(lm, check_request(lm, request), figures=figures)
    twin.step()
    alone.step()
    stepped_ms, alone_ms = [], []
    for _ in range(args.passes):
        pause(args.pause_s, args.busy)
        stepped_ms.append(twin.step().wall_s * 1e3)
        pause(args.pause_s, args.busy)
        alone.live.clock.resume()
        alone_ms.append(alone.live.step().wall_s * 1e3)  # the same pass without its twin
        alone.live.clock.pause()
    print(line("run decode", run_ms))
    busy = ", cores busy meanwhile" if args.busy else ""
    print(line(f"stepped decode (pause {args.pause_s} s{busy})", stepped_ms, statistics.median(run_ms)))
    print(line("  the same, no warm twin", alone_ms, statistics.median(run_ms)))
    return statistics.median(run_ms)


def room(lm: LoadedModel, figures: FiguresStore, sessions: int, passes: int, run_ms: float) -> None:
    requests = [
        SteppedRequest.start(
            lm, check_request(lm, Request(f"{PROMPT} ({i})", max_new_tokens=passes + 1)), figures=figures
        )
        for i in range(sessions)
    ]
    for r in requests:
        r.step()  # the prefills
    decode_ms = [r.step().wall_s * 1e3 for _ in range(passes) for r in requests]
    print(line(f"room of {sessions}, round-robin", decode_ms, run_ms))


def prefills(lm: LoadedModel, figures: FiguresStore, rounds: int) -> None:
    for prompt in (PROMPT, STEP_PROMPT):
        request = Request(prompt, max_new_tokens=1)
        checked = check_request(lm, request)
        run_ms, twin_ms, cold_ms = [], [], []
        for _ in range(rounds):
            run_ms.append(measure(lm, request, figures).prefill.wall_s * 1e3)
            twin_ms.append(SteppedRequest.start(lm, checked, figures=figures).step().wall_s * 1e3)
            cold = SteppedRequest.start(lm, checked, figures=figures)
            cold.live.clock.resume()
            cold_ms.append(cold.live.step().wall_s * 1e3)  # no twin: right after the stepped one
        print(f"prefill of {len(checked.prompt_ids)} tokens ({prompt!r}):")
        print(line("  run", run_ms))
        print(line("  stepped, warm twin first", twin_ms, statistics.median(run_ms)))
        print(line("  stepped, no twin", cold_ms, statistics.median(run_ms)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pause-s", type=float, default=2.0)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--room", type=int, default=0, help="also step this many requests round-robin")
    parser.add_argument("--rounds", type=int, default=0, help="also compare this many prefills, Run against Step")
    args = parser.parse_args()
    lm = load_model("embedded", device="cpu", dtype="float32")
    figures = FiguresStore()
    run_ms = decode(lm, figures, args)
    if args.room:
        room(lm, figures, args.room, args.passes, run_ms)
    if args.rounds:
        prefills(lm, figures, args.rounds)


if __name__ == "__main__":
    main()
