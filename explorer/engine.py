"""One request's life, instrumented: tokenize, ONE prefill pass into an empty KV cache, then cached one-token decodes.

Shaped like gpt-fast's generate.py: `prefill()` and `decode_one_token()` are the two forwards, `time_pass()` wraps
each of them and nothing else, and `generate()` only orchestrates and records a `PassRecord` per pass.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import torch

from explorer.device import device_profile
from explorer.errors import BadInput, RunFailed
from explorer.loading import LoadedModel
from explorer.roofline import pass_cost
from explorer.trace import DeviceProfile, PassRecord, Phase, Sampling, TopToken, Trace

MAX_NEW_TOKENS_LIMIT = 4096
TOP_K_SHOWN = 5
WARMUP_PROMPT_TOKENS = 8
WARMUP_DECODES = 2

OnPass = Callable[[PassRecord], None]


@dataclass(frozen=True)
class Request:
    prompt: str
    max_new_tokens: int = 32
    use_chat_template: bool = True
    sampling: Sampling = field(default_factory=Sampling)
    stop_at_eos: bool = True


# --- the two forwards ------------------------------------------------------------------------------------------------
def new_cache(model: torch.nn.Module) -> object:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)  # one cache per request, never stored on the model


@torch.inference_mode()
def prefill(model: torch.nn.Module, input_ids: torch.Tensor, cache: object) -> torch.Tensor:
    # input_ids: (B, T) -> logits (B, vocab) for the last position; writes T positions into the empty cache.
    assert cache.get_seq_length() == 0, "prefill starts from an empty KV cache"
    # Only the last position's logits are needed to pick the next token.
    return model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1, :]


@torch.inference_mode()
def decode_one_token(model: torch.nn.Module, input_ids: torch.Tensor, cache: object) -> torch.Tensor:
    # input_ids: (B, 1) -> logits (B, vocab); reads every cached position, appends one.
    assert input_ids.shape[-1] == 1, "a decode pass computes exactly one new token"
    return model(input_ids=input_ids, past_key_values=cache, use_cache=True).logits[:, -1, :]


def time_pass(device: torch.device, forward: Callable[..., torch.Tensor], *args: object) -> tuple[torch.Tensor, float]:
    """Synchronize, read the clock, forward, synchronize, read the clock: the pass alone, in seconds."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        out = forward(*args)
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1000.0
    started = time.perf_counter()
    out = forward(*args)
    return out, time.perf_counter() - started


# --- sampling --------------------------------------------------------------------------------------------------------
def sample(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> torch.Tensor:
    # logits: (B, vocab) -> (B, 1) token ids
    if sampling.is_greedy:
        return logits.argmax(dim=-1, keepdim=True)
    scaled = logits.float() / sampling.temperature
    if sampling.top_k:
        kth = scaled.topk(min(sampling.top_k, scaled.shape[-1]), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=generator)


def top_tokens(logits: torch.Tensor, tokenizer: object) -> tuple[TopToken, ...]:
    probs, ids = torch.softmax(logits[0].float(), dim=-1).topk(TOP_K_SHOWN)
    return tuple(
        TopToken(token_id=i, text=token_text(tokenizer, i), prob=p) for i, p in zip(ids.tolist(), probs.tolist())
    )


def token_text(tokenizer: object, token_id: int) -> str:
    return tokenizer.decode([token_id])


def cache_layer_bytes(cache: object) -> tuple[int, ...]:
    """Bytes held by the real K and V tensors, layer by layer."""
    return tuple(
        layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
        if getattr(layer, "keys", None) is not None
        else 0
        for layer in cache.layers
    )


# --- the request -----------------------------------------------------------------------------------------------------
def tokenize(lm: LoadedModel, prompt: str, use_chat_template: bool) -> list[int]:
    if use_chat_template and lm.has_chat_template:
        encoded = lm.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
        )
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return [int(i) for i in ids[0].tolist()]
    return [int(i) for i in lm.tokenizer(prompt, add_special_tokens=True)["input_ids"]]


def validate(request: Request, needs_prompt: bool = True) -> None:
    if needs_prompt and (not request.prompt or not request.prompt.strip()):
        raise BadInput("The prompt is empty: type some text to run.")
    if not 1 <= request.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
        raise BadInput(f"max new tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}, not {request.max_new_tokens}.")
    if request.sampling.temperature < 0:
        raise BadInput("temperature must be >= 0 (0 means greedy).")
    if request.sampling.top_k is not None and request.sampling.top_k < 1:
        raise BadInput("top-k must be >= 1.")


def check_context(lm: LoadedModel, prompt_len: int, max_new_tokens: int) -> None:
    limit = lm.info.max_context
    if prompt_len + max_new_tokens > limit:
        raise BadInput(
            f"The prompt is {prompt_len} tokens; with {max_new_tokens} new tokens it exceeds {lm.info.display_name}'s "
            f"context of {limit} tokens: shorten the prompt or lower max new tokens."
        )


def warm_up(lm: LoadedModel) -> None:
    """A short prefill and a few decodes first: the first forwards of a process pay for lazy kernel setup."""
    ids = torch.arange(WARMUP_PROMPT_TOKENS, device=lm.torch_device).remainder(lm.info.vocab_size)[None, :]
    cache = new_cache(lm.model)
    logits = prefill(lm.model, ids, cache)
    for _ in range(WARMUP_DECODES):
        logits = decode_one_token(lm.model, logits.argmax(-1, keepdim=True), cache)
    if lm.torch_device.type == "cuda":
        torch.cuda.synchronize(lm.torch_device)


def record_pass(
    lm: LoadedModel,
    device: DeviceProfile,
    index: int,
    phase: Phase,
    input_ids: list[int],
    cache_len_before: int,
    cache: object,
    start_s: float,
    wall_s: float,
    logits: torch.Tensor,
    token_id: int,
) -> PassRecord:
    cache_len_after = cache.get_seq_length()
    layer_bytes = cache_layer_bytes(cache)
    cost = pass_cost(lm.info, device, len(input_ids), cache_len_after)
    return PassRecord(
        index=index,
        phase=phase,
        tokens_in=len(input_ids),
        cache_len_before=cache_len_before,
        cache_len_after=cache_len_after,
        kv_cache_bytes=sum(layer_bytes),
        kv_layer_bytes=layer_bytes,
        start_s=start_s,
        wall_s=wall_s,
        flops=cost.flops,
        weight_bytes_read=cost.weight_bytes_read,
        kv_bytes_read=cost.kv_bytes_read,
        kv_bytes_written=cost.kv_bytes_written,
        t_weight_read_s=cost.t_weight_read_s,
        t_kv_read_s=cost.t_kv_read_s,
        t_compute_s=cost.t_compute_s,
        token_id=token_id,
        token_text=token_text(lm.tokenizer, token_id),
        top_tokens=top_tokens(logits, lm.tokenizer),
        input_token_ids=tuple(input_ids),
    )


def generate(
    lm: LoadedModel,
    request: Request,
    *,
    device: DeviceProfile | None = None,
    on_pass: OnPass | None = None,
    warmup: bool = True,
    prompt_token_ids: list[int] | None = None,
) -> Trace:
    """Run one request and return its Trace. `prompt_token_ids` skips tokenization (the benchmark's fixed prompts)."""
    validate(request, needs_prompt=prompt_token_ids is None)
    # Refuse a prompt that cannot fit before paying for the device profile and warm-up; the timed request below
    # tokenizes again, because TTFT counts tokenization.
    checked = (
        prompt_token_ids if prompt_token_ids is not None else tokenize(lm, request.prompt, request.use_chat_template)
    )
    if not checked:
        raise BadInput("The prompt produced no tokens: type some text to run.")
    check_context(lm, len(checked), request.max_new_tokens)
    if device is None:
        device = device_profile(lm.torch_device.type, lm.info.dtype)
    if warmup:
        warm_up(lm)
    sampling = request.sampling
    if not sampling.is_greedy and sampling.seed is None:  # record a seed so every sampled run can be replayed
        sampling = Sampling(sampling.temperature, sampling.top_k, int.from_bytes(os.urandom(4), "little"))
    generator = None
    if not sampling.is_greedy:
        generator = torch.Generator(device=lm.torch_device).manual_seed(sampling.seed)

    request_start = time.perf_counter()  # TTFT counts tokenization
    ids = prompt_token_ids if prompt_token_ids is not None else tokenize(lm, request.prompt, request.use_chat_template)

    passes: list[PassRecord] = []
    token_times: list[float] = []
    stop_reason = "max_new_tokens"
    try:
        cache = new_cache(lm.model)
        input_ids = torch.tensor([ids], device=lm.torch_device)  # (1, T)
        start_s = time.perf_counter() - request_start
        logits, wall_s = time_pass(lm.torch_device, prefill, lm.model, input_ids, cache)
        next_id = int(sample(logits, sampling, generator).item())
        token_times.append(time.perf_counter())
        passes.append(record_pass(lm, device, 0, "prefill", ids, 0, cache, start_s, wall_s, logits, next_id))
        if on_pass:
            on_pass(passes[-1])
        while True:
            if request.stop_at_eos and next_id in lm.eos_token_ids:
                stop_reason = "eos"
                break
            if len(passes) >= request.max_new_tokens:
                break
            cache_len_before = cache.get_seq_length()
            token = torch.tensor([[next_id]], device=lm.torch_device)  # (1, 1)
            start_s = time.perf_counter() - request_start
            logits, wall_s = time_pass(lm.torch_device, decode_one_token, lm.model, token, cache)
            fed_id, next_id = next_id, int(sample(logits, sampling, generator).item())
            token_times.append(time.perf_counter())
            record = record_pass(
                lm, device, len(passes), "decode", [fed_id], cache_len_before, cache, start_s, wall_s, logits, next_id
            )
            passes.append(record)
            if on_pass:
                on_pass(passes[-1])
    except torch.OutOfMemoryError as exc:
        raise RunFailed(
            f"Out of memory on {lm.torch_device.type} after {len(passes)} passes: use a shorter prompt, fewer new "
            "tokens or a smaller dtype."
        ) from exc
    except RuntimeError as exc:
        if "out of memory" in str(exc).lower() or "can't allocate memory" in str(exc).lower():
            raise RunFailed(
                f"Out of memory on {lm.torch_device.type}: use a shorter prompt, fewer new tokens or a smaller dtype."
            ) from exc
        raise

    generated = [p.token_id for p in passes]
    return Trace(
        model=lm.info,
        device=device,
        prompt_text=request.prompt,
        prompt_token_ids=tuple(ids),
        prompt_tokens_text=tuple(token_text(lm.tokenizer, i) for i in ids),
        chat_template_used=request.use_chat_template and lm.has_chat_template and prompt_token_ids is None,
        generated_text=lm.tokenizer.decode(generated, skip_special_tokens=True),
        passes=tuple(passes),
        ttft_s=token_times[0] - request_start,
        itl_s=tuple(b - a for a, b in zip(token_times, token_times[1:])),
        e2e_s=token_times[-1] - request_start,
        warmup_ran=warmup,
        stop_reason=stop_reason,
        max_new_tokens=request.max_new_tokens,
        sampling=sampling,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
