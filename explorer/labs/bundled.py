"""The serving labs' bundled results, torch-free: one result per lab in `recordings/labs/`, recorded with the lab's own
CLI command (`--json`), and an index naming each file with the command that made it, the device, the machine and the
date. The lab pages open on these until a live result replaces them; reading one imports no torch and loads no model.
A file that is missing or damaged is one line (BadInput), never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from explorer.core.errors import BadInput, one_line
from explorer.labs.batch_result import BatchResult
from explorer.labs.nocache_result import NoCacheResult
from explorer.labs.schedule.records import ScheduleRun
from explorer.remote.upload import LOCAL_LIMITS, read_sweep

LABS_DIR = Path(__file__).resolve().parents[2] / "recordings" / "labs"
INDEX_FILE = "index.json"
MAX_FILE_BYTES = 5 * 2**20  # a bundled result stays small: the repository ships it
INDEX_FIELDS = ("file", "command", "date", "device", "machine")

# Each lab's reader: the bytes of its `--json` file back to the object its page draws.
READERS: dict[str, Callable[[bytes], Any]] = {
    "nocache": lambda raw: NoCacheResult.from_json(raw.decode("utf-8")),
    "batch": lambda raw: BatchResult.from_json(raw.decode("utf-8")),
    "schedule": lambda raw: ScheduleRun.from_json(raw.decode("utf-8")),
    "endpoint": lambda raw: read_sweep(raw, LOCAL_LIMITS),  # the Endpoint page's own checks for an uploaded sweep
}
LABS = tuple(READERS)


@dataclass(frozen=True)
class Recorded:
    """One lab's bundled result and how it was made (from the index)."""

    lab: str
    result: Any
    command: str  # the exact CLI command that wrote the file
    date: str  # when it was recorded, e.g. "2026-11-23 23:15 UTC"
    device: str  # what ran it, e.g. "cpu (AMD EPYC), SmolLM2-135M-Instruct (embedded), float32"
    machine: str  # in words, e.g. "recorded on a shared 2-core CPU ..."

    @property
    def banner(self) -> str:
        """What the page says above a bundled result: recorded, not live, and how it was made (Markdown)."""
        return (
            f"**Recorded result, not live**: made with `{self.command}` on {self.device}, {self.date}; {self.machine}. "
            "Every figure below is as measured then."
        )


def read(lab: str, folder: Path | None = None) -> Recorded:
    """The bundled result of `lab` (one of LABS), read once per process; BadInput with one line when it cannot be."""
    return _read(lab, (folder or LABS_DIR).resolve())


@lru_cache(maxsize=16)
def _read(lab: str, folder: Path) -> Recorded:
    if lab not in READERS:
        raise BadInput(f"No bundled lab result is called {lab!r}: the labs are {', '.join(LABS)}.")
    entry = index_entry(lab, folder)
    path = folder / Path(entry["file"]).name  # a name in this folder, nothing else
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path.name} is over {MAX_FILE_BYTES // 2**20} MiB")
        result = READERS[lab](path.read_bytes())
    except (OSError, ValueError, KeyError, TypeError, AttributeError, BadInput) as exc:
        raise BadInput(f"The bundled {lab} result cannot be read ({one_line(exc)}): press Run for a live one.") from exc
    return Recorded(lab, result, entry["command"], entry["date"], entry["device"], entry["machine"])


def index_entry(lab: str, folder: Path) -> dict[str, str]:
    """The index's entry for `lab`, with every field the banner needs."""
    try:
        index = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
        entry = index["labs"][lab]
        return {name: str(entry[name]) for name in INDEX_FIELDS}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(
            f"The bundled lab results' index has no usable entry for {lab} ({one_line(exc)}): press Run for a live one."
        ) from exc
