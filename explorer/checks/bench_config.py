"""The benchmark's settings and their checks, torch-free: `python -m explorer bench` refuses a bad number before torch
is imported (`explorer.checks.bench` re-exports them beside the benchmark itself)."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.limits import check_range
from explorer.core.request import MAX_NEW_TOKENS_LIMIT, check_fits_context
from explorer.core.trace import DecodePath

MAX_PROMPT_TOKENS = 4096
MAX_BENCH_REPEATS = 50  # each repeat runs both sides once: 50 is minutes on a CPU, plenty for a median


@dataclass(frozen=True)
class BenchConfig:
    prompt_tokens: int = 128
    new_tokens: int = 64
    repeats: int = 5
    decode_path: DecodePath | None = None  # the explorer side's; None: the device's default (graph on CUDA)

    def validate(self, max_context: int | None = None) -> None:
        """Every number finite and bounded; with the model's context (from its config.json before it loads, or
        from the loaded model) the prompt and the new tokens must fit in it."""
        check_range("bench's prompt tokens", self.prompt_tokens, 1, MAX_PROMPT_TOKENS)
        check_range("bench's new tokens", self.new_tokens, 2, MAX_NEW_TOKENS_LIMIT)  # 2: one gap, one ITL
        check_range("bench's repeats", self.repeats, 1, MAX_BENCH_REPEATS)
        check_fits_context(self.new_tokens, max_context, prompt_tokens=self.prompt_tokens)
