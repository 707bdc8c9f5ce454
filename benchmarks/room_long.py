"""One Room round of long prompts ("everyone send a long prompt now"), through a device owner as the Room page sends
it, on the embedded model: every prompt made long and arriving in turn, served whole and again with prefill chunked;
prints each person's TPOT and longest gap between tokens against the TPOT SLO, served both ways and alone, and the
round's sentence. A measurement to read and date (docs/measurements.md), not a timed test:
`python benchmarks/room_long.py --people 4 --long-tokens 1024 --chunk-budget 128` from the repository root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the owner and the model come from this checkout

from explorer.core.units import short_time  # noqa: E402
from explorer.labs.room_records import RoomRound, RoundAsk, RoundPrompt  # noqa: E402
from tests.owner_support import OwnerInThread  # noqa: E402

PROMPTS = (
    "Summarize the passage in one sentence.",
    "Which sentence of the passage is about bees?",
    "Name one thing the passage says about bread.",
    "What does the passage say about tides?",
    "List two inventions the passage mentions.",
    "Which ocean does the passage name?",
    "What is a violin made of, says the passage?",
    "Where was coffee first brewed?",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=4)
    parser.add_argument("--long-tokens", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--chunk-budget", type=int, default=128)
    parser.add_argument("--tpot-slo-ms", type=float, default=50.0, help="the session's reference TPOT SLO")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", type=Path, help="write the round's record here")
    args = parser.parse_args()
    prompts = tuple(RoundPrompt(k + 1, PROMPTS[k % len(PROMPTS)]) for k in range(args.people))
    ask = RoundAsk("BENCH", 1, prompts, args.new_tokens, True, None, args.long_tokens, args.chunk_budget)
    body = {"model": args.model, "device": args.device, "dtype": args.dtype, "round": ask.to_dict()}
    owner = OwnerInThread()
    try:
        last = list(owner.client().job("room", body))[-1]
    finally:
        owner.stop()
    if last.name != "done":
        raise SystemExit(f"The round did not run: {last.data}")
    run = RoomRound.from_dict(last.data)
    if args.json:
        args.json.write_text(run.to_json())
    slo_s = args.tpot_slo_ms / 1e3
    print(f"{run.model} · {run.dtype} on {run.device} · transformers {run.transformers_version}")
    print(f"1-minute load average as it finished: {run.load_avg_1m}")
    print("person  serving       budget  prompt  TTFT      TPOT      longest gap  TPOT alone  past SLO  pushed")
    for mark in run.tpot_marks(slo_s):
        lane = run.lane_of(mark.participant)
        assert lane is not None
        print(
            f"{mark.participant:<7} {mark.serving:<13} {mark.budget:<7} {lane.prompt_tokens:<7} "
            f"{short_time(mark.ttft_s):<9} {short_time(mark.tpot_s):<9} "
            f"{short_time(mark.longest_gap_s):<12} {short_time(mark.alone_tpot_s):<11} {mark.past_slo!s:<9} "
            f"{mark.pushed}"
        )
    print(run.tpot_sentence(slo_s))
    print(f"Steps: {len(run.steps)} whole, {len(run.chunked_steps)} chunked; same tokens alone: {run.all_same_tokens}")


if __name__ == "__main__":
    main()
