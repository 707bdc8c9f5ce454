"""A workshop on one server, in real browsers: several sessions at once on the app as deployed (deploy/run.sh, hosted
mode, loopback only), each opening the app, pressing Prefill and Next token 3 times on Step by step, Run in the
sidebar, and opening the Tour from a recording link (tests/workshop_support.py, the driver that
`benchmarks/workshop.py` runs with 8 sessions). Every session ends with its own result and no error or exception on
any page, and every session that waited for the device showed its place in line while it waited.

Fewer sessions than the benchmark's 8: the browsers and the server share this machine's 2 cores. Uses the session's
app server (tests/conftest.py: warming off there; the first device action of a cold server loads the model while the
others wait in line). Bounded: every stage of every session has a deadline.
"""

from __future__ import annotations

import pytest

from explorer.owner.line import read_turn_log
from tests.browser_support import HostedApp, log_tail, skip_module_without_browser
from tests.workshop_support import run_workshop

skip_module_without_browser("a workshop of concurrent sessions")
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

SESSIONS = 2
STAGE_TIMEOUT_S = 240  # one stage of one session: the server refuses a wait over 120 s, then a run and its page
LIVE_LINE_AFTER_S = 1.0  # a wait this long is drawn (the line redraws every 0.5 s): the watcher must have seen it


def test_a_workshop_of_sessions_at_once_each_ends_with_its_own_result_and_no_error(hosted_app: HostedApp) -> None:
    turns_before = len(read_turn_log(hosted_app.turn_log))
    visits = run_workshop(hosted_app.url, SESSIONS, STAGE_TIMEOUT_S)
    turns = read_turn_log(hosted_app.turn_log)[turns_before:]
    for v in visits:
        print(f"\n[workshop] {v.line()}")
    print(f"[workshop] turns: {[(t.what, round(t.waited_s, 1), t.first_ahead, t.ended) for t in turns]}")

    assert [v.line() for v in visits if not v.ok] == [], log_tail(hosted_app.log)
    # Sessions at once do take turns: some waited (the server's log), their pages said so (the "Waited" caption), and
    # each one that waited long enough to be drawn said where it was in line while it waited.
    assert any(t.first_ahead > 0 for t in turns), turns
    if any(t.waited_s >= LIVE_LINE_AFTER_S for t in turns):
        assert any(v.waited for v in visits), "the server logged waits that no page said"
    unseen = [
        v.line()
        for v in visits
        if max((s for s, _ in v.waits), default=0.0) >= LIVE_LINE_AFTER_S and not v.showed_place
    ]
    assert unseen == [], "waited without showing a place in line"
