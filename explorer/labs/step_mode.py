"""Step mode: one request driven one real pass per call, for a presenter walking through the phases live.

Each step is the engine's own timed step (`LiveRequest.step`), so a stepped request's passes are measured exactly as
a normal run's; the request's clock is paused between steps, so TTFT and ITL count the passes and not the time the
room spent looking at them. It lives in the device owner (`explorer.owner.steps`), where nothing draws: each step runs
plainly in its job's turn on the device. An untimed eager shadow (`AttentionReplay`, on the model's eager twin) is
fed the same tokens after the step, outside the click's turn on the device (`replay_passes`), and keeps each pass's
attention maps. The step that finishes the
request checks its device figures as every run's are (`keep_figures_honest`) and frees the timed cache, its replay
the shadow's: `to_trace()` is then the Trace a normal run would have produced.

The owner frees the ones left idle (`free_if_idle`, swept by `explorer.owner.steps.sweep_idle`): their page may never
come back to look.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from explorer.core.attention import AttentionMaps, AttentionReplay, check_capture
from explorer.core.beside import BesideWatch
from explorer.core.device import FiguresStore
from explorer.core.engine import (
    CheckedRequest,
    LiveRequest,
    Request,
    finished_trace,
    forward_on,
    prefill,
    reserved_bytes,
    seeded,
)
from explorer.core.figure_correction import keep_figures_honest
from explorer.core.graph_decode import CacheShape, open_kv
from explorer.core.lab_progress import Report
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import PassRecord, Trace
from explorer.core.warm_shapes import RequestShape


@dataclass(eq=False)  # compared and hashed by identity: the owner holds it by handle
class SteppedRequest:
    """A request between clicks: the live request (its KV cache), its attention shadow, when it was last touched."""

    lm: LoadedModel
    checked: CheckedRequest
    live: LiveRequest
    replay: AttentionReplay
    last_used_s: float  # `idle_clock()` at the last claim or step
    figures: FiguresStore  # where its device figures came from: the finished run is checked against them there
    finished: Trace | None = None  # set by the step that finishes the request
    forward_s: float = 0.0  # every forward it ran so far (warm twins, timed passes, attention replay), seconds
    busy: threading.Lock = field(default_factory=threading.Lock, repr=False)  # held while stepping or freeing
    idle_clock: Callable[[], float] = field(default=time.monotonic, repr=False)  # what idleness is read on

    @classmethod
    def start(
        cls,
        lm: LoadedModel,
        checked: CheckedRequest,
        attention_cap_bytes: int | None = None,
        progress: Report | None = None,
        figures: FiguresStore | None = None,
        idle_clock: Callable[[], float] = time.monotonic,
    ) -> SteppedRequest:
        """A checked request (`engine.check_request`, as a run's) held to the attention cap, and the device figures,
        ready for the prefill. No generic warm-up (`prepare_device`'s): each timed pass has its own warm twin of its
        own shape right before it (`step`), which a Run's passes get from the pass before them."""
        prompt_len, new_tokens = len(checked.prompt_ids), checked.request.max_new_tokens
        # The attention shadow keeps every layer; it is refused up front if the whole request would pass the cap.
        decode_lens = [prompt_len + k for k in range(1, new_tokens)]
        layers = check_capture(lm.info, None, prompt_len, decode_lens, attention_cap_bytes)
        figures = FiguresStore() if figures is None else figures  # the owner's; kept to check the finished run
        profile = figures.get(lm.torch_device.type, lm.info.dtype, progress=progress)
        live = LiveRequest(lm, checked, profile, seeded(checked.request.sampling))
        live.clock.pause()  # nothing runs until the first click
        return cls(lm, checked, live, AttentionReplay(lm, layers), idle_clock(), figures, idle_clock=idle_clock)

    @property
    def request(self) -> Request:
        return self.checked.request

    @property
    def passes(self) -> list[PassRecord]:
        return self.live.passes

    @property
    def done(self) -> bool:
        return self.live.done

    @property
    def freed(self) -> bool:
        return self.live.kv is None

    def claim(self) -> bool:
        """Mark the request as in use now, unless it was freed meanwhile (an idle sweep): whether it can step."""
        with self.busy:
            self.last_used_s = self.idle_clock()
            return not self.freed

    def step(self, twin: bool = True) -> PassRecord:
        """ONE real pass (prefill first, then one decode), timed by the engine, right after its warm twin (`warm_up`,
        untimed, the clock paused) unless `twin` is False (the device is warm: another pass just ran, or others wait);
        its attention comes apart, untimed (`replay_passes`). The last one also finishes the request (its trace kept,
        the timed cache freed)."""
        with self.busy:  # a sweep never frees a cache under a running pass, so only its end marks the use
            # The twin stays in the owner: what it undoes is the pause between clicks (idle threads, cold caches), not
            # the drawing the gate kept away, and every click follows a pause. Measured here 2026-11-29
            # (benchmarks/stepped_timing.py --pause-s 1 --passes 8, the 2 cores shared with three other test runs,
            # load average 5): stepped decode medians 314 ms after the twin, 432 ms without it, a Run's 419 ms. No
            # clean figure (a quiet Run decodes in 45-60 ms), so the figure this rests on is still `warm_up`'s own:
            # cold stepped decodes 100-305 ms against a Run's 45-60 ms.
            if twin:
                self._forward(self.warm_up)
            started_s = time.perf_counter()
            watch = BesideWatch()  # what other work ran beside the timed pass (not its twin): kept on its record
            self.live.clock.resume()
            try:
                record = self.live.step()
            finally:
                self.live.clock.pause()
            record = self.live.passes[-1] = replace(record, beside_cpu_s=watch.lap())
            self.forward_s += time.perf_counter() - started_s
            if record.is_prefill:  # this prompt length has run: a Run's warm-up of it knows (`LoadedModel.warmed`)
                self.lm.warmed.ran(self._shape, 0, reserved_bytes(self.lm.torch_device))
            if self.done:
                self.finished = keep_figures_honest(self.to_trace(), self.figures)
                self.live.free()  # the replay's cache goes once it has caught up (`replay_passes`)
            self.last_used_s = self.idle_clock()
        return record

    @property
    def _shape(self) -> RequestShape:
        return self.checked.shape(len(self.live.rows))

    def warm_by_replay(self) -> bool:
        """The next pass's attention row replayed before it, untimed (the request's clock paused): on a device gone cold
        it warms the weights for the timed pass as a twin does, and the row is ready when the pass ends (one forward
        where a twin and a replay took two). False where it cannot: the replay is behind or freed, or nothing is
        left."""
        with self.busy:
            if self.replay.cache is None or self.live.done or len(self.replay.replayed) != len(self.passes):
                return False
            live = self.live
            ids = [live.passes[-1].batch_token_ids[0]] if live.passes else list(live.rows[0])  # what the pass computes
            self._forward(lambda: self.replay.step(ids))
            return True

    @property
    def replay_pending(self) -> bool:
        """A pass whose attention row is not replayed yet (it needs a forward: a turn on the device)."""
        return self.replay.cache is not None and len(self.replay.replayed) < len(self.passes)

    def replay_passes(self) -> None:
        """The attention maps of every pass not replayed yet (untimed, on the model's eager twin). It needs no turn on
        the device, so the owner's job calls it after the click's turn (the next job's pass runs meanwhile); once the
        request is done and replayed, the replay's cache is freed."""
        with self.busy:
            if self.replay.cache is None:  # freed: reset, or swept when idle
                return
            for record in self.passes[len(self.replay.replayed) :]:
                self._forward(lambda: self.replay.step(list(record.input_token_ids)))  # noqa: B023 - called now
            if self.done:
                self.replay.free()

    def _forward(self, work: Callable[[], object]) -> None:
        started_s = time.perf_counter()
        work()
        self.forward_s += time.perf_counter() - started_s

    def warm_up(self) -> None:
        """One untimed pass of the same shape as the timed one, right before it, with the request's clock paused.

        Why: a Run's passes follow each other, each one warmed by the last; a stepped pass follows a pause of seconds
        (the room reading the slide, the page redrawn, the attention replay on the other path), after which the
        thread pool has gone to sleep and the weights have left the caches. Timed cold, stepped decode passes came out
        2-6x a Run's (100-305 ms against 45-60 ms). The prefill's twin runs into a throwaway cache of the same layout; a
        decode's twin into the request's own cache (replaying its graph on the graph path), then cut back by its one
        position (`KvCache.rewind_one`): same tokens, same cache. A cache that cannot be cut back (a sliding static
        layer) gets no decode twin.
        """
        live, model = self.live, self.lm.model
        kv = live.kv
        if kv is None or live.done:
            return
        if not live.passes:
            layout = "eager" if kv.capacity is None else "static"
            twin = open_kv(model, layout, CacheShape(len(live.rows), kv.capacity or 0), self.lm.graphs)
            prefill(model, torch.tensor(live.rows, device=self.lm.torch_device), twin.cache)
            return
        if not kv.rewindable:
            return
        ids = torch.tensor([[t] for t in live.passes[-1].batch_token_ids], device=self.lm.torch_device)  # (B, 1)
        forward, on = forward_on(kv, first=False)
        forward(model, ids, on)
        kv.rewind_one()

    def idle_for_s(self) -> float:
        return self.idle_clock() - self.last_used_s

    def free_if_idle(self, idle_timeout_s: float) -> bool:
        """Free the caches of a request untouched for longer than `idle_timeout_s`; whether this call freed them.
        A request being stepped right now is busy, hence not idle: it is left alone."""
        if not self.busy.acquire(blocking=False):
            return False
        try:
            if (self.freed and self.replay.cache is None) or self.idle_for_s() <= idle_timeout_s:
                return False
            self._free()
            return True
        finally:
            self.busy.release()

    def attention(self) -> AttentionMaps:
        """The maps of every pass so far (replaying the ones a page did not replay yet, `replay_passes`)."""
        self.replay_passes()
        tokens = tuple(self.lm.tokenizer.decode([i]) for i in self.live.prompt_ids)
        return self.replay.maps(tokens + tuple(p.token_text for p in self.passes), len(self.live.prompt_ids))

    def to_trace(self) -> Trace:
        """The request so far as a Trace; once finished, the Trace a normal run would have produced."""
        if self.finished is not None:
            return self.finished
        return finished_trace(
            self.lm, self.checked, [self.live], warmup_ran=True
        )  # each pass warmed by its twin or by the work just before

    def free(self) -> None:
        """Drop both caches now (reset, a new prompt, a failed step), after a pass that is running ends."""
        with self.busy:
            self._free()

    def _free(self) -> None:
        self.live.free()
        self.replay.free()
