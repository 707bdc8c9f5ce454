"""Step mode: one request driven one real pass per call, for a presenter stepping the phases live.

Each step is the engine's own timed step (`LiveRequest.step`), so a stepped request's passes are measured exactly as
a normal run's; the request's clock is paused between steps, so TTFT and ITL count the passes and not the time the
room spent looking at them. An untimed eager shadow (`AttentionReplay`) is fed the same token after each step and
keeps that pass's attention maps. Once finished, `to_trace()` is the Trace a normal run would have produced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from explorer.attention import AttentionMaps, AttentionReplay, check_capture
from explorer.engine import LiveRequest, Request, checked_prompt_ids, finished_trace, seeded, warm_up
from explorer.loading import LoadedModel
from explorer.trace import DeviceProfile, PassRecord, Trace

IDLE_TIMEOUT_S = 600.0  # a stepped request untouched this long frees its cache


@dataclass
class SteppedRequest:
    """A request between clicks: the live request (its KV cache), its attention shadow, when it was last touched."""

    lm: LoadedModel
    request: Request
    live: LiveRequest
    replay: AttentionReplay
    last_used_s: float

    @classmethod
    def start(
        cls, lm: LoadedModel, request: Request, device: DeviceProfile, attention_cap_bytes: int | None = None
    ) -> SteppedRequest:
        """Check the request against the same limits and caps as a run, warm up, and get ready for the prefill."""
        ids = checked_prompt_ids(lm, request)
        # The attention shadow keeps every layer; it is refused up front if the whole request would pass the cap.
        decode_lens = [len(ids) + k for k in range(1, request.max_new_tokens)]
        layers = check_capture(lm.info, None, len(ids), decode_lens, attention_cap_bytes)
        warm_up(lm)
        live = LiveRequest(lm, request, device, seeded(request.sampling))
        live.clock.pause()  # nothing runs until the first click
        return cls(lm, request, live, AttentionReplay(lm, layers), time.monotonic())

    @property
    def passes(self) -> list[PassRecord]:
        return self.live.passes

    @property
    def done(self) -> bool:
        return self.live.done

    @property
    def freed(self) -> bool:
        return self.live.cache is None

    def step(self) -> PassRecord:
        """ONE real pass (prefill first, then one decode), timed by the engine, then its attention (untimed)."""
        self.live.clock.resume()
        try:
            record = self.live.step()
        finally:
            self.live.clock.pause()
        self.replay.step(list(record.input_token_ids))
        self.last_used_s = time.monotonic()
        return record

    def idle_for_s(self) -> float:
        return time.monotonic() - self.last_used_s

    def attention(self) -> AttentionMaps:
        tokens = tuple(self.lm.tokenizer.decode([i]) for i in self.live.prompt_ids)
        return self.replay.maps(tokens + tuple(p.token_text for p in self.passes), len(self.live.prompt_ids))

    def to_trace(self) -> Trace:
        """The finished request as a Trace, as if it had been run at once."""
        live = self.live
        return finished_trace(
            self.lm, self.request, live.device, live.prompt_ids, [live], live.sampling, True, tokenized=True
        )

    def free(self) -> None:
        """Drop both caches now (reset, a new prompt, the idle timeout)."""
        self.live.free()
        self.replay.free()
