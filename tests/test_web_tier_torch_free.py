"""The web tier never imports torch (issue 43 §2): every module the pages import, the pages' own code, the device
owner's client side and the chart builders load in a fresh interpreter with no torch in `sys.modules`. The browser
test that clicks Run on a real server and looks at the web process: tests/test_browser_owner.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, pkgutil, sys
import explorer.ui, explorer.charts
names = ["explorer.hosting.client", "explorer.hosting.settings"]
for package in (explorer.ui, explorer.charts):
    names += [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
for name in names:
    importlib.import_module(name)
heavy = sorted(m for m in ("torch", "transformers", "accelerate", "safetensors") if m in sys.modules)
print(len(names))
print(",".join(heavy) or "none")
"""


def test_every_web_tier_module_loads_without_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    count, heavy = done.stdout.strip().splitlines()[-2:]
    assert int(count) > 40  # every ui and chart module was imported, not an empty package
    assert heavy == "none", f"the web tier imported {heavy}"
