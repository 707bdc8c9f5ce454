"""The Scheduling lab's goodput count under the session's SLO pair (issue 45): each request met or missed TTFT and
TPOT, recounted here by hand from the token times."""

from __future__ import annotations

import pytest

from explorer.charts.schedule import goodput_frame
from explorer.labs.schedule.goodput import goodput_count, tpot_of
from explorer.labs.schedule.records import RequestRecord, ServedMode


def record(name: str, arrival_s: float, times_s: tuple[float, ...]) -> RequestRecord:
    return RequestRecord(
        id=name,
        prompt_text="p",
        prompt_token_ids=(1, 2, 3),
        prefix_tokens=0,
        max_new_tokens=len(times_s),
        arrival_s=arrival_s,
        start_s=arrival_s,
        token_times_s=times_s,
        token_ids=tuple(range(len(times_s))),
        prefill_tokens_computed=3,
    )


MODE = ServedMode(
    "continuous batching",
    (
        record("fast", 0.0, (0.10, 0.15, 0.20, 0.25)),  # TTFT 100 ms, TPOT 50 ms
        record("late", 0.0, (0.60, 0.62, 0.64)),  # TTFT 600 ms: misses TTFT; TPOT 20 ms
        record("stalled", 0.1, (0.30, 0.90)),  # TTFT 200 ms; TPOT 600 ms (a long prefill in between): misses TPOT
        record("single", 0.2, (0.35,)),  # one token: no TPOT, met trivially
    ),
)


def test_each_request_is_marked_met_or_missed_for_ttft_and_tpot_and_counted() -> None:
    count = MODE.goodput(0.5, 0.1)  # TTFT SLO 500 ms, ITL (read as TPOT) SLO 100 ms
    by_name = {v.request: v for v in count.verdicts}
    assert by_name["fast"].tpot_s == pytest.approx(0.05) and by_name["fast"].met
    assert not by_name["late"].ttft_met and by_name["late"].tpot_met
    assert by_name["stalled"].ttft_met and not by_name["stalled"].tpot_met
    assert by_name["single"].tpot_s is None and by_name["single"].met
    assert (count.met, count.ttft_missed, count.tpot_missed) == (2, 1, 1)
    assert count.span_s == pytest.approx(0.9) and count.goodput_per_s == pytest.approx(2 / 0.9)
    assert count.sentence().startswith("2 of 4 requests met both SLOs")


def test_met_is_strictly_under_as_every_slo_check() -> None:
    assert tpot_of((0.0, 0.1, 0.2)) == pytest.approx(0.1)
    exactly = goodput_count([("a", 0.0, (0.5, 0.6))], 0.5, 1.0)
    assert exactly.met == 0 and exactly.ttft_missed == 1


def test_the_goodput_table_has_a_row_per_request_and_mode() -> None:
    frame = goodput_frame([MODE], 0.5, 0.1)
    assert list(frame["request"]) == ["fast", "late", "stalled", "single"]
    assert list(frame["both_met"]) == [True, False, False, True]
    assert frame["tpot_ms"].iloc[2] == pytest.approx(600.0)


def test_a_room_rounds_goodput_counts_each_persons_request() -> None:
    from explorer.labs.room_records import Lane, RoomRound
    from explorer.labs.schedule.workload import EngineSettings

    def lane(person: int, ttft_s: float, times_s: tuple[float, ...]) -> Lane:
        return Lane(person, "", "", 10, (), len(times_s), ttft_s, times_s, ttft_s, times_s, (), True)

    lanes = (lane(1, 0.2, (0.2, 0.25, 0.3)), lane(2, 1.5, (1.5, 1.55)), lane(3, 0.3, (0.3, 1.3)))
    round_ = RoomRound("ABCD", 1, "m", "float32", "cpu", EngineSettings(), 3, False, (), lanes)
    count = round_.goodput(1.0, 0.1)  # person 2 misses TTFT, person 3 TPOT (a long prefill beside it)
    assert [v.met for v in count.verdicts] == [True, False, False]
    assert (count.met, count.ttft_missed, count.tpot_missed) == (1, 1, 1)


def test_the_schedule_commands_report_counts_goodput_under_its_slos() -> None:
    """`python -m explorer schedule --ttft-slo-ms --tpot-slo-ms`: one line per mode, on the bundled lab run."""
    from explorer.cli.schedule import format_run
    from explorer.labs.bundled import read

    run = read("schedule").result
    loose, tight = format_run(run, (60.0, 60.0)), format_run(run, (1e-6, 1e-6))
    n = len(run.served.requests)
    assert f"goodput   {run.served.mode}: {n} of {n} requests met both SLOs" in loose
    assert f"goodput   {run.served.mode}: 0 of {n} requests met both SLOs" in tight


def test_no_requests_count_zero_and_a_lane_with_no_tokens_is_left_out() -> None:
    """A round where someone got no token (or a lab mode with no requests) still counts: zero, not an error."""
    from explorer.labs.room_records import Lane, RoomRound
    from explorer.labs.schedule.workload import EngineSettings

    empty = goodput_count([], 1.0, 0.1)
    assert (len(empty.verdicts), empty.met, empty.span_s, empty.goodput_per_s) == (0, 0, 0.0, 0.0)
    assert empty.sentence().startswith("0 of 0 requests met both SLOs")
    served = Lane(1, "", "", 10, (), 2, 0.2, (0.2, 0.25), 0.2, (0.2, 0.25), (), True)
    silent = Lane(2, "", "", 10, (), 0, 0.0, (), 0.0, (), (), True)
    count = RoomRound("ABCD", 1, "m", "float32", "cpu", EngineSettings(), 2, False, (), (served, silent)).goodput(1, 1)
    assert [v.request for v in count.verdicts] == [served.request] and count.met == 1
    assert RoomRound("ABCD", 1, "m", "float32", "cpu", EngineSettings(), 2, False, (), (silent,)).goodput(1, 1).met == 0
