"""transformers' continuous batching engine, instrumented: every step's requests, tokens, time and KV blocks.

Wrapped, not forked: `InstrumentedManager` subclasses `ContinuousBatchingManager` and times its `_generation_step`;
when the manager builds its batch processor, `StepRecorder.attach` wraps three methods of that one instance:
`prepare_next_batch` (the scheduler picks the step's requests and the paged cache allocates their blocks),
`update_batch` (the new tokens go back to their requests) and the cache's `search_prefix_match` (prefix reuse).
The engine's own background thread runs the loop unchanged; this thread only hands it requests at their arrival
times. Every name relied on is pinned by tests/test_schedule.py, so an upgrade that moves one fails loudly.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.continuous_batching import ContinuousBatchingManager
from transformers.generation.continuous_batching.cache_allocators import FULL_ATTENTION
from transformers.generation.continuous_batching.utils import WorkloadHints

from explorer.core.errors import RunFailed
from explorer.core.loaded_model import LoadedModel
from explorer.core.timing import synchronize
from explorer.labs.schedule.records import BlockHolding, PrefixHit, RequestRecord, StepEntry, StepRecord
from explorer.labs.schedule.workload import EngineSettings, PlannedRequest
from explorer.models.loading import Progress

NO_EOS = -1  # transformers' "no end-of-sequence token": every request makes exactly its max new tokens
RESULT_POLL_S = 0.1
TURN_POLL_S = 0.001  # how often a request waiting its turn checks whether the ones before it have their first token
TURN_LIMIT_S = 300.0  # an earlier request with no first token by then failed without stopping the engine
WARMUP_PROMPT_TOKENS = 8
WARMUP_NEW_TOKENS = 2


def cb_config(settings: EngineSettings) -> ContinuousBatchingConfig:
    return ContinuousBatchingConfig(
        **settings.cb_config_kwargs(),
        # One step = schedule, forward, update, in that order: async double-buffering would overlap step N+1's
        # scheduling with step N's forward and blur what each step's time means; CUDA graphs would add capture time.
        use_async_batching=False,
        use_cuda_graph=False,
        # The model is shared by every session of the app: never switch its attention implementation.
        auto_switch_to_flash=False,
        cpu_offload_space=0.0,
    )


class StepRecorder:
    """Collects one StepRecord per engine step and each request's token times, on the run's clock."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.t0 = time.perf_counter()
        self.steps: list[StepRecord] = []
        self.token_times: dict[str, list[float]] = {}
        self.tokens_done = 0  # read by the waiting thread for progress: an int, never a dict being resized
        self.first_forward: dict[str, float] = {}
        self.prefill_computed: Counter[str] = Counter()
        self.reused: Counter[str] = Counter()
        self._chunks: Counter[str] = Counter()
        self._hits: list[PrefixHit] = []
        self._pending: dict[str, Any] = {}
        self._attached: set[int] = set()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def start_clock(self) -> None:
        self.t0 = time.perf_counter()

    def attach(self, processor: Any) -> None:
        """Wrap this processor's step methods (once: the manager may hand back the same processor)."""
        if id(processor) in self._attached:
            return
        self._attached.add(id(processor))
        prepare, update = processor.prepare_next_batch, processor.update_batch
        cache = processor.cache
        search = cache.search_prefix_match

        def prepare_next_batch() -> bool:
            started = self.now()
            has_batch = prepare()
            if has_batch:
                self._pending = {"schedule_s": self.now() - started, **self.snapshot(processor)}
            return has_batch

        def update_batch() -> None:
            batch = list(processor.inputs_and_outputs.requests_in_batch)
            started = self.now()
            update()
            done = self.now()
            for future in batch:
                if future.has_new_token:
                    self.token_times.setdefault(future.state.request_id, []).append(done)
                    self.tokens_done += 1
            self.steps.append(StepRecord(index=len(self.steps), update_s=done - started, **self._pending))
            self._pending = {}

        def search_prefix_match(request_id: str, prompt_ids: list[int]) -> int:
            matched = search(request_id, prompt_ids)
            if matched:
                self._hits.append(PrefixHit(request_id, matched, matched // block_size(cache)))
                self.reused[request_id] += matched
            return matched

        processor.prepare_next_batch = prepare_next_batch
        processor.update_batch = update_batch
        cache.search_prefix_match = search_prefix_match

    def snapshot(self, processor: Any) -> dict[str, Any]:
        """The step just scheduled: each request's tokens, and every block table after this step's allocation."""
        entries = []
        for future in processor.inputs_and_outputs.requests_in_batch:
            state = future.state
            # A request that has sampled a token before is decoding; otherwise this step computes prompt tokens.
            if state.generated_len() > 0:
                entries.append(StepEntry(state.request_id, 0, future.query_length, 0, False))
            else:
                self._chunks[state.request_id] += 1
                self.prefill_computed[state.request_id] += future.query_length
                entries.append(
                    StepEntry(
                        state.request_id,
                        future.query_length,
                        0,
                        self._chunks[state.request_id],
                        future.has_new_token,
                    )
                )
        cache = processor.cache
        # One allocator per attention kind: a Llama has only full attention, Mistral with a window only sliding, a
        # hybrid (Gemma 3, gpt-oss) both. The full layers' block table is the one that grows with context and is
        # recorded block by block; the sliding layers' pages of a hybrid are counted in bytes beside it.
        allocators = cache.cache_allocators
        allocator = allocators.get(FULL_ATTENTION) or next(iter(allocators.values()))
        first_block = cache.pool.num_reserved_sectors * allocator.blocks_per_sector  # after the two trash sectors
        active = processor.scheduler.active_requests
        holdings = tuple(
            BlockHolding(
                request_id,
                tuple(b - first_block for b in blocks),
                active[request_id].position_offset if request_id in active else 0,
            )
            for request_id, blocks in allocator.block_table.items()
        )
        free_blocks = cache.pool.num_free_sectors * allocator.blocks_per_sector + cache.pool.count_free_blocks(
            allocator.index
        )
        other_bytes = sum(
            len({b for blocks in other.block_table.values() for b in blocks}) * other.bytes_per_block
            for other in allocators.values()
            if other is not allocator
        )
        hits, self._hits = tuple(self._hits), []
        return {
            "other_groups_bytes": other_bytes,
            "entries": tuple(entries),
            "holdings": holdings,
            "free_blocks": free_blocks,
            "cached_blocks": len(allocator.ledger.cached_blocks),
            "prefix_hits": hits,
        }

    def on_forward(self, start_s: float, wall_s: float) -> None:
        self._pending.update(start_s=start_s, wall_s=wall_s)
        for entry in self._pending["entries"]:
            self.first_forward.setdefault(entry.request, start_s)


def block_size(cache: Any) -> int:
    return next(iter(cache.cache_allocators.values())).tokens_per_page


class InstrumentedManager(ContinuousBatchingManager):
    """The engine's manager, unchanged except that its batch processor is recorded and each step timed."""

    def __init__(self, recorder: StepRecorder, *args: Any, **kwargs: Any) -> None:
        self.recorder = recorder
        super().__init__(*args, **kwargs)

    def _create_batch_processor(self) -> Any:
        processor = super()._create_batch_processor()
        self.recorder.attach(processor)
        return processor

    def _generation_step(self) -> None:
        # The engine may compute on its own stream, so events on the default stream would not bracket its work:
        # synchronize the device on both sides and read the host clock instead.
        synchronize(self.recorder.device)
        started = self.recorder.now()
        super()._generation_step()
        synchronize(self.recorder.device)
        self.recorder.on_forward(started, self.recorder.now() - started)


def new_manager(lm: LoadedModel, settings: EngineSettings, planned: Sequence[PlannedRequest]) -> InstrumentedManager:
    recorder = StepRecorder(lm.torch_device)
    hints = WorkloadHints(
        max_prompt_length=max(len(r.prompt_token_ids) for r in planned),
        max_generated_length=max(r.max_new_tokens for r in planned),
        num_requests=len(planned),
    )
    generation = GenerationConfig(do_sample=False, eos_token_id=NO_EOS, max_new_tokens=hints.max_generated_length)
    return InstrumentedManager(recorder, lm.model, generation, cb_config(settings), workload_hints=hints)


def serve(
    lm: LoadedModel,
    planned: Sequence[PlannedRequest],
    settings: EngineSettings,
    stop_at_eos: bool,
    on_progress: Progress | None = None,
    in_turn: bool = False,
) -> tuple[tuple[StepRecord, ...], tuple[RequestRecord, ...], int]:
    """Run the engine on the workload, each request handed over at its arrival time; (steps, requests, blocks).
    `in_turn`: also not before every earlier request has its first token, so each arrives while those decode (the
    Room's long prompts: a fixed delay would be seconds too long on a GPU or too short on a CPU)."""
    manager = new_manager(lm, settings, planned)
    recorder = manager.recorder
    eos: int | list[int] = sorted(lm.eos_token_ids) if stop_at_eos and lm.eos_token_ids else NO_EOS
    try:
        manager.warmup()  # builds the batch processor and its paged cache now, outside the timed run
        num_blocks = manager.batch_processor.cache.num_blocks
        manager.start()
        recorder.start_clock()
        arrivals: dict[str, float] = {}
        for k, r in enumerate(planned):
            delay_s = r.arrival_s - recorder.now()
            if delay_s > 0:
                time.sleep(delay_s)
            if in_turn:
                wait_for_first_tokens(manager, planned[:k])
            arrivals[r.id] = recorder.now()  # measured: the moment the server is handed the request
            manager.add_request(
                list(r.prompt_token_ids), request_id=r.id, max_new_tokens=r.max_new_tokens, eos_token_id=eos
            )
        outputs = collect(manager, planned, on_progress)
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    requests = tuple(
        replace(  # what the prefix cache saved: prompt tokens computed and reused, as the engine counted them
            RequestRecord.of(
                r,
                arrival_s=arrivals[r.id],
                start_s=recorder.first_forward[r.id],
                token_times_s=recorder.token_times[r.id],
                token_ids=outputs[r.id].generated_tokens,
            ),
            prefill_tokens_computed=recorder.prefill_computed[r.id],
            prefix_tokens_reused=recorder.reused[r.id],
        )
        for r in planned
    )
    return tuple(recorder.steps), requests, num_blocks


def wait_for_first_tokens(manager: InstrumentedManager, earlier: Sequence[PlannedRequest]) -> None:
    """Until every earlier request has its first token: the next is handed in while they decode. Ends early when the
    engine stops (`collect` then says why); RunFailed when one never gets its token."""
    waited_from = time.perf_counter()
    while manager.is_running() and any(r.id not in manager.recorder.token_times for r in earlier):
        if time.perf_counter() - waited_from > TURN_LIMIT_S:
            raise RunFailed(f"No first token after {TURN_LIMIT_S:.0f} s for a request before the next one's turn.")
        time.sleep(TURN_POLL_S)


def collect(manager: InstrumentedManager, planned: Sequence[PlannedRequest], on_progress: Progress | None) -> dict:
    """Wait for every request to finish, reporting tokens done; the engine's failure becomes one RunFailed line.

    The reports only move a progress bar: the engine's thread keeps computing meanwhile, inside one measured span,
    so nothing here may give the device to another session."""
    outputs: dict[str, Any] = {}
    total = sum(r.max_new_tokens for r in planned)
    while len(outputs) < len(planned):
        result = manager.get_result(timeout=RESULT_POLL_S)
        if result is not None and result.is_finished():
            if result.error is not None:
                reason = (str(result.error).strip().splitlines() or ["no reason given"])[0]
                raise RunFailed(f"The engine failed request {result.request_id}: {reason}")
            outputs[result.request_id] = result
        elif result is None and not manager.is_running():
            error = manager.background_thread_status.fatal_error
            raise RunFailed(f"The engine stopped before finishing: {error or 'no error given'}")
        if on_progress:
            done = manager.recorder.tokens_done
            on_progress(min(1.0, done / total), f"Continuous batching: {done} of {total} tokens…")
    return outputs


def warm_up(lm: LoadedModel, settings: EngineSettings) -> None:
    """One short request through a throw-away engine: the first forwards of the paged path pay for kernel set-up (the
    caller has warmed up the explorer's own path once, `explorer.core.measure.prepare_device`)."""
    ids = tuple(i % lm.info.vocab_size for i in range(1, WARMUP_PROMPT_TOKENS + 1))
    request = PlannedRequest("warm-up", "", ids, 0, WARMUP_NEW_TOKENS, 0.0)
    small = EngineSettings(settings.scheduler, settings.token_budget, settings.block_size, 4, False)
    serve(lm, [request], small, stop_at_eos=False)
