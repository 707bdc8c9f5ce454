"""A request as the user asks for it, and every check of it that needs no model: torch-free, so the CLI refuses a bad
request before torch is imported and a page before anything is paid for (`explorer.core.engine` re-exports both)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from explorer.core.errors import BadInput
from explorer.core.limits import MAX_SEED, check_range
from explorer.core.trace import DECODE_PATHS, DecodePath, Sampling

DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."  # the sidebar's, and what the owner warms up with
DEFAULT_MAX_NEW_TOKENS = 32
MAX_NEW_TOKENS_LIMIT = 4096
MAX_REPEATS = 20
MAX_TEMPERATURE = 5.0  # the sidebar's bound: past a few, sampling is close to a uniform draw over the vocabulary
MAX_TOP_K = 1 << 20  # above any vocabulary; the sampler keeps min(top_k, vocabulary)


@dataclass(frozen=True)
class Request:
    prompt: str
    max_new_tokens: int = 32
    use_chat_template: bool = True
    sampling: Sampling = field(default_factory=Sampling)
    stop_at_eos: bool = True
    repeats: int = 1  # run the same request this many times in a row, for the spread of every timing
    decode_path: DecodePath | None = None  # None: the device's default (graph on CUDA, eager on a CPU)


def validate(request: Request, needs_prompt: bool = True) -> None:
    """Everything a request's own fields can be refused for; its prompt's length needs the tokenizer (engine)."""
    if needs_prompt and (not request.prompt or not request.prompt.strip()):
        raise BadInput("The prompt is empty: type some text to run.")
    check_range("max new tokens", request.max_new_tokens, 1, MAX_NEW_TOKENS_LIMIT)
    check_range("repeats", request.repeats, 1, MAX_REPEATS)
    validate_sampling(request.sampling)
    if request.decode_path is not None and request.decode_path not in DECODE_PATHS:
        raise BadInput(f"Unknown decode path '{request.decode_path}': use one of {', '.join(DECODE_PATHS)}.")


def validate_sampling(sampling: Sampling) -> None:
    check_range("temperature (0 means greedy)", sampling.temperature, 0, MAX_TEMPERATURE)
    if sampling.top_k is not None:
        check_range("top-k", sampling.top_k, 1, MAX_TOP_K)
    if sampling.seed is not None:
        check_range("seed", sampling.seed, 0, MAX_SEED)


def check_fits_context(new_tokens: int, max_context: int | None, prompt_tokens: int | None = None) -> None:
    """Before the model loads, from its config.json (`explorer.core.paths.context_without_loading`; None: unknown
    until it loads): the tokens asked for fit its context. Without `prompt_tokens` (a typed prompt, not yet
    tokenized) the prompt counts as one token; its real length is checked once tokenized, still before any run."""
    if max_context is None:
        return
    if prompt_tokens is None and new_tokens >= max_context:
        raise BadInput(
            f"{new_tokens} new tokens leave no room for a prompt in the model's context of {max_context} tokens: "
            "ask for fewer new tokens."
        )
    if prompt_tokens is not None and prompt_tokens + new_tokens > max_context:
        raise BadInput(
            f"{prompt_tokens} prompt + {new_tokens} new tokens exceed the model's context of {max_context} tokens: "
            "ask for fewer tokens."
        )


def seeded(sampling: Sampling) -> Sampling:
    """A sampled run gets a seed recorded, so it can be replayed (and every repeat draws the same tokens)."""
    if sampling.is_greedy or sampling.seed is not None:
        return sampling
    return Sampling(sampling.temperature, sampling.top_k, int.from_bytes(os.urandom(4), "little"))


def request_from_dict(data: object) -> Request:
    """A request as a job's JSON carries it (`dataclasses.asdict`), checked field by field (pydantic) and then as any
    request is (`validate`): what a web tier sends the device owner is checked as a visitor's typing is."""
    from pydantic import TypeAdapter, ValidationError

    try:
        request = TypeAdapter(Request).validate_python(data)
    except ValidationError as exc:
        raise BadInput(f"A job's request is malformed: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}.") from None
    validate(request)
    return request
