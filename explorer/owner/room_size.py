"""How far one server goes: a room's wait for a Next token against its size, modelled from the turn log, for this
machine and for a GPU box, and each logged wait set against the work that was ahead of it.

The model: a Next-token click holds the device for one turn of `held_s` (its pass and the record; a warm twin where
one ran), and turns are first come, first served. When a whole room presses → together, the k-th in line waits for the
k - 1 turns before it: the longest wait is (N - 1) x held_s, the average (N - 1) / 2 x held_s, and a room stays within
a wait W up to 1 + W / held_s people. Drawing the pages holds no turn. On a GPU box the forwards take the GPU's time per
pass and the rest of a turn (sampling, the record: Python on the CPU) what it took here. Pure Python, no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from explorer.owner.line import TurnRecord

# Recorded on a lent NVIDIA H200 (FIELD-NOTES, "On a lent GPU", 2026-11-27): eager decode is launch-bound, about
# 20 ms a pass for a 135M Llama (SmolLM2's shape) as for an 8B one.
GPU_EAGER_PASS_S = 0.020
GPU_SOURCE = "recorded: eager decode of a 135M Llama on an NVIDIA H200, about 20 ms a pass (2026-11-27)"
SLACK_S = 0.5  # a wait may exceed the work ahead of it by this much: the queue's own hand-over, a page's redraw


@dataclass(frozen=True)
class ClickCost:
    """What one Next-token click holds the device for, on one machine (seconds, medians over step turns)."""

    machine: str
    pass_s: float  # the timed decode pass
    forward_s: float  # every forward of the turn: the pass, and a warm twin where one ran
    held_s: float  # the whole turn
    turns: int  # how many step turns the medians are over
    source: str

    @property
    def overhead_s(self) -> float:
        """The turn outside its forwards: sampling, the record, the cost model (Python on the CPU)."""
        return max(0.0, self.held_s - self.forward_s)

    @classmethod
    def from_turns(cls, turns: Sequence[TurnRecord], machine: str, source: str) -> ClickCost | None:
        """From a turn log's Next-token turns (`what == "step"` with a pass); None without any."""
        steps = [t for t in turns if t.what == "step" and t.passes > 0 and t.ended == "released"]
        if not steps:
            return None
        return cls(
            machine,
            statistics.median(t.pass_s / t.passes for t in steps),
            statistics.median(t.forward_s for t in steps),
            statistics.median(t.held_s for t in steps),
            len(steps),
            source,
        )

    def on_gpu(self, gpu_pass_s: float = GPU_EAGER_PASS_S, source: str = GPU_SOURCE) -> ClickCost:
        """The same turn on a GPU box: each forward (as many per click as here) at `gpu_pass_s`, the rest as here."""
        forwards = self.forward_s / self.pass_s if self.pass_s > 0 else 1.0
        return replace(
            self,
            machine="GPU box",
            pass_s=gpu_pass_s,
            forward_s=forwards * gpu_pass_s,
            held_s=forwards * gpu_pass_s + self.overhead_s,
            source=f"{source}; {forwards:.1f} forwards a click and {self.overhead_s * 1e3:.0f} ms of the rest, as "
            f"measured on {self.machine}",
        )

    def longest_wait_s(self, sessions: int) -> float:
        """The last of `sessions` people pressing together waits for everyone before it."""
        return max(0, sessions - 1) * self.held_s

    def mean_wait_s(self, sessions: int) -> float:
        return max(0, sessions - 1) / 2 * self.held_s

    def sessions_within(self, wait_s: float) -> int:
        """The largest room whose longest wait stays within `wait_s`."""
        return 1 + math.floor(wait_s / self.held_s) if self.held_s > 0 else 0


@dataclass(frozen=True)
class WaitAhead:
    """One logged wait beside the work that was on the device meanwhile (the turns ahead of it)."""

    turn: TurnRecord
    turns_ahead: int  # turns on the device during the wait
    pass_s: float  # their timed passes' seconds within the wait
    forward_s: float  # their forwards' seconds within the wait (timed or not)
    held_s: float  # their held seconds within the wait

    def within(self, ahead_s: float, slack_s: float = SLACK_S) -> bool:
        return self.turn.waited_s <= ahead_s + slack_s


def waits_against_work_ahead(turns: Sequence[TurnRecord]) -> list[WaitAhead]:
    """Each turn that waited, with what held the device while it did: every other turn's share inside its wait (a
    turn that began before the wait counts only the part of it that fell inside, its passes and forwards pro rata)."""
    found = []
    for t in turns:
        if t.ended != "released" or t.waited_s <= 0 or t.resumed:  # a resumed run waited for the turns it let through
            continue
        start, end = t.entered_unix_s, t.granted_unix_s
        ahead, pass_s, forward_s, held_s = 0, 0.0, 0.0, 0.0
        for u in turns:
            overlap = min(end, u.released_unix_s) - max(start, u.granted_unix_s)
            if u is t or overlap <= 0 or u.held_s <= 0:
                continue
            share = min(1.0, overlap / u.held_s)
            ahead += 1
            pass_s += u.pass_s * share
            forward_s += u.forward_s * share
            held_s += overlap
        found.append(WaitAhead(t, ahead, pass_s, forward_s, held_s))
    return found


def model_table(cost: ClickCost, sizes: Sequence[int], wait_s: float) -> list[str]:
    """The model as lines of text: the click's cost, the longest and average wait at each room size, and the room
    that stays within `wait_s`."""
    lines = [
        f"{cost.machine}: a Next-token click holds the device {cost.held_s * 1e3:.0f} ms (its pass "
        f"{cost.pass_s * 1e3:.0f} ms, forwards {cost.forward_s * 1e3:.0f} ms; {cost.source})",
    ]
    lines += [
        f"  {n:>3} people pressing together: longest wait {cost.longest_wait_s(n):6.2f} s, average "
        f"{cost.mean_wait_s(n):6.2f} s"
        for n in sizes
    ]
    lines.append(f"  within {wait_s:g} s: up to {cost.sessions_within(wait_s)} people")
    return lines
