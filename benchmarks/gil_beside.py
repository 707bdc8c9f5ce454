"""A decode pass of the embedded model timed alone and beside threads running Python (as a server's page scripts do),
at several interpreter switch intervals: what `explorer.hosting.passes_first` is for.

1. For each interval, the median of `--passes` decode passes (after a prefill of `--prompt-tokens` tokens) alone,
   then beside 1 and `--threads` threads running a pure-Python loop.
2. A server with its browsers elsewhere: one session steps a request (`SteppedRequest`: after a presenter's pause its
   warm twin, then its pass, both inside the server's gate) while `--threads` other threads build the Step page's ITL
   chart in a loop, first through the same gate (as the app draws charts), then outside it (as a page's other Python
   work runs); each click's held time and timed pass, with the default interval and with `PASSES_FIRST` held around
   each click (as `explorer.ui.device_turn.device_turn` holds it), alternated twice.
A benchmark to read, not a timed test: `python benchmarks/gil_beside.py [--passes 6] [--threads 3]` from the
repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the app's code comes from this checkout

import torch  # noqa: E402

import explorer.charts  # noqa: E402, F401 - Altair's speed-ups, as the app has them
from explorer.charts.step_mode import step_itl_chart, step_itl_frame  # noqa: E402
from explorer.core.device import FiguresStore  # noqa: E402
from explorer.core.engine import Request, check_request, decode_one_token, new_cache, prefill  # noqa: E402
from explorer.core.loaded_model import LoadedModel  # noqa: E402
from explorer.core.measure import measure  # noqa: E402
from explorer.core.trace import Trace  # noqa: E402
from explorer.hosting.passes_first import PASS_SWITCH_INTERVAL_S, PASSES_FIRST  # noqa: E402
from explorer.hosting.quiet import PassGate  # noqa: E402
from explorer.labs.step_mode import SteppedRequest  # noqa: E402
from explorer.models.loading import load_model  # noqa: E402

PAUSE_S = 0.6  # between clicks: the device goes idle (over 0.5 s), so each click runs its warm twin, as after a slide
CLICKS = 9


def median_pass_ms(model: torch.nn.Module, prompt_tokens: int, passes: int) -> float:
    ids = torch.arange(prompt_tokens)[None, :]
    cache = new_cache(model)
    logits = prefill(model, ids, cache)
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        logits = decode_one_token(model, logits.argmax(-1, keepdim=True), cache)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def python_loop(stop: threading.Event) -> None:
    """Pure Python, never waiting: it lets go of the interpreter lock only when the switch interval asks it to."""
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i * i


def beside(threads: int, work: callable) -> float:  # type: ignore[valid-type]
    stop = threading.Event()
    loops = [threading.Thread(target=python_loop, args=(stop,), daemon=True) for _ in range(threads)]
    for loop in loops:
        loop.start()
    time.sleep(0.2)
    try:
        return work()
    finally:
        stop.set()
        for loop in loops:
            loop.join()


def drawing(gate: PassGate | None, trace: Trace, stop: threading.Event) -> None:
    """A page building its chart again and again: through the server's gate (as the app draws charts, never during a
    timed pass), or with `gate` None as a page's other Python work (its frames, its messages), which no gate holds."""
    while not stop.is_set():
        with gate.drawing() if gate is not None else nullcontext():
            step_itl_chart(step_itl_frame(trace, 0.1), 0.1).to_dict()
        time.sleep(0.01)


def clicks_beside_pages(lm: LoadedModel, figures: FiguresStore, trace: Trace, threads: int, gated: bool) -> str:
    """`CLICKS` Step clicks beside `threads` pages, with the default interval and with `PASSES_FIRST`, alternated."""
    lines = []
    for first in (False, True, False, True):
        gate, stop = PassGate(), threading.Event()
        pages = [
            threading.Thread(target=drawing, args=(gate if gated else None, trace, stop), daemon=True)
            for _ in range(threads)
        ]
        for page in pages:
            page.start()
        try:
            checked = check_request(lm, Request("What is the capital of France?", CLICKS, stop_at_eos=False))
            stepped = SteppedRequest.start(lm, checked, None, None, figures)
            held_s, pass_s = [], []
            for _ in range(CLICKS):
                time.sleep(PAUSE_S)
                started = time.perf_counter()
                turn: AbstractContextManager[None] = PASSES_FIRST.held() if first else nullcontext()
                with turn:
                    record = stepped.step(gate)
                held_s.append(time.perf_counter() - started)
                pass_s.append(record.wall_s)
        finally:
            stop.set()
            for page in pages:
                page.join()
        held_ms, max_ms = statistics.median(held_s) * 1e3, max(held_s) * 1e3
        mode, pass_ms = "passes first" if first else "default", statistics.median(pass_s[1:]) * 1e3
        lines.append(
            f"{mode:>12}: a click held the device {held_ms:5.0f} ms (max {max_ms:5.0f}), timed pass {pass_ms:4.0f} ms"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=24)
    args = parser.parse_args()
    lm = load_model("embedded", device="cpu", dtype="float32")
    model = lm.model
    before = sys.getswitchinterval()
    print(f"decode pass of the embedded model, median of {args.passes} (torch threads: {torch.get_num_threads()})")
    for interval_s in (before, 1e-3, PASS_SWITCH_INTERVAL_S):
        sys.setswitchinterval(interval_s)
        alone = median_pass_ms(model, args.prompt_tokens, args.passes)
        line = [f"switch interval {interval_s * 1e6:7.0f} µs: alone {alone:6.0f} ms"]
        for threads in sorted({1, args.threads}):
            ms = beside(threads, lambda: median_pass_ms(model, args.prompt_tokens, args.passes))
            line.append(f"beside {threads} Python thread{'s' if threads > 1 else ''} {ms:7.0f} ms")
        print(", ".join(line), flush=True)
    sys.setswitchinterval(before)
    figures = FiguresStore()
    trace = measure(lm, Request("Explain in one sentence why the sky is blue.", max_new_tokens=16), figures)
    for gated, pages in ((True, "drawing a chart through the gate"), (False, "running a page's other Python work")):
        print(f"\nStep clicks ({PAUSE_S} s apart) beside {args.threads} threads {pages} (medians):")
        print(clicks_beside_pages(lm, figures, trace, args.threads, gated), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
