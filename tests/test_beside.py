"""What ran beside a pass (explorer/core/beside.py), as the device owner measures it for every timed pass: another
thread's CPU between two laps is counted, a lap after `restart` counts nothing that ran before it."""

from __future__ import annotations

import threading
import time

from explorer.core.beside import BesideWatch


def burn(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def test_a_busy_thread_beside_a_pass_is_counted_and_a_restart_forgets_what_came_before() -> None:
    stop = threading.Event()
    busy = threading.Thread(target=burn, args=(stop,))
    watch = BesideWatch()
    busy.start()
    try:
        time.sleep(0.3)  # the "pass": this thread sleeps, the busy one runs
        assert watch.lap() >= 0.05
        time.sleep(0.3)  # the busy thread goes on: another job's turn, say, while this one made way
        watch.restart()
        assert watch.lap() < 0.05  # none of what ran before the restart (over about no time at all)
    finally:
        stop.set()
        busy.join()
    assert len(watch.laps) == 2
