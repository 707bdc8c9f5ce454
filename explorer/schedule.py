"""Serving lab 2: a workload of requests served by transformers' continuous batching engine, step by step.

This module owns the data model (`Workload`, `EngineSettings`, `ScheduleRun` of `StepRecord`s and
`RequestRecord`s), the validation of a workload, how its prompts are chosen, and `run_schedule()`, which runs the
engine (instrumented in `explorer.schedule_engine`) and, on request, the baselines (`explorer.schedule_baselines`).

How prompts are chosen, so that any request can be checked alone with
`python -m explorer run --no-chat-template --max-new-tokens N --prompt TEXT`:
- Given prompt texts are used as typed. Otherwise request i gets plain English text from a fixed corpus, starting
  at sentence i, extended word by word while it stays within its prompt-token target (the target counts the
  request's own text; the last word that would overshoot is left out, so a prompt can be a token or two short).
- A shared prefix is written in front as `PREFIX + "\\n" + TEXT`.
- The text is tokenized exactly as `run --no-chat-template` tokenizes it (no chat template), and the run keeps each
  request's `prompt_text` and `prompt_token_ids`, so the JSON says exactly what to pass to `run`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from explorer.errors import BadInput
from explorer.trace import percentile

if TYPE_CHECKING:
    from explorer.loading import LoadedModel

SCHEDULERS = {"fifo": "fifo", "prefill-first": "prefill_first"}  # our name -> transformers' SCHEDULER_MAPPING key
DEFAULT_PROMPT_TOKENS = (32, 32, 128, 32, 32, 32)  # one long prompt arriving while the others decode
MAX_REQUESTS = 32
MAX_PROMPT_TOKENS = 2048
MAX_NEW_TOKENS = 256
MIN_BLOCK_SIZE = 4  # transformers refuses a smaller page_size (continuous_batching/initialization.py BOUNDS)
MAX_TOKEN_BUDGET = 8192
MAX_NUM_BLOCKS = 4096

Progress = Callable[[float, str], None]  # (fraction done 0..1, what is happening)

CORPUS = (
    "The printing press spread across Europe within a few decades of its invention.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
    "A good loaf of bread needs flour, water, salt, yeast and a long, patient rise.",
    "The Pacific Ocean covers more of the planet than all of the land put together.",
    "Early railways changed how far a person could travel in a single day.",
    "Honeybees share the location of flowers with a dance inside the hive.",
    "The first computers filled whole rooms and were programmed with switches and cables.",
    "Mountains form where plates of the earth's crust push against each other.",
    "A violin is carved from spruce and maple and strung with four strings.",
    "Tides rise and fall twice a day because of the pull of the moon and the sun.",
    "Libraries once chained their books to the shelves because every copy was precious.",
    "Coffee was first brewed from roasted beans in the highlands of the Red Sea coast.",
)


# --- what the user asks for ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """The requests to serve: how many, their prompts, how many tokens each asks for, and when each arrives."""

    requests: int = 6
    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT_TOKENS  # targets, cycled over the requests; unused with prompts
    new_tokens: tuple[int, ...] = (16,)  # max new tokens, cycled over the requests
    stagger_ms: float = 100.0  # request i arrives at i x stagger_ms (0: all at once)
    arrivals_ms: tuple[float, ...] = ()  # explicit arrival times, one per request; overrides stagger_ms
    prompts: tuple[str, ...] = ()  # prompt texts, one per request; overrides prompt_tokens
    prefix: str = ""  # a shared prefix (system prompt) written in front of every prompt
    stop_at_eos: bool = False  # False: every request makes exactly its new tokens, as the baselines do

    def arrival_ms(self, index: int) -> float:
        return self.arrivals_ms[index] if self.arrivals_ms else index * self.stagger_ms

    def new_tokens_of(self, index: int) -> int:
        return self.new_tokens[index % len(self.new_tokens)]

    def prompt_tokens_of(self, index: int) -> int:
        return self.prompt_tokens[index % len(self.prompt_tokens)]


@dataclass(frozen=True)
class EngineSettings:
    """The continuous batching engine's knobs, in our words; `cb_config_kwargs()` says what each is in transformers."""

    scheduler: str = "fifo"  # "fifo" (decodes first) | "prefill-first"
    token_budget: int = 64  # tokens one step may compute; a longer prompt is prefilled in chunks
    block_size: int = 16  # tokens per KV block (transformers' page_size)
    num_blocks: int = 64  # KV blocks in the paged cache
    prefix_sharing: bool = True  # reuse complete KV blocks of an identical prompt prefix

    def cb_config_kwargs(self) -> dict[str, Any]:
        return {
            "scheduler_type": SCHEDULERS[self.scheduler],
            "max_batch_tokens": self.token_budget,
            "page_size": self.block_size,
            "num_blocks": self.num_blocks,
            "allow_block_sharing": self.prefix_sharing,
        }


def validate(workload: Workload, settings: EngineSettings) -> None:
    """Shape checks that need no model: each failure is one line that says what to change."""
    n = workload.requests
    if n < 1:
        raise BadInput("No requests: set at least one request.")
    if n > MAX_REQUESTS:
        raise BadInput(f"{n} requests is more than this lab serves ({MAX_REQUESTS}): use fewer requests.")
    if workload.prompts and len(workload.prompts) != n:
        raise BadInput(f"{len(workload.prompts)} prompt texts for {n} requests: give one prompt per request.")
    if any(not p.strip() for p in workload.prompts):
        raise BadInput("A prompt text is empty: type some text for every request.")
    if not workload.prompts and not workload.prompt_tokens:
        raise BadInput("No prompt lengths: give at least one prompt-token count.")
    if any(not 1 <= t <= MAX_PROMPT_TOKENS for t in workload.prompt_tokens):
        raise BadInput(f"Prompt lengths must be between 1 and {MAX_PROMPT_TOKENS} tokens.")
    if not workload.new_tokens or any(not 1 <= t <= MAX_NEW_TOKENS for t in workload.new_tokens):
        raise BadInput(f"New tokens must be between 1 and {MAX_NEW_TOKENS} per request.")
    if workload.arrivals_ms:
        if len(workload.arrivals_ms) != n:
            raise BadInput(f"{len(workload.arrivals_ms)} arrival times for {n} requests: give one per request.")
        if any(a < 0 for a in workload.arrivals_ms):
            raise BadInput("Arrival times must be 0 ms or later.")
        if any(b < a for a, b in zip(workload.arrivals_ms, workload.arrivals_ms[1:])):
            raise BadInput("Arrival times are out of order: list them from earliest to latest.")
    if workload.stagger_ms < 0:
        raise BadInput("The stagger between arrivals must be 0 ms or more.")
    if settings.scheduler not in SCHEDULERS:
        raise BadInput(f"Unknown scheduler '{settings.scheduler}': use one of {', '.join(SCHEDULERS)}.")
    if settings.block_size < MIN_BLOCK_SIZE:
        raise BadInput(f"A KV block must hold at least {MIN_BLOCK_SIZE} tokens, not {settings.block_size}.")
    if settings.token_budget < settings.block_size:
        raise BadInput(
            f"A token budget of {settings.token_budget} is below one KV block ({settings.block_size} tokens): raise "
            f"the budget to at least {settings.block_size}."
        )
    if settings.token_budget > MAX_TOKEN_BUDGET:
        raise BadInput(f"A token budget over {MAX_TOKEN_BUDGET} tokens per step is not useful here: lower it.")
    if not 1 <= settings.num_blocks <= MAX_NUM_BLOCKS:
        raise BadInput(f"The number of KV blocks must be between 1 and {MAX_NUM_BLOCKS}.")


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """'32, 32,128' -> (32, 32, 128), shared by the CLI and the page."""
    try:
        values = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise BadInput(f"{what} takes comma-separated whole numbers, not '{text}'.") from exc
    if not values:
        raise BadInput(f"{what} is empty: give at least one number.")
    return values


def parse_float_list(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise BadInput(f"{what} takes comma-separated numbers, not '{text}'.") from exc


# --- the planned requests --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedRequest:
    """One request as the engine and the baselines receive it."""

    id: str  # "r0", "r1", ... in arrival order
    prompt_text: str  # what `run --no-chat-template --prompt` needs to reproduce it
    prompt_token_ids: tuple[int, ...]
    prefix_tokens: int  # how many leading prompt tokens are the shared prefix's
    max_new_tokens: int
    arrival_s: float  # after the run's start


def tokenize_raw(lm: LoadedModel, text: str) -> list[int]:
    from explorer.engine import tokenize

    return tokenize(lm, text, use_chat_template=False)  # exactly as `run --no-chat-template` does


def corpus_text(lm: LoadedModel, index: int, target_tokens: int) -> str:
    """Corpus words from sentence `index` on, as many as stay within `target_tokens` (at least one word)."""
    words = " ".join(CORPUS[(index + k) % len(CORPUS)] for k in range(len(CORPUS))).split()
    text = words[0]
    for k in range(1, 100 * len(words)):
        candidate = f"{text} {words[k % len(words)]}"
        if len(tokenize_raw(lm, candidate)) > target_tokens:
            break
        text = candidate
    return text


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def plan_requests(lm: LoadedModel, workload: Workload) -> tuple[PlannedRequest, ...]:
    """Texts, token ids and arrival times of every request, in arrival order."""
    prefix_ids = tokenize_raw(lm, workload.prefix) if workload.prefix else []
    planned = []
    for i in range(workload.requests):
        body = workload.prompts[i] if workload.prompts else corpus_text(lm, i, workload.prompt_tokens_of(i))
        text = f"{workload.prefix}\n{body}" if workload.prefix else body
        ids = tuple(tokenize_raw(lm, text))
        if not ids:
            raise BadInput(f"Prompt {i} produced no tokens: type some text for it.")
        planned.append(
            PlannedRequest(
                id=f"r{i}",
                prompt_text=text,
                prompt_token_ids=ids,
                # The tokenizer may merge across the boundary, so count the tokens that really are the prefix's.
                prefix_tokens=common_prefix_len(prefix_ids, ids),
                max_new_tokens=workload.new_tokens_of(i),
                arrival_s=workload.arrival_ms(i) / 1e3,
            )
        )
    return tuple(planned)


def blocks_needed(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size)


def check_fits(lm: LoadedModel, planned: Sequence[PlannedRequest], settings: EngineSettings) -> None:
    """Every request at its longest must fit the model's context, and all of them at once the KV blocks.

    Counting every request at its longest with nothing shared is stricter than the engine needs, but it rules out
    the engine's offloading path (with no CPU swap space it would re-prefill a request from scratch).
    """
    for r in planned:
        total = len(r.prompt_token_ids) + r.max_new_tokens
        if total > lm.info.max_context:
            raise BadInput(
                f"Request {r.id} needs {total} tokens, over {lm.info.display_name}'s context of "
                f"{lm.info.max_context}: shorten its prompt or lower its new tokens."
            )
    need = sum(blocks_needed(len(r.prompt_token_ids) + r.max_new_tokens, settings.block_size) for r in planned)
    if need > settings.num_blocks:
        raise BadInput(
            f"Too many tokens for the KV blocks: the {len(planned)} requests need up to {need} blocks of "
            f"{settings.block_size} tokens (each at its longest) but the cache has {settings.num_blocks}: raise the "
            "number of blocks, or use fewer or shorter requests."
        )


# --- what a run records ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepEntry:
    """One request's share of one engine step."""

    request: str
    prefill_tokens: int  # prompt tokens computed for it in this step (0 when it decodes)
    decode_tokens: int  # 1 when it decodes in this step, else 0
    chunk: int  # which chunk of its prefill this is (1, 2, ...); 0 for a decode
    completes_prefill: bool  # this step computes its last prompt token, so it samples its first token


@dataclass(frozen=True)
class BlockHolding:
    """The KV blocks one request holds after a step is scheduled (its block table)."""

    request: str
    blocks: tuple[int, ...]  # block numbers 0 .. num_blocks - 1, in the order of the request's positions
    tokens: int  # positions of the request in the cache once this step has run


@dataclass(frozen=True)
class PrefixHit:
    """Blocks of a prompt found in the cache and shared instead of computed."""

    request: str
    tokens: int
    blocks: int


@dataclass(frozen=True)
class StepRecord:
    """One engine step: one forward pass over every scheduled request's tokens, packed into one sequence."""

    index: int
    start_s: float  # measured: when the forward began, after the run's start
    wall_s: float  # measured: forward, sampling and fetching the new tokens
    schedule_s: float  # measured: the scheduler, block allocation and input tensors, before the forward
    update_s: float  # measured: handing the new tokens back to their requests, after the forward
    entries: tuple[StepEntry, ...]
    holdings: tuple[BlockHolding, ...]
    free_blocks: int
    cached_blocks: int  # blocks no request holds, kept for their content (prefix reuse); freed on demand
    prefix_hits: tuple[PrefixHit, ...] = ()

    @property
    def prefill_tokens(self) -> int:
        return sum(e.prefill_tokens for e in self.entries)

    @property
    def decode_tokens(self) -> int:
        return sum(e.decode_tokens for e in self.entries)

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def is_mixed(self) -> bool:
        """Prefill and decode tokens in one forward pass: what continuous batching allows and static batching not."""
        return self.prefill_tokens > 0 and self.decode_tokens > 0

    @property
    def has_partial_prefill(self) -> bool:
        """Some prompt is computed only in part here (the token budget split it), or finishes a split begun earlier."""
        return any(e.prefill_tokens and (e.chunk > 1 or not e.completes_prefill) for e in self.entries)

    @property
    def kind(self) -> str:
        if self.is_mixed:
            return "mixed"
        return "prefill" if self.prefill_tokens else "decode"

    @property
    def end_s(self) -> float:
        return self.start_s + self.wall_s

    @property
    def blocks_held(self) -> int:
        """Distinct blocks held by requests: a block shared by two requests counts once."""
        return len({b for h in self.holdings for b in h.blocks})

    @property
    def shared_blocks(self) -> frozenset[int]:
        seen: set[int] = set()
        shared: set[int] = set()
        for h in self.holdings:
            shared |= seen & set(h.blocks)
            seen |= set(h.blocks)
        return frozenset(shared)


@dataclass(frozen=True)
class RequestRecord:
    """One request served by one mode: when it arrived, started, got each token, and which tokens."""

    id: str
    prompt_text: str
    prompt_token_ids: tuple[int, ...]
    prefix_tokens: int
    max_new_tokens: int
    arrival_s: float  # measured: when it was handed to the server, after the run's start
    start_s: float  # measured: when the first forward computing any of its tokens began
    token_times_s: tuple[float, ...]  # measured: when each generated token was available
    token_ids: tuple[int, ...]
    prefill_tokens_computed: int  # prompt tokens the server computed (fewer than the prompt where a prefix was reused)
    prefix_tokens_reused: int = 0

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def first_token_s(self) -> float:
        return self.token_times_s[0]

    @property
    def finish_s(self) -> float:
        return self.token_times_s[-1]

    @property
    def ttft_s(self) -> float:
        """Arrival to the first token: queue wait + prefill."""
        return self.first_token_s - self.arrival_s

    @property
    def queue_s(self) -> float:
        return self.start_s - self.arrival_s

    @property
    def prefill_s(self) -> float:
        """First forward with its tokens to its first token: chunks and other requests' work included."""
        return self.first_token_s - self.start_s

    @property
    def itl_s(self) -> tuple[float, ...]:
        return tuple(b - a for a, b in zip(self.token_times_s, self.token_times_s[1:]))

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def itl_p50_s(self) -> float | None:
        return percentile(self.itl_s, 50)

    @property
    def itl_p99_s(self) -> float | None:
        return percentile(self.itl_s, 99)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        derived = ("ttft_s", "queue_s", "prefill_s", "itl_s", "e2e_s", "finish_s", "itl_p50_s", "itl_p99_s")
        data.update({name: getattr(self, name) for name in derived})  # for readers of the JSON
        return data


@dataclass(frozen=True)
class TokenCheck:
    """A mode's greedy tokens for one request against the explorer's solo greedy run of the same prompt."""

    request: str
    matches: bool
    position: int | None = None  # first generated token that differs
    served_token: int | None = None
    solo_token: int | None = None
    explanation: str = ""  # which token and why, when they differ


@dataclass(frozen=True)
class ServedMode:
    """A whole workload served one way: continuous batching, static batching, or one request at a time."""

    mode: str
    requests: tuple[RequestRecord, ...]
    checks: tuple[TokenCheck, ...] = ()
    load_avg_1m: float | None = None  # the OS's 1-minute load average as the mode finished: others' work here

    @property
    def total_tokens(self) -> int:
        return sum(len(r.token_ids) for r in self.requests)

    @property
    def span_s(self) -> float:
        """First arrival to the last token of any request."""
        return max(r.finish_s for r in self.requests) - min(r.arrival_s for r in self.requests)

    @property
    def tokens_per_s(self) -> float:
        return self.total_tokens / self.span_s if self.span_s > 0 else 0.0

    @property
    def all_tokens_match(self) -> bool | None:
        return all(c.matches for c in self.checks) if self.checks else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "total_tokens": self.total_tokens,
            "span_s": self.span_s,
            "tokens_per_s": self.tokens_per_s,
            "load_avg_1m": self.load_avg_1m,
            "requests": [r.to_dict() for r in self.requests],
            "checks": [asdict(c) for c in self.checks],
        }


CONTINUOUS, STATIC, SEQUENTIAL = "continuous batching", "static batching", "one at a time"


@dataclass(frozen=True)
class ScheduleRun:
    """The engine's run of a workload: every step and every request, plus the comparisons asked for."""

    workload: Workload
    settings: EngineSettings
    model: str  # display name
    dtype: str
    device: str
    kv_bytes_per_token: int  # K and V of every layer for one position
    engine_num_blocks: int  # as the engine built the cache (the requested number, rounded up to whole sectors)
    steps: tuple[StepRecord, ...]
    requests: tuple[RequestRecord, ...]
    checks: tuple[TokenCheck, ...] = ()
    baselines: tuple[ServedMode, ...] = ()  # static batching and one at a time, when compared
    prefix_off: ScheduleRun | None = None  # the same workload with prefix sharing off, when a prefix is set
    load_avg_1m: float | None = None  # the OS's 1-minute load average as the engine's run finished
    transformers_version: str = ""
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def served(self) -> ServedMode:
        return ServedMode(CONTINUOUS, self.requests, self.checks, self.load_avg_1m)

    @property
    def modes(self) -> tuple[ServedMode, ...]:
        return (self.served, *self.baselines)

    @property
    def prefill_tokens_computed(self) -> int:
        return sum(s.prefill_tokens for s in self.steps)

    @property
    def prefix_tokens_reused(self) -> int:
        return sum(h.tokens for s in self.steps for h in s.prefix_hits)

    @property
    def block_bytes(self) -> int:
        return self.settings.block_size * self.kv_bytes_per_token

    def request(self, request_id: str) -> RequestRecord:
        return next(r for r in self.requests if r.id == request_id)

    def summary(self) -> dict[str, Any]:
        return {
            "steps": len(self.steps),
            "mixed_steps": sum(s.is_mixed for s in self.steps),
            "steps_with_partial_prefill": sum(s.has_partial_prefill for s in self.steps),
            "prefill_tokens_computed": self.prefill_tokens_computed,
            "prefix_tokens_reused": self.prefix_tokens_reused,
            "total_tokens": self.served.total_tokens,
            "tokens_per_s": self.served.tokens_per_s,
            "all_tokens_match_solo": self.served.all_tokens_match,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": asdict(self.workload),
            "settings": asdict(self.settings),
            "model": self.model,
            "dtype": self.dtype,
            "device": self.device,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "engine_num_blocks": self.engine_num_blocks,
            "load_avg_1m": self.load_avg_1m,
            "transformers_version": self.transformers_version,
            "created_at": self.created_at,
            "summary": self.summary(),
            "steps": [
                {**asdict(s), "prefill_tokens": s.prefill_tokens, "decode_tokens": s.decode_tokens, "kind": s.kind}
                for s in self.steps
            ],
            "requests": [r.to_dict() for r in self.requests],
            "checks": [asdict(c) for c in self.checks],
            "comparison": [m.to_dict() for m in self.modes] if self.baselines else [],
            "prefix_off": self.prefix_off.to_dict() if self.prefix_off else None,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def load_average() -> float | None:
    """The 1-minute load average, kept beside each measurement: on a shared machine it says how busy it was."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


# --- the run ---------------------------------------------------------------------------------------------------------
def run_schedule(
    lm: LoadedModel,
    workload: Workload,
    settings: EngineSettings,
    *,
    compare: bool = False,
    on_progress: Progress | None = None,
) -> ScheduleRun:
    """Serve the workload with the engine, then check every request's tokens against a solo greedy run.

    With a prefix and prefix sharing on, the engine serves the workload again with sharing off. With `compare`, the
    solo runs are timed as a one-at-a-time server (arrival times kept) and static batching serves it too.
    """
    from explorer import schedule_baselines as baselines
    from explorer import schedule_engine as engine
    from explorer.device import device_profile

    def progress(start: float, end: float) -> Progress | None:
        if on_progress is None:
            return None
        return lambda fraction, text: on_progress(start + (end - start) * fraction, text)

    validate(workload, settings)
    planned = plan_requests(lm, workload)
    check_fits(lm, planned, settings)
    profile = device_profile(lm.torch_device.type, lm.info.dtype)
    with_prefix_off = bool(workload.prefix) and settings.prefix_sharing
    engine.warm_up(lm, settings)
    steps, served, num_blocks = engine.serve(lm, planned, settings, workload.stop_at_eos, progress(0.0, 0.4))
    load = load_average()
    prefix_off = None
    if with_prefix_off:
        off = replace(settings, prefix_sharing=False)
        off_steps, off_served, _ = engine.serve(lm, planned, off, workload.stop_at_eos, progress(0.4, 0.55))
        prefix_off = (off, off_steps, off_served, load_average())
    modes: list[ServedMode] = []
    if compare:
        static = baselines.serve_static_batch(lm, planned, workload.stop_at_eos, progress(0.55, 0.7))
        static = replace(static, load_avg_1m=load_average())
        sequential, solo = baselines.serve_one_at_a_time(lm, planned, profile, workload.stop_at_eos, progress(0.7, 1))
        modes = [static, replace(sequential, load_avg_1m=load_average())]
    else:
        solo = baselines.solo_traces(lm, planned, profile, workload.stop_at_eos, progress(0.55, 1.0))
    check = baselines.check_against_solo
    modes = [replace(m, checks=check(m.requests, solo, lm.tokenizer)) for m in modes]

    import transformers

    def build(
        run_settings: EngineSettings,
        run_steps: tuple[StepRecord, ...],
        run_requests: tuple[RequestRecord, ...],
        run_load: float | None,
    ) -> ScheduleRun:
        return ScheduleRun(
            workload=workload,
            settings=run_settings,
            model=lm.info.display_name,
            dtype=lm.info.dtype,
            device=profile.name,
            kv_bytes_per_token=lm.info.kv_bytes_per_token,
            engine_num_blocks=num_blocks,
            steps=run_steps,
            requests=run_requests,
            checks=check(run_requests, solo, lm.tokenizer),
            load_avg_1m=run_load,
            transformers_version=transformers.__version__,
        )

    run = replace(build(settings, steps, served, load), baselines=tuple(modes))
    if prefix_off is not None:
        run = replace(run, prefix_off=build(*prefix_off))
    if on_progress:
        on_progress(1.0, "Done.")
    return run
