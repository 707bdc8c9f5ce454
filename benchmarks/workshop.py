"""A workshop on one server: N browser sessions at once on the app as deployed (deploy/run.sh: hosted mode, warming
on, as `streamlit run app.py` starts it), on 127.0.0.1 only. Each session opens the app, presses Prefill on Step by
step and Next token 3 times, presses Run in the sidebar, then opens the Tour from a recording link (the driver and
what it checks: tests/workshop_support.py, shared with tests/test_workshop.py).

Prints, per session: its result, each wait for the device (the server's own figure, as the page says it, with the
place in line), whether it showed its place while waiting, and the errors or exceptions any of its pages showed; per
server session, the turns of the turn log (EXPLORER_TURN_LOG): how many, waited and held seconds; every wait beside
the work that held the device meanwhile (the timed passes' seconds, every forward's, the turns' held time) with the
verdict "each wait within the passes ahead + 0.5 s"; the longest Next-token wait; the stepped decode ITL median the
room's pages showed beside the same passes stepped by one person alone afterwards, and their ratio (with how many
passes the pages marked as disturbed); the room-size model from this turn log, for this machine and a GPU box
(`explorer.owner.room_size`), against the longest wait measured; and the server's RSS at start, before the
sessions (once warm) and after them, with the peak between. Exit status 1 if any session did not end with its result
and no error.

A benchmark to read, not a timed test: `python benchmarks/workshop.py --sessions 8` from the repository root.
`--cold` opens the sessions as soon as the server answers, while it is still warming up. Bounded: every stage of
every session has a deadline (`--stage-timeout`), the warm-up too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the driver and the app come from this checkout

from explorer.core.units import megabytes  # noqa: E402
from explorer.owner.line import TurnRecord, read_turn_log  # noqa: E402
from explorer.owner.room_size import SLACK_S, ClickCost, model_table, waits_against_work_ahead  # noqa: E402
from tests.browser_support import browser_missing, listening_pid, log_tail, streamlit_server  # noqa: E402
from tests.workshop_support import Visit, run_workshop  # noqa: E402

WARM_TIMEOUT_S = 300.0  # model load, device figures and warm-up passes on a busy 2-core machine
ROOM_SIZES = (2, 4, 8, 16, 30)  # the model's table: up to a real workshop's size
TARGET_WAIT_S = 2.0  # the longest Next-token wait a room should see


class RssSampler:
    """The server process's RSS (with any children), sampled every `every_s` in a thread: its peak."""

    def __init__(self, pid: int, every_s: float = 0.5) -> None:
        self.process = psutil.Process(pid)
        self.every_s, self.peak = every_s, self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> int:
        try:
            return sum(p.memory_info().rss for p in [self.process, *self.process.children(recursive=True)])
        except psutil.NoSuchProcess:
            return 0

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def wait_until_warm(turn_log: Path, server_log: Path, timeout_s: float) -> float:
    """Seconds until the warm-up's turn is in the turn log (a turn is logged when it gives the device back)."""
    started = time.monotonic()
    while not any(t.what == "warm-up" for t in read_turn_log(turn_log)):
        if "Warming up at server start failed" in log_tail(server_log):
            raise SystemExit(f"warming failed:\n{log_tail(server_log)}")
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"not warm after {timeout_s:.0f} s:\n{log_tail(server_log)}")
        time.sleep(0.5)
    return time.monotonic() - started


def turns_by_session(turns: list[TurnRecord]) -> dict[str, list[TurnRecord]]:
    grouped: dict[str, list[TurnRecord]] = defaultdict(list)
    for t in turns:
        grouped[t.owner].append(t)
    return dict(grouped)


def waits_report(turns: list[TurnRecord]) -> dict[str, object]:
    """Every wait beside the work ahead of it, the verdicts, and the longest Next-token wait."""
    waits = [w for w in waits_against_work_ahead(turns) if w.turn.waited_s >= 0.01]
    print(f"\nwaits beside the work ahead (within = wait <= ahead + {SLACK_S} s):")
    for w in waits:
        print(
            f"  turn {w.turn.number:>3} {w.turn.what:<8} waited {w.turn.waited_s:6.2f} s; ahead {w.turns_ahead} turns: "
            f"passes {w.pass_s:5.2f} s, forwards {w.forward_s:5.2f} s, held {w.held_s:5.2f} s"
            f"{'' if w.within(w.pass_s) else '  <- over the passes ahead'}"
        )
    next_tokens = [t.waited_s for t in turns if t.what == "step"]
    figures = {
        "waits_within_passes_ahead": f"{sum(w.within(w.pass_s) for w in waits)}/{len(waits)}",
        "waits_within_forwards_ahead": f"{sum(w.within(w.forward_s) for w in waits)}/{len(waits)}",
        "waits_within_held_ahead": f"{sum(w.within(w.held_s) for w in waits)}/{len(waits)}",
        "longest_next_token_wait_s": round(max(next_tokens, default=0.0), 2),
    }
    print("\n".join(f"{k}: {v}" for k, v in figures.items()))
    return figures


def itl_report(room: list[Visit], alone: list[Visit]) -> dict[str, object]:
    """The stepped decode ITL the room's pages showed against one person's alone, and the passes marked."""
    room_ms = [ms for v in room for ms in v.itl_ms]
    alone_ms = [ms for v in alone for ms in v.itl_ms]
    clean_ms = [ms for v in room for ms, marked in zip(v.itl_ms, v.disturbed) if not marked]
    if not room_ms or not alone_ms:
        print("\nITL: not read from the pages")
        return {}
    room_p50, alone_p50 = statistics.median(room_ms), statistics.median(alone_ms)
    figures = {
        "itl_p50_room_ms": round(room_p50, 1),
        "itl_p50_alone_ms": round(alone_p50, 1),
        "itl_ratio_room_over_alone": round(room_p50 / alone_p50, 2),
        "passes_marked_disturbed": f"{sum(sum(v.disturbed) for v in room)}/{len(room_ms)}",
        "itl_ratio_unmarked_over_alone": round(statistics.median(clean_ms) / alone_p50, 2) if clean_ms else None,
    }
    print("\n".join(f"{k}: {v}" for k, v in figures.items()))
    return figures


def model_report(turns: list[TurnRecord], sessions: int) -> dict[str, object]:
    """The room-size model from this turn log, for this machine and a GPU box, against the longest wait measured."""
    cost = ClickCost.from_turns(
        turns, "this machine", f"measured over this room's Next-token turns, {sessions} sessions"
    )
    if cost is None:
        return {}
    print()
    for line in model_table(cost, ROOM_SIZES, TARGET_WAIT_S) + model_table(cost.on_gpu(), ROOM_SIZES, TARGET_WAIT_S):
        print(line)
    measured = max((t.waited_s for t in turns if t.what == "step"), default=0.0)
    print(
        f"  at {sessions} sessions: longest Next-token wait measured {measured:.2f} s, modelled at most "
        f"{cost.longest_wait_s(sessions):.2f} s (everyone pressing together), "
        f"{cost.mean_wait_s(sessions):.2f} s on average"
    )
    return {
        "click": asdict(cost),
        "gpu_click": asdict(cost.on_gpu()),
        "modelled_longest_wait_s": cost.longest_wait_s(sessions),
    }


def report(visits: list[Visit], turns: list[TurnRecord], rss: dict[str, int], wall_s: float) -> dict[str, object]:
    for v in visits:
        print(v.line())
    print(f"\nturn log: {len(turns)} turns ({', '.join(sorted({t.what for t in turns}))})")
    threads = Counter(t.threads for t in turns if t.threads is not None)  # explorer.hosting.pass_threads
    print("  intra-op threads per turn: " + (", ".join(f"{n}: {c} turns" for n, c in sorted(threads.items())) or "-"))
    nices = Counter("not raised" if t.nice is None else f"nice {t.nice}" for t in turns)  # hosting.pass_priority
    print("  the holder's priority per turn: " + ", ".join(f"{n}: {c} turns" for n, c in sorted(nices.items())))
    for owner, own in turns_by_session(turns).items():
        waited = [t.waited_s for t in own]
        ended = ", ".join(f"{e} {sum(t.ended == e for t in own)}" for e in sorted({t.ended for t in own}))
        print(
            f"  server session {owner}: {len(own)} turns ({', '.join(t.what for t in own)}); waited "
            f"{sum(waited):.1f} s in all, at most {max(waited):.1f} s; held {sum(t.held_s for t in own):.1f} s; {ended}"
        )
    errors = sum(len(v.errors) + len(v.page_errors) for v in visits)
    waiters = [v for v in visits if v.waited]
    summary = {
        "sessions": len(visits),
        "ended_with_result": sum(not v.failures for v in visits),
        "errors": errors,
        "sessions_that_waited": len(waiters),
        "waiting_sessions_that_showed_their_place": sum(v.showed_place for v in waiters),
        "longest_wait_s": max((s for v in visits for s, _ in v.waits), default=0.0),
        "rss": {k: megabytes(b) for k, b in rss.items()},
        "rss_growth_during_workshop": megabytes(rss["after"] - rss["before"], signed=True),
        "wall_s": round(wall_s, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),  # other work on the machine slows every pass and redraw
    }
    print("\n" + "\n".join(f"{k}: {v}" for k, v in summary.items()))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--stage-timeout", type=float, default=240.0, help="seconds each stage of a session may take")
    parser.add_argument("--cold", action="store_true", help="open the sessions while the server is still warming up")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-alone", action="store_true", help="skip the one person stepping alone afterwards")
    args = parser.parse_args()
    if not 1 <= args.sessions <= 16:
        parser.error("--sessions: 1 to 16 (one Chromium, one context each, on this machine)")
    missing = browser_missing()
    if missing:
        parser.error(missing)

    folder = Path(tempfile.mkdtemp(prefix="workshop-"))
    turn_log, server_log = folder / "turns.jsonl", folder / "server.log"
    print(f"server log: {server_log}\nturn log: {turn_log}", flush=True)
    env = {"EXPLORER_WARM": "1", "EXPLORER_TURN_LOG": str(turn_log)}
    with streamlit_server(server_log, env=env, startup_timeout_s=120) as url:
        pid = listening_pid(url)
        if pid is None:
            raise SystemExit(f"no process listens at {url}")
        with RssSampler(pid) as rss:
            sizes = {"start": rss.now()}
            if not args.cold:
                print(f"warm after {wait_until_warm(turn_log, server_log, WARM_TIMEOUT_S):.1f} s", flush=True)
            sizes["before"] = rss.peak = rss.now()
            print(f"{args.sessions} sessions at once on {url} …", flush=True)
            started = time.monotonic()
            visits = run_workshop(url, args.sessions, args.stage_timeout)
            wall_s = time.monotonic() - started
            sizes["after"] = rss.now()
        sizes["peak"] = rss.peak
        turns = [t for t in read_turn_log(turn_log) if t.what != "warm-up"]
        alone = [] if args.no_alone else run_workshop(url, 1, args.stage_timeout, only=("open", "step"))
        summary = report(visits, turns, sizes, wall_s)
        summary |= waits_report(turns) | itl_report(visits, alone) | model_report(turns, args.sessions)
    if args.json:
        figures = {"summary": summary, "visits": [asdict(v) for v in visits], "turns": [asdict(t) for t in turns]}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if all(v.ok for v in visits) else 1


if __name__ == "__main__":
    sys.exit(main())
