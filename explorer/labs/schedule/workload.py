"""The workload side of serving lab 2: what the user asks for, its validation, and how its prompts are chosen.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from explorer.core.errors import BadInput
from explorer.core.limits import is_finite

if TYPE_CHECKING:
    from explorer.core.loaded_model import LoadedModel

SCHEDULERS = {"fifo": "fifo", "prefill-first": "prefill_first"}  # our name -> transformers' SCHEDULER_MAPPING key
DEFAULT_PROMPT_TOKENS = (32, 32, 128, 32, 32, 32)  # one long prompt arriving while the others decode
MAX_REQUESTS = 32
MAX_PROMPT_TOKENS = 2048
MAX_NEW_TOKENS = 256
MIN_BLOCK_SIZE = 4  # transformers refuses a smaller page_size (continuous_batching/initialization.py BOUNDS)
MAX_TOKEN_BUDGET = 8192
MAX_NUM_BLOCKS = 4096
MAX_ARRIVAL_MS = 60_000.0  # a run lasts seconds: requests arriving later would only keep the engine idle

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        """Back from `dataclasses.asdict` (a recorded run, a lab job's body): its lists as tuples."""
        lists = ("prompt_tokens", "new_tokens", "arrivals_ms", "prompts")
        return cls(**{**data, **{name: tuple(data[name]) for name in lists if name in data}})


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
    if not all(is_finite(ms) for ms in (workload.stagger_ms, *workload.arrivals_ms)):
        raise BadInput("Arrival times and the stagger are numbers of ms: NaN and infinity are not.")
    if workload.arrivals_ms:
        if len(workload.arrivals_ms) != n:
            raise BadInput(f"{len(workload.arrivals_ms)} arrival times for {n} requests: give one per request.")
        if any(a < 0 for a in workload.arrivals_ms):
            raise BadInput("Arrival times must be 0 ms or later.")
        if any(b < a for a, b in zip(workload.arrivals_ms, workload.arrivals_ms[1:])):
            raise BadInput("Arrival times are out of order: list them from earliest to latest.")
    if workload.stagger_ms < 0:
        raise BadInput("The stagger between arrivals must be 0 ms or more.")
    if workload.arrival_ms(n - 1) > MAX_ARRIVAL_MS:
        raise BadInput(
            f"The last request would arrive at {workload.arrival_ms(n - 1):g} ms, past the lab's {MAX_ARRIVAL_MS:g} "
            "ms: lower the stagger or the arrival times."
        )
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


def check_prompt_chars(workload: Workload, max_chars: int) -> None:
    """Every text typed for the workload against a server's prompt cap (characters, before any tokenizing): one line
    naming the text that is too long, never a silent cut."""
    in_front = len(workload.prefix) + 1 if workload.prefix else 0  # the prefix and its newline precede each prompt
    with_prefix = " with the system prompt" if workload.prefix else ""
    lengths = [("The system prompt", len(workload.prefix))]
    lengths += [(f"Prompt {i + 1}{with_prefix}", in_front + len(p)) for i, p in enumerate(workload.prompts)]
    for what, chars in lengths:
        if chars > max_chars:
            raise BadInput(
                f"{what} is {chars:,} characters; this server takes at most {max_chars:,} characters per prompt: "
                "shorten it. Nothing ran."
            )


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
    from explorer.core.engine import tokenize

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
