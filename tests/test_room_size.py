"""The room-size model and the waits set against the work ahead (`explorer.owner.room_size`), on hand-made turn logs
whose answers are worked out by hand."""

from __future__ import annotations

import pytest

from explorer.owner.line import TurnRecord
from explorer.owner.room_size import ClickCost, model_table, waits_against_work_ahead


def turn(
    number: int, what: str, entered: float, granted: float, released: float, ended: str = "released", **work: float
) -> TurnRecord:
    """A logged turn of one pass: entered the line at `entered`, on the device from `granted` to `released`."""
    return TurnRecord(
        number=number,
        what=what,
        owner=f"s{number}",
        first_ahead=0,
        waited_s=granted - entered,
        held_s=released - granted,
        granted_unix_s=granted,
        released_unix_s=released,
        ended=ended,
        passes=1,
        pass_s=work.get("pass_s", 0.05),
        forward_s=work.get("forward_s", 0.1),
    )


def test_a_click_costs_the_median_step_turn_and_a_room_waits_for_the_turns_before_it() -> None:
    turns = [
        turn(1, "prefill", 0.0, 0.0, 1.0, pass_s=0.2, forward_s=0.5),  # not a Next token: left out
        turn(2, "step", 0.0, 1.0, 1.2, pass_s=0.05, forward_s=0.1),
        turn(3, "step", 0.0, 1.2, 1.5, pass_s=0.07, forward_s=0.15),
        turn(4, "step", 0.0, 1.5, 1.75, pass_s=0.06, forward_s=0.12),
        turn(5, "step", 0.0, 2.0, 2.0, ended="cancelled"),
    ]
    cost = ClickCost.from_turns(turns, "this CPU", "measured")
    assert cost is not None and cost.turns == 3
    assert (cost.pass_s, cost.forward_s, cost.held_s) == pytest.approx((0.06, 0.12, 0.25))
    assert cost.overhead_s == pytest.approx(0.13)
    assert cost.longest_wait_s(8) == pytest.approx(7 * 0.25) and cost.mean_wait_s(8) == pytest.approx(3.5 * 0.25)
    assert cost.longest_wait_s(1) == 0.0
    assert cost.sessions_within(2.0) == 9  # 1 + 2.0 / 0.25
    assert ClickCost.from_turns(turns[:1], "this CPU", "measured") is None


def test_on_a_gpu_each_forward_takes_the_gpus_pass_and_the_rest_of_the_turn_stays() -> None:
    cost = ClickCost("this CPU", pass_s=0.06, forward_s=0.12, held_s=0.25, turns=3, source="measured")
    gpu = cost.on_gpu(gpu_pass_s=0.02, source="recorded")
    assert gpu.machine == "GPU box" and gpu.pass_s == 0.02
    assert gpu.forward_s == pytest.approx(2 * 0.02)  # two forwards a click, as here
    assert gpu.held_s == pytest.approx(0.04 + 0.13)
    assert gpu.sessions_within(2.0) == 1 + int(2.0 / 0.17)
    assert "2.0 forwards a click and 130 ms of the rest, as measured on this CPU" in gpu.source
    table = model_table(gpu, [2, 8], 2.0)
    assert table[0].startswith("GPU box: a Next-token click holds the device 170 ms")
    assert "8 people pressing together: longest wait   1.19 s" in table[2]
    assert table[-1] == "  within 2 s: up to 12 people"


def test_each_wait_is_set_against_the_share_of_each_turn_that_held_the_device_meanwhile() -> None:
    turns = [
        turn(1, "step", 0.0, 0.0, 0.4, pass_s=0.1, forward_s=0.3),  # on the device when the others arrive
        turn(2, "step", 0.2, 0.4, 0.6, pass_s=0.05, forward_s=0.1),
        turn(3, "step", 0.2, 0.6, 0.7, pass_s=0.05, forward_s=0.1),
    ]
    second, third = waits_against_work_ahead(turns)  # the first never waited
    assert (second.turns_ahead, second.held_s) == (1, pytest.approx(0.2))
    assert second.pass_s == pytest.approx(0.1 * 0.2 / 0.4) and second.forward_s == pytest.approx(0.3 * 0.5)
    assert third.turns_ahead == 2 and third.held_s == pytest.approx(0.4)
    assert third.pass_s == pytest.approx(0.05 + 0.05) and third.within(third.pass_s)  # 0.4 s <= 0.1 + 0.5
    assert not third.within(third.pass_s, slack_s=0.2)
