"""What the sessions of one server process share: its one device and everything that lives as long as the process
(the loaded models, the queue for the device, the gate between timed passes and drawing, the warm-up, the device
figures, the live stepped requests, read-only caches). One object, created once per server
(`explorer.ui.shared.server_session`) and fresh in every test, so nothing a run leaves behind lives in a module. Pure
Python, no Streamlit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from explorer.core.device import FiguresStore
from explorer.core.loaded_model import LoadedModel
from explorer.hosting.pass_priority import PassPriority
from explorer.hosting.pass_threads import PassThreads
from explorer.hosting.queue import DeviceQueue
from explorer.hosting.quiet import SHARED_WITHIN_S, PassGate
from explorer.hosting.step_mode_requests import LiveSteps
from explorer.hosting.warm import Warmer
from explorer.models.loading import Progress, load_model

T = TypeVar("T")


class ModelStore:
    """Loaded models for every session of this server process, at most `capacity`, oldest evicted first. Loading draws
    into the caller's progress bar (why this is not a cached function)."""

    def __init__(self, capacity: int = 2) -> None:
        self.capacity = capacity
        self.models: dict[tuple[str, str, str], LoadedModel] = {}
        self.lock = threading.Lock()

    def get(self, name: str, device_choice: str, dtype: str, on_progress: Progress | None = None) -> LoadedModel:
        """The model `name` on `device_choice` ("auto", "cpu", "cuda"...) in `dtype`, loaded on first ask."""
        key = (name, device_choice, dtype)
        with self.lock:  # two sessions asking for the same new model load it once
            if key not in self.models:
                loaded = load_model(name, device_choice, dtype, on_progress=on_progress)
                while len(self.models) >= self.capacity:
                    self.models.pop(next(iter(self.models)))
                self.models[key] = loaded
            return self.models[key]


class ReadOnce(Generic[T]):
    """A value made on first ask and kept (an embedded tokenizer, a bundled file): read-only, so sharing it is safe."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._values: dict[object, T] = {}
        self._lock = threading.Lock()

    def get(self, key: object, make: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._values:
                while len(self._values) >= self.capacity:
                    self._values.pop(next(iter(self._values)))
                self._values[key] = make()
            return self._values[key]


@dataclass
class ServerSession:
    """The shared state of one server process. Every piece of work that runs the model takes its turn from `queue`,
    its model from `models` and its figures from `figures` (see `explorer.ui.admission`)."""

    models: ModelStore = field(default_factory=ModelStore)
    queue: DeviceQueue = field(default_factory=DeviceQueue)
    warmer: Warmer = field(default_factory=Warmer)
    figures: FiguresStore = field(default_factory=FiguresStore)
    gate: PassGate = field(default_factory=PassGate)  # timed passes and the drawing of pages kept apart
    threads: PassThreads = field(default_factory=PassThreads)  # a turn's torch threads, fitted to the free cores
    priority: PassPriority = field(default_factory=PassPriority)  # a turn's thread ahead of other work for the CPU
    steps: LiveSteps = field(default_factory=LiveSteps)  # every session's live stepped request, weakly held
    read_once: ReadOnce[object] = field(default_factory=ReadOnce)  # tokenizers and bundled files, read once

    def __post_init__(self) -> None:
        # The gate reads the crowd around a pass from the queue: the line for the device, and who used it lately.
        self.gate.in_line = lambda: self.queue.waiting
        self.gate.shared = lambda: self.queue.shared_within(SHARED_WITHIN_S)

    @classmethod
    def create(cls, turn_log: Path | None = None) -> ServerSession:
        """A session whose queue logs each turn to `turn_log` (the operator's setting), if any."""
        return cls(queue=DeviceQueue(log_path=turn_log))
