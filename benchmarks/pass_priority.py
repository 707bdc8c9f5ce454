"""A holder's priority beside busy processes (`explorer.hosting.pass_priority`): stepped decode passes of the embedded
model on one intra-op thread, timed while `--busy` processes spin on the cores, in rounds at nice 0 and at the raised
priority, alternately; medians per priority and their ratio. Where raising is not permitted it says so and times
nice 0 only. A benchmark to read, not a timed test: `python benchmarks/pass_priority.py [--busy 6] [--passes 10]`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402

from explorer.core.engine import Request, check_request  # noqa: E402
from explorer.core.loaded_model import LoadedModel  # noqa: E402
from explorer.hosting.pass_priority import PassPriority  # noqa: E402
from explorer.labs.step_mode import SteppedRequest  # noqa: E402
from explorer.models.loading import load_model  # noqa: E402

PROMPT = "What is the capital of France? Tell me more."


def spin() -> None:
    while True:
        pass


def stepped_decodes_ms(lm: LoadedModel, passes: int, pause_s: float) -> list[float]:
    request = Request(PROMPT, max_new_tokens=passes + 1, stop_at_eos=False)
    stepped = SteppedRequest.start(lm, check_request(lm, request))
    try:
        stepped.step()
        found = []
        for _ in range(passes):
            time.sleep(pause_s)
            found.append(stepped.step().wall_s * 1e3)
        return found
    finally:
        stepped.free()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=6, help="processes spinning on the cores meanwhile")
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as a turn runs on a busy machine (explorer.hosting.pass_threads)
    lm = load_model("embedded", device="cpu", dtype="float32")
    alone = stepped_decodes_ms(lm, args.passes, 0.2)
    print(f"alone: median {statistics.median(alone):.1f} ms")
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    try:
        found: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            found.setdefault("nice 0", []).extend(stepped_decodes_ms(lm, args.passes, 0.2))
            with PassPriority().raised() as nice:
                if nice is None:
                    print("raising the priority is not permitted here: nice 0 only")
                    continue
                found.setdefault(f"nice {nice}", []).extend(stepped_decodes_ms(lm, args.passes, 0.2))
    finally:
        for p in spinners:
            p.terminate()
    base = statistics.median(found["nice 0"])
    for name, ms in found.items():
        median = statistics.median(ms)
        print(f"beside {args.busy} busy processes, {name}: median {median:.1f} ms ({median / base:.2f}x nice 0)")


if __name__ == "__main__":
    main()
