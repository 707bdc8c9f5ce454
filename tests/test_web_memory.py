"""The web tier caps glibc's malloc arenas at its start; an arena cap already in the environment wins."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = "from explorer.ui.memory import cap_malloc_arenas; print(cap_malloc_arenas())"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_cap_is_applied_unless_the_environment_sets_one() -> None:
    def applied(env: dict[str, str]) -> str:
        import os

        clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
        return subprocess.run(
            [sys.executable, "-c", SCRIPT], env={**clean, **env}, capture_output=True, text=True, check=True
        ).stdout.strip()

    assert applied({}) == "True"
    assert applied({"MALLOC_ARENA_MAX": "4"}) == "False"
