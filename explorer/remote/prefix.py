"""The prefix-reuse experiment: one long system prompt with a question, the same prompt with another question (its
prefix can come from the engine's prefix cache), then the prompt with its first word changed (one token: the cached
blocks no longer match). Sent one at a time, each between two readings of the server's /metrics, so the cached
prompt tokens and the prefill time of each request are the server's own, exactly."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.remote import wire
from explorer.remote.deadlines import Deadline, Watchdog
from explorer.remote.endpoint import Endpoint
from explorer.remote.sweep import SweepRun
from explorer.remote.watch import Watch

QUESTIONS = ("Why is the sky blue?", "Why do leaves change colour in autumn?")
MAX_TOKENS = 4  # the experiment is about the prompt: a few output tokens keep it short
TIMEOUT_S = 120.0  # one request: a cold prefill of ~900 tokens took ~1.3 s on 2 CPU cores
# Long enough to span several KV blocks (vLLM's default block on CPU is 128 tokens; hits come in whole blocks).
RULES = (
    "Answer in plain words a curious student can follow.",
    "Say what is measured and what is modelled, and never mix the two.",
    "Give one example with numbers whenever a number helps.",
    "Prefer a short answer; stop when the question is answered.",
    "When you are not sure, say so and say what would settle it.",
    "Name the unit of every figure you give.",
)
SYSTEM_BODY = "are a patient tutor who explains how language models are served. " + " ".join(
    f"Rule {i + 1}.{j + 1}: {rule}" for i in range(6) for j, rule in enumerate(RULES)
)
FIRST_WORDS = ("You", "We")  # the one-token change, at the very start: no cached block of the first prompt matches

STEPS = ("first (cold)", "same prefix, another question", "prefix changed by one token")


@dataclass(frozen=True)
class PrefixStep:
    """One request of the experiment: the client's TTFT and the server's account of its prompt."""

    label: str  # one of STEPS
    question: str
    ttft_s: float | None  # measured (client)
    prompt_tokens: int | None  # the server's usage
    cached_tokens_usage: int | None  # usage.prompt_tokens_details.cached_tokens, where the server sends it
    cached_tokens_server: float | None  # the /metrics delta of prompt_tokens_cached_total over this request
    prefill_s_server: float | None  # the /metrics delta of the prefill histogram's sum
    error: str = ""


@dataclass(frozen=True)
class PrefixResult:
    endpoint: Endpoint
    system_prompt: str  # the first request's; the third changes its first word
    steps: tuple[PrefixStep, ...]
    metrics_note: str  # why the server's figures are missing, or ""
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrefixResult:
        return cls(
            endpoint=Endpoint(**data["endpoint"]),
            system_prompt=str(data["system_prompt"]),
            steps=tuple(PrefixStep(**step) for step in data["steps"]),
            metrics_note=str(data.get("metrics_note") or ""),
            created_at=str(data["created_at"]),
        )


def system_prompts(nonce: str) -> tuple[str, str]:
    """(the shared prompt, the same with its first word changed). The nonce, after the first word, makes each run's
    first request cold: no earlier run left these blocks in the cache."""
    return tuple(f"{word} (run {nonce}) {SYSTEM_BODY}" for word in FIRST_WORDS)  # type: ignore[return-value]


def run_prefix_experiment(
    endpoint: Endpoint, api_key: str | None = None, nonce: str | None = None, timeout_s: float = TIMEOUT_S
) -> PrefixResult:
    """The three requests in turn; a failed one is its line in the result, never raised past it."""
    shared, changed = system_prompts(nonce or secrets.token_hex(3))
    plan = ((STEPS[0], shared, QUESTIONS[0]), (STEPS[1], shared, QUESTIONS[1]), (STEPS[2], changed, QUESTIONS[0]))
    watch = Watch(endpoint.base_url, api_key, poll_interval_s=0)  # one request at a time: no gauges to poll
    steps = []
    with (
        Watchdog(Deadline.after(timeout_s * len(plan))) as watchdog,
        wire.open_client(1, timeout_s) as client,
    ):
        for label, system, question in plan:
            request = wire.StreamRequest(endpoint, question, MAX_TOKENS, api_key, timeout_s, system=system)
            run = SweepRun(request, client, watchdog, None)
            with watch.around() as batch:
                try:
                    record, error = run.send(request), ""
                    batch.expect(1)
                except ExplorerError as exc:
                    record, error = None, str(exc)
            delta = batch.delta
            steps.append(
                PrefixStep(
                    label=label,
                    question=question,
                    ttft_s=record.ttft_s if record else None,
                    prompt_tokens=record.prompt_tokens if record else None,
                    cached_tokens_usage=record.cached_tokens if record else None,
                    cached_tokens_server=delta.counter("cached_prompt_tokens") if delta else None,
                    prefill_s_server=delta.total_s("prefill") if delta else None,
                    error=error,
                )
            )
    created_at = datetime.now(UTC).isoformat(timespec="seconds")
    return PrefixResult(endpoint, shared, tuple(steps), watch.unavailable, created_at)
