"""One request's life, instrumented: tokenize, ONE prefill pass into an empty KV cache, then cached one-token decodes.

Shaped like gpt-fast's generate.py: `prefill()` and `decode_one_token()` are the two forwards (on the graph decode
path a decode replays the captured step instead: `explorer.core.graph_decode`); `LiveRequest.step()` is the one timed
step both phases share (clock, time the forward, sample, record); `run_to_end()` is a short ladder, the prefill, then
`decode_n_tokens()`, each pass followed by the one `OnPass` hook; `generate()` climbs it once per repeat and builds
the Trace. Checking the request (`check_request`) and warming up (`warm_up`: a few passes, then the request's own
shapes) happen once, before, at each entry point (`explorer.core.measure`, the labs, the benchmark, step mode):
`generate()` repeats neither, and only makes sure the request's shapes have run (`warm_up_shapes`, a no-op when they
have), so no entry point can time a first pass of a new shape.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import torch

from explorer.core.errors import BadInput, out_of_memory_as_run_failed
from explorer.core.expert_routes import recording_routes
from explorer.core.graph_decode import (
    CacheShape,
    KvCache,
    cache_layout_of,
    default_decode_path,
    graph_refusal,
    growing_layer_bytes,
    open_kv,
    replay_decode,
    static_capacity,
)
from explorer.core.lab_progress import MakeWay, PausableClock, Report, between_passes, nobody_waits
from explorer.core.loaded_model import LoadedModel

# The request and its model-free checks live in the torch-free core.request (the CLI checks it before importing
# torch); re-exported here, where the pages and labs have always imported them.
from explorer.core.request import MAX_NEW_TOKENS_LIMIT as MAX_NEW_TOKENS_LIMIT
from explorer.core.request import MAX_REPEATS as MAX_REPEATS
from explorer.core.request import Request, seeded, validate
from explorer.core.roofline import pass_cost
from explorer.core.timing import RequestClock, synchronize, timed
from explorer.core.trace import DeviceProfile, PassRecord, Phase, Sampling, TopToken, Trace
from explorer.core.warm_shapes import RequestShape, warm_device_needs_new_shapes

TOP_K_SHOWN = 5
WARMUP_PROMPT_TOKENS = 8
WARMUP_DECODES = 2
# Decodes a warm-up runs at a request's own cache lengths, by device. On a GPU every one: the first pass at each new
# KV-cache size grows the caching allocator's segments, and a process's first timed repeat came out 3x slow. A CPU
# allocator keeps no blocks between passes and a CPU's repeat 0 was measured no slower than the later ones, so
# there its prefill's length and the first decodes after it are what is warmed.
SHAPE_DECODES_WARMED = {"cuda": MAX_NEW_TOKENS_LIMIT}


@dataclass(frozen=True)
class CheckedRequest:
    """A request that passed every check before anything was paid for (`check_request`), with its prompt's ids."""

    request: Request  # its decode path resolved: never None here
    prompt_ids: tuple[int, ...]
    tokenized: bool  # ids from the prompt's text, which the timed run tokenizes again (TTFT counts tokenization);
    # False: the caller's fixed ids (the benchmark, the scheduling lab, the batching lab), used as given
    cache_capacity: int | None = None  # positions a static cache reserves (static and graph paths); None: it grows

    def shape(self, batch: int = 1) -> RequestShape:
        request = self.request
        return RequestShape(
            request.decode_path or "eager", batch, self.cache_capacity, len(self.prompt_ids), request.max_new_tokens
        )


@dataclass(frozen=True)
class OnPass:
    """The one hook that follows every pass: the caller sees the pass (`see`: the app streams its token), then, on a
    shared server, anyone waiting may use the device (`make_way`) with the request's clock
    paused, so the wait shows in none of its times (`explorer.core.lab_progress`)."""

    see: Callable[[PassRecord], None] | None = None
    make_way: MakeWay | None = None
    tally: Callable[[PassRecord], None] | None = None  # every pass of every repeat, watched or not (a turn's log)

    def __call__(self, record: PassRecord, clock: PausableClock) -> None:
        if self.tally is not None:
            self.tally(record)
        if self.see is not None:
            self.see(record)
        if self.make_way is not None:
            between_passes(clock, self.make_way)

    def unseen(self) -> OnPass:
        """The same hand-over, nobody watching: a page streams the first repeat only."""
        return replace(self, see=None)


UNWATCHED = OnPass()  # nobody sees the passes and nobody waits for the device (the CLI, tests)


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


@torch.inference_mode()
def forward_without_cache(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    # input_ids: (B, L), the whole sequence so far -> logits (B, vocab) for its last position; keeps nothing.
    # The naive loop: every step recomputes K and V of every earlier token, which is what a KV cache saves.
    return model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[:, -1, :]


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


cache_layer_bytes = growing_layer_bytes  # a DynamicCache's bytes, layer by layer (its old home)


def forward_on(kv: KvCache, first: bool) -> tuple[Callable[..., torch.Tensor], object]:
    """The forward a pass runs and what it runs on: the prefill into the request's cache, then one-token decodes,
    replayed from the captured step on the graph path."""
    if first:
        return prefill, kv.cache
    if kv.graph is not None:
        return replay_decode, kv.graph
    return decode_one_token, kv.cache


# --- the request -----------------------------------------------------------------------------------------------------
def tokenize(lm: LoadedModel, prompt: str, use_chat_template: bool) -> list[int]:
    if use_chat_template and lm.has_chat_template:
        encoded = lm.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
        )
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return [int(i) for i in ids[0].tolist()]
    return [int(i) for i in lm.tokenizer(prompt, add_special_tokens=True)["input_ids"]]


def check_context(lm: LoadedModel, prompt_len: int, max_new_tokens: int) -> None:
    limit = lm.info.max_context
    if prompt_len + max_new_tokens > limit:
        raise BadInput(
            f"The prompt is {prompt_len} tokens; with {max_new_tokens} new tokens it exceeds {lm.info.display_name}'s "
            f"context of {limit} tokens: shorten the prompt or lower max new tokens."
        )


def check_request(lm: LoadedModel, request: Request, prompt_token_ids: Sequence[int] | None = None) -> CheckedRequest:
    """Refuse a request that cannot run before paying for anything: once per entry point, before the warm-up.
    `prompt_token_ids` are fixed ids to run as given; without them the prompt is tokenized (and again, timed, by the
    run itself: TTFT counts tokenization). The decode path is resolved here: the device's default when none is
    asked for (`graph_decode.default_decode_path`), and a graph refused in one line where it cannot run."""
    validate(request, needs_prompt=prompt_token_ids is None)
    ids = prompt_token_ids if prompt_token_ids is not None else tokenize(lm, request.prompt, request.use_chat_template)
    if not ids:
        raise BadInput("The prompt produced no tokens: type some text to run.")
    check_context(lm, len(ids), request.max_new_tokens)
    path = request.decode_path or default_decode_path(lm.info, lm.torch_device)
    if path == "graph" and (refusal := graph_refusal(lm.info, lm.torch_device)) is not None:
        raise BadInput(refusal)
    positions = len(ids) + request.max_new_tokens
    capacity = None if path == "eager" else static_capacity(positions, lm.info.max_context)
    return CheckedRequest(replace(request, decode_path=path), tuple(ids), prompt_token_ids is None, capacity)


def warm_up(
    lm: LoadedModel,
    checked: CheckedRequest | None = None,
    progress: Report | None = None,
    between: MakeWay = nobody_waits,
) -> None:
    """Once per entry point, as the last passes before the timed ones: a short prefill and a few decodes (the first
    forwards of a process pay for lazy kernel set-up, and the device microbenchmarks leave the caches full of their
    own buffers), then `checked`'s own shapes where this process has not run them (`warm_up_shapes`); `between`
    follows each of the first (a shared server's run lets other sessions' one-pass turns through there)."""
    if progress is not None:
        progress(0.0, "Warming up (first passes are slow)…")
    ids = torch.arange(WARMUP_PROMPT_TOKENS, device=lm.torch_device).remainder(lm.info.vocab_size)[None, :]
    cache = new_cache(lm.model)
    logits = prefill(lm.model, ids, cache)
    for _ in range(WARMUP_DECODES):
        between()
        logits = decode_one_token(lm.model, logits.argmax(-1, keepdim=True), cache)
    synchronize(lm.torch_device)
    between()
    if checked is not None:
        warm_up_shapes(lm, checked, progress=progress)


def reserved_bytes(device: torch.device) -> int:
    """What the CUDA caching allocator holds on `device` (0 on a CPU): a drop means its blocks were given back."""
    return torch.cuda.memory_reserved(device) if device.type == "cuda" else 0


def warm_up_shapes(
    lm: LoadedModel,
    checked: CheckedRequest,
    rows: list[list[int]] | None = None,
    progress: Report | None = None,
    device_warm: bool = False,
) -> int:
    """Untimed passes at `checked`'s own shapes on its own decode path (batch `rows`, default its prompt) unless this
    process has run them (`LoadedModel.warmed`): a prefill of its prompt length, then greedy decodes up to its last
    cache length on a GPU (stopping where the run will, at end-of-text, when it is greedy), its first WARMUP_DECODES on
    a CPU (see `SHAPE_DECODES_WARMED`), and nothing when `device_warm` (other passes ran a moment ago, or a room shares
    the device) needs no new shape (`warm_device_needs_new_shapes`). On the graph path this is where a new shape is
    captured, said to `progress`. Returns the decodes run."""
    rows = rows if rows is not None else [list(checked.prompt_ids)]
    shape, device = checked.shape(len(rows)), lm.torch_device
    if device_warm and not warm_device_needs_new_shapes(device.type):
        return 0
    plan = lm.warmed.plan(shape, SHAPE_DECODES_WARMED.get(device.type, WARMUP_DECODES), reserved_bytes(device))
    if plan.nothing:
        return 0
    if progress is not None:
        progress(
            0.3,
            f"Warming up at this request's shapes ({shape.decode_path} decode): a prefill of {shape.prompt_tokens} "
            f"tokens and up to {plan.decodes} decodes, untimed…",
        )
    request = checked.request
    stops = request.stop_at_eos and request.sampling.is_greedy  # the run will stop at the same token
    kv = open_kv(lm.model, shape.decode_path, CacheShape(len(rows), shape.capacity or 0), lm.graphs, progress)
    decodes = 0
    try:
        with out_of_memory_as_run_failed(f"warming up on {device.type}"):
            tokens = prefill(lm.model, torch.tensor(rows, device=device), kv.cache).argmax(-1, keepdim=True)  # (B, 1)
            forward, on = forward_on(kv, first=False)
            while decodes < plan.decodes and not (stops and int(tokens[0, 0]) in lm.eos_token_ids):
                tokens = forward(lm.model, tokens, on).argmax(-1, keepdim=True)
                decodes += 1
            synchronize(device)
    finally:
        kv.close()
    lm.warmed.ran(shape, decodes, reserved_bytes(device))
    return decodes


# --- the request -----------------------------------------------------------------------------------------------------
class LiveRequest:
    """One request between its passes: its KV cache, sampler and clock. `generate()` drives it to the end in one go;
    the step mode drives it one pass per click; the batching lab gives it B prompts of equal length (`batch_rows`),
    decoded together in one cache of batch B. The clock starts here: TTFT counts tokenization."""

    def __init__(
        self,
        lm: LoadedModel,
        checked: CheckedRequest,
        device: DeviceProfile,
        sampling: Sampling,
        batch_rows: list[list[int]] | None = None,
    ) -> None:
        self.lm, self.request, self.device, self.sampling = lm, checked.request, device, sampling
        self.clock = RequestClock()
        self.prompt_ids = (  # tokenized again on the request's clock: TTFT counts tokenization
            tokenize(lm, self.request.prompt, self.request.use_chat_template)
            if checked.tokenized
            else list(checked.prompt_ids)
        )
        if batch_rows is not None:  # equal lengths: no padding, so every row's positions and mask are its own
            assert len({len(row) for row in batch_rows}) == 1, "batch rows must share one length"
            assert batch_rows[0] == self.prompt_ids, "the checked request is the batch's first row"
        self.rows = batch_rows if batch_rows is not None else [self.prompt_ids]
        self.generator = None if sampling.is_greedy else torch.Generator(lm.torch_device).manual_seed(sampling.seed)
        path, capacity = self.request.decode_path or "eager", checked.cache_capacity
        self.kv: KvCache | None = open_kv(lm.model, path, CacheShape(len(self.rows), capacity or 0), lm.graphs)
        self.kv_allocated_bytes = self.kv.allocated_bytes()  # measured: a static cache reserves it all up front
        self.passes: list[PassRecord] = []

    @property
    def cache(self) -> object | None:
        """The transformers cache the passes write (None once freed)."""
        return self.kv.cache if self.kv is not None else None

    @property
    def hit_eos(self) -> bool:
        return bool(self.passes) and self.request.stop_at_eos and self.passes[-1].token_id in self.lm.eos_token_ids

    @property
    def done(self) -> bool:
        return self.hit_eos or len(self.passes) >= self.request.max_new_tokens

    @property
    def stop_reason(self) -> str:
        return "eos" if self.hit_eos else "max_new_tokens"

    def step(self) -> PassRecord:
        """The one timed step of both phases: clock, time the forward alone, sample, record."""
        kv = self.kv
        assert kv is not None and not self.done, "step() on a finished or freed request"
        phase: Phase = "decode" if self.passes else "prefill"
        rows = [[t] for t in self.passes[-1].batch_token_ids] if self.passes else self.rows
        forward, on = forward_on(kv, first=not self.passes)
        cache_len_before = kv.length
        ids = torch.tensor(rows, device=self.lm.torch_device)  # (B, T) for prefill, (B, 1) for decode
        start_s = self.clock.now_s()
        with (
            out_of_memory_as_run_failed(f"pass {len(self.passes)} on {self.lm.torch_device.type}"),
            recording_routes(self.lm.model) as routes,  # MoE: the experts each router chose, from its own outputs
        ):
            logits, wall_s = timed(self.lm.torch_device, forward, self.lm.model, ids, on)
        token_ids = [int(t) for t in sample(logits, self.sampling, self.generator)[:, 0].tolist()]
        token_s = self.clock.now_s()
        input_ids, token_id = rows[0], token_ids[0]  # the first sequence is the one a page follows token by token
        layer_bytes = kv.layer_bytes()
        self.kv_allocated_bytes = kv.allocated_bytes()
        touched = routes.experts_touched
        cost = pass_cost(
            self.lm.info,
            self.device,
            len(input_ids),
            cache_len_before,
            len(rows),
            touched if touched else None,
            cache_layout=cache_layout_of(kv.path),
            cache_capacity=kv.capacity,
        )
        record = PassRecord(
            index=len(self.passes),
            phase=phase,
            tokens_in=len(input_ids),
            cache_len_before=cache_len_before,
            cache_len_after=kv.length,
            kv_cache_bytes=sum(layer_bytes),
            kv_layer_bytes=layer_bytes,
            start_s=start_s,
            wall_s=wall_s,
            token_s=token_s,
            cost=cost,
            token_id=token_id,
            token_text=token_text(self.lm.tokenizer, token_id),
            top_tokens=top_tokens(logits, self.lm.tokenizer),
            input_token_ids=tuple(input_ids),
            batch_token_ids=tuple(token_ids),
            experts_touched=touched,
            experts_chosen=routes.experts_chosen,
        )
        self.passes.append(record)
        return record

    def free(self) -> None:
        """Drop the KV cache now (the step mode frees it on reset, a new prompt, or an idle timeout); a captured
        graph's cache goes back to the model's pool."""
        if self.kv is not None:
            self.kv.close()
            self.kv = None


def decode_n_tokens(live: LiveRequest, on_pass: OnPass) -> None:
    """One-token decodes until EOS or max new tokens, each followed by the hook."""
    while not live.done:
        on_pass(live.step(), live.clock)


def run_to_end(live: LiveRequest, on_pass: OnPass = UNWATCHED) -> LiveRequest:
    """The ladder: the prefill, then `decode_n_tokens`; the KV cache freed once the request is done or has failed (a
    captured graph's cache goes back to the model's pool either way)."""
    try:
        on_pass(live.step(), live.clock)  # the prefill: every prompt token into the empty cache
        decode_n_tokens(live, on_pass)
    finally:
        live.free()
    return live


def generate(
    lm: LoadedModel,
    checked: CheckedRequest,
    device: DeviceProfile,
    on_pass: OnPass = UNWATCHED,
    *,
    warmed_up: bool = False,
    shapes_warmed: bool = False,
) -> Trace:
    """Run a checked request `request.repeats` times with the device figures `device`, each repeat one ladder
    (`run_to_end`); `on_pass.see` watches the first repeat only. `warmed_up`: the caller ran `warm_up` first (the trace
    records it). Its shapes run untimed first (`warm_up_shapes`) unless `shapes_warmed`: the caller saw to them."""
    if not shapes_warmed:
        warm_up_shapes(lm, checked)
    sampling = seeded(checked.request.sampling)  # every repeat draws the same tokens
    runs = []
    for repeat in range(checked.request.repeats):
        live = LiveRequest(lm, checked, device, sampling)  # its own KV cache and clock
        runs.append(run_to_end(live, on_pass if repeat == 0 else on_pass.unseen()))  # prefill, then decode_n_tokens
    return finished_trace(lm, checked, runs, warmed_up)


def finished_trace(lm: LoadedModel, checked: CheckedRequest, runs: list[LiveRequest], warmup_ran: bool) -> Trace:
    """The Trace of finished runs of one request; pages show the repeat with the median end-to-end time."""
    e2e_s = [run.passes[-1].token_s for run in runs]
    shown = e2e_s.index(statistics.median_low(e2e_s))
    passes = runs[shown].passes
    request, ids = checked.request, checked.prompt_ids
    return Trace(
        model=lm.info,
        device=runs[shown].device,
        prompt_text=request.prompt,
        prompt_token_ids=tuple(ids),
        prompt_tokens_text=tuple(token_text(lm.tokenizer, i) for i in ids),
        chat_template_used=request.use_chat_template and lm.has_chat_template and checked.tokenized,
        generated_text=lm.tokenizer.decode([p.token_id for p in passes], skip_special_tokens=True),
        repeats=tuple(tuple(run.passes) for run in runs),
        shown_repeat=shown,
        warmup_ran=warmup_ran,
        stop_reason=runs[shown].stop_reason,
        max_new_tokens=request.max_new_tokens,
        sampling=runs[shown].sampling,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        decode_path=request.decode_path or "eager",
        kv_cache_capacity=checked.cache_capacity,
        kv_cache_allocated_bytes=runs[shown].kv_allocated_bytes,
    )
