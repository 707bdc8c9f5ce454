"""`python -m explorer soak`: many requests in one process through the app's own code path, watching the process's
resident memory (RSS) for growth. A benchmark to read, not a timed test.

The path is the app's (`explorer.ui.runner.execute_run`, without Streamlit): one `load_model`, then per run
`measure.measure(lm, request, on_pass=...)` (warm-up, device figures, the timed passes, figures kept honest) with a
per-pass callback that keeps each token as the page draws it, `attention.capture_attention(..., cap_bytes=...)`
under the server's cap on every few runs, and what the app keeps: the current run with its maps and up to five
earlier traces without them (the app's `RunResult` and history).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from explorer.core.errors import BadInput
from explorer.core.limits import check_range
from explorer.core.request import MAX_NEW_TOKENS_LIMIT
from explorer.core.trace import JsonRecord
from explorer.core.units import megabytes

DEFAULT_RUNS = 100
DEFAULT_MAX_NEW_TOKENS = 8
DEFAULT_ATTENTION_EVERY = 5
HISTORY_LENGTH = 5  # as explorer.ui.state.HISTORY_LENGTH: earlier traces the app keeps, without attention maps
CHECKPOINT_RUNS = (10, 50, 100)
MAX_RUNS = 100_000
# Short prompts, cycled: a few tokens in and out keep each run to seconds on a CPU, most of them the app's own
# warm-up and device-figure checks (`measure`), which a soak of the app's path must pay too.
PROMPTS = (
    "Say hello.",
    "Name a colour.",
    "Count to three.",
    "What is two plus two?",
    "Give one word for happy.",
)

Progress = Callable[[float, str], None]


def rss_bytes() -> int:
    """Resident memory of this process now: /proc/self/statm's second field (pages) on Linux; elsewhere the peak
    from getrusage, which can only grow (the report says which)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


RSS_SOURCE = "/proc/self/statm (current RSS)" if os.path.exists("/proc/self/statm") else "getrusage (peak RSS)"


@dataclass(frozen=True)
class SoakConfig:
    runs: int = DEFAULT_RUNS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    attention_every: int = DEFAULT_ATTENTION_EVERY  # capture attention on runs 5, 10, 15, … (0: never)
    prompt: str | None = None  # None: cycle PROMPTS

    def validate(self) -> None:
        if not 1 <= self.runs <= MAX_RUNS:
            raise BadInput(f"--runs must be between 1 and {MAX_RUNS}, not {self.runs}.")
        check_range("--max-new-tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS_LIMIT)
        if not 0 <= self.attention_every <= MAX_RUNS:
            raise BadInput(f"--attention-every must be 0 (never) or a number of runs up to {MAX_RUNS}.")
        if self.prompt is not None and not self.prompt.strip():
            raise BadInput("The prompt is empty: leave --prompt out to cycle short prompts.")

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Runs 10, 50 and 100 where the soak reaches them, and always the last (and run 1 for a short soak)."""
        first = CHECKPOINT_RUNS[0] if self.runs >= CHECKPOINT_RUNS[0] else 1
        return tuple(sorted({first, self.runs, *(c for c in CHECKPOINT_RUNS if first < c < self.runs)}))

    def prompt_for(self, run: int) -> str:
        return self.prompt if self.prompt is not None else PROMPTS[(run - 1) % len(PROMPTS)]

    def captures_attention(self, run: int) -> bool:
        return self.attention_every > 0 and run % self.attention_every == 0


@dataclass(frozen=True)
class RssSample:
    run: int  # 0: after loading the model, before the first run
    rss_bytes: int
    elapsed_s: float  # since the soak started (after loading)
    new_tokens: int
    attention_captured: bool


@dataclass(frozen=True)
class SoakResult(JsonRecord):
    model: str
    device: str
    dtype: str
    config: SoakConfig
    rss_source: str
    rss_before_load_bytes: int
    samples: tuple[RssSample, ...]  # run 0 (after load), then one per run

    def rss_at(self, run: int) -> int:
        return next(s.rss_bytes for s in self.samples if s.run == run)

    @property
    def growth_bytes(self) -> int:
        """RSS at the last checkpoint minus RSS at the first (run 10 to run 100 by default)."""
        checkpoints = self.config.checkpoints
        return self.rss_at(checkpoints[-1]) - self.rss_at(checkpoints[0])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["checkpoints"] = {str(run): self.rss_at(run) for run in self.config.checkpoints}
        data["growth_bytes"] = self.growth_bytes
        data["growth_from_to"] = [self.config.checkpoints[0], self.config.checkpoints[-1]]
        return data


def run_soak(
    model: str,
    device: str,
    dtype: str,
    config: SoakConfig,
    on_checkpoint: Callable[[RssSample], None] | None = None,
    on_progress: Progress | None = None,
) -> SoakResult:
    """Load once, then `config.runs` requests the way the app runs them; RSS is read after every run."""
    from explorer.core.attention import capture_attention
    from explorer.core.device import FiguresStore
    from explorer.core.engine import OnPass, Request
    from explorer.core.measure import measure
    from explorer.core.trace import PassRecord
    from explorer.hosting.settings import HostedPolicy
    from explorer.models.loading import load_model

    config.validate()
    cap_bytes = HostedPolicy.from_env().attention_cap_bytes  # the app's cap: the hosted one, or None (the default)
    before_load = rss_bytes()
    lm = load_model(model, device, dtype, on_progress=on_progress)
    figures = FiguresStore()  # the soak's own, as a server's session keeps one: measured once, then reused
    started = time.perf_counter()
    samples = [RssSample(0, rss_bytes(), 0.0, 0, False)]
    current: tuple[object, object | None] | None = None  # (trace, attention maps): the app's current RunResult
    history: deque[object] = deque(maxlen=HISTORY_LENGTH)  # earlier traces; their maps are dropped, as in the app
    for run in range(1, config.runs + 1):
        streamed: list[str] = []

        def on_pass(p: PassRecord, streamed: list[str] = streamed) -> None:
            streamed.append(p.token_text)  # the app draws each token as its pass finishes

        request = Request(prompt=config.prompt_for(run), max_new_tokens=config.max_new_tokens)
        trace = measure(lm, request, figures, on_pass=OnPass(see=on_pass))
        if current is not None:
            history.append(current[0])
        current = (trace, None)
        captured = config.captures_attention(run)
        if captured:
            current = (trace, capture_attention(lm, trace, cap_bytes=cap_bytes))
        sample = RssSample(run, rss_bytes(), time.perf_counter() - started, trace.new_tokens, captured)
        samples.append(sample)
        if on_progress:
            on_progress(run / config.runs, f"run {run} of {config.runs}: RSS {megabytes(sample.rss_bytes)}")
        if on_checkpoint and run in config.checkpoints:
            on_checkpoint(sample)
    return SoakResult(
        model=lm.info.display_name,
        device=lm.torch_device.type,
        dtype=lm.info.dtype,
        config=config,
        rss_source=RSS_SOURCE,
        rss_before_load_bytes=before_load,
        samples=tuple(samples),
    )
