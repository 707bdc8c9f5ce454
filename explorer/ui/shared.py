"""What every session of this server process shares, and the one place it is created: the `ServerSession` (the
models, the device's queue, the warm-up, the device figures, ...) and this server's limits."""

from __future__ import annotations

import streamlit as st

from explorer.hosting.server_session import ServerSession
from explorer.hosting.settings import HostedPolicy


def hosting_policy() -> HostedPolicy:
    """This server's limits, read from the environment on every call (cheap; tests change it between runs)."""
    return HostedPolicy.from_env()


@st.cache_resource(show_spinner=False)
def server_session() -> ServerSession:
    """The server's one ServerSession, shared by every session (each session's script runs in a thread of its own).
    The only process-wide cache of the app: tests clear it (`server_session.clear()`) to start from a fresh one."""
    return ServerSession.create(turn_log=hosting_policy().turn_log)
