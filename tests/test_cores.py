"""The owner's cores, set once at start: parsing the setting, the split the app's own owner takes, a process that
moves itself, and "beside a pass" counted on the pass's own CPUs only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from explorer.core import beside
from explorer.hosting.cores import CPUS_ENV, cores_for_owner, cpu_list, parse_cpus


def test_parse_cpus_reads_linux_cpu_lists() -> None:
    assert parse_cpus("1") == {1}
    assert parse_cpus("0,2-4") == {0, 2, 3, 4}
    assert cpu_list({4, 0, 2}) == "0,2,4"
    for bad in ("", "a", "3-1", "-1"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_the_apps_owner_takes_all_but_the_lowest_quarter_of_the_cores() -> None:
    assert cores_for_owner({0, 1}) == ({1}, {0})
    assert cores_for_owner({2, 3, 5}) == ({3, 5}, {2})
    assert cores_for_owner(set(range(16))) == (set(range(4, 16)), {0, 1, 2, 3})
    assert cores_for_owner({0}) is None  # one core: nothing to split


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_an_owner_process_moves_every_thread_onto_its_cores() -> None:
    last = max(os.sched_getaffinity(0))
    script = (
        "import os, threading\n"
        "from explorer.hosting.cores import take_owner_cores\n"
        "print(take_owner_cores())\n"
        "t = threading.Thread(target=lambda: print(sorted(os.sched_getaffinity(0))))\n"
        "t.start(); t.join()\n"
    )
    env = {**os.environ, CPUS_ENV: str(last)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"passes run on CPUs {last}", f"[{last}]"]
    bad = subprocess.run([sys.executable, "-c", script], env={**env, CPUS_ENV: "x"}, capture_output=True, text=True)
    assert bad.returncode != 0 and f"{CPUS_ENV}='x'" in bad.stderr


def test_busy_time_is_read_per_cpu(tmp_path, monkeypatch) -> None:
    (tmp_path / "stat").write_text(
        "cpu  30 0 10 500 0 0 0 0 0 0\ncpu0 20 0 5 250 0 0 0 0 0 0\ncpu1 10 0 5 250 0 0 0 0 0 0\nintr 1\n"
    )
    monkeypatch.setattr(beside, "PROC", tmp_path)
    ticks = beside.TICKS_PER_S
    assert beside.machine_busy_s() == pytest.approx(40 / ticks)
    assert beside.machine_busy_s({1}) == pytest.approx(15 / ticks)
    assert beside.machine_busy_s({0, 1}) == pytest.approx(40 / ticks)


def test_the_web_tier_lowers_every_thread_but_the_one_that_starts_owners() -> None:
    """A child inherits its parent thread's priority and cannot raise it again: the thread that starts the owner again
    keeps its priority; every other thread, and any started later by them, is lowered."""
    script = (
        "import os, threading\n"
        "from explorer.hosting.cores import WEB_TIER_NICE, lower_priority\n"
        "go = threading.Event()\n"
        "keeper = threading.Thread(target=go.wait); keeper.start()\n"
        "lower_priority(WEB_TIER_NICE, keep=keeper.native_id)\n"
        "later = []\n"
        "t = threading.Thread(target=lambda: later.append(os.getpriority(os.PRIO_PROCESS, 0))); t.start(); t.join()\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, keeper.native_id), later[0])\n"
        "go.set()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert [int(v) for v in out] == [min(19, base + 5), base, min(19, base + 5)]
