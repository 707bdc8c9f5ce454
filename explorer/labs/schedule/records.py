"""What a run of the scheduling lab records: every engine step (`StepRecord`), every request as one mode served it
(`RequestRecord`), whole modes (`ServedMode`), the token checks against solo runs (`TokenCheck`), and the run itself
(`ScheduleRun`). Plain frozen dataclasses: nothing here runs a model (`explorer.labs.schedule.run` does).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from explorer.core.trace import ItlPercentiles, JsonRecord
from explorer.labs.schedule.goodput import GoodputCount, goodput_count
from explorer.labs.schedule.workload import EngineSettings, PlannedRequest, Workload


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
    other_groups_bytes: int = 0  # a hybrid model's sliding-window layers: the bytes of the pages their own allocator
    # holds for requests (not in `holdings`, which are the full layers' blocks); 0 for one kind of attention

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
    def block_holders(self) -> dict[int, tuple[str, ...]]:
        """Every block held after this step, by number, with the requests that hold it (several: a shared prefix)."""
        holders: dict[int, list[str]] = {}
        for h in self.holdings:
            for b in h.blocks:
                holders.setdefault(b, []).append(h.request)
        return {block: tuple(ids) for block, ids in sorted(holders.items())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRecord:
        """Back from `ScheduleRun.to_dict`'s step (its derived counts are recomputed, not read)."""
        return cls(
            **{
                **known(cls, data),
                "entries": tuple(StepEntry(**e) for e in data["entries"]),
                "holdings": tuple(BlockHolding(**{**h, "blocks": tuple(h["blocks"])}) for h in data["holdings"]),
                "prefix_hits": tuple(PrefixHit(**h) for h in data.get("prefix_hits", ())),
            }
        )


@dataclass(frozen=True)
class RequestRecord(ItlPercentiles):
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

    @classmethod
    def of(
        cls,
        planned: PlannedRequest,
        *,
        arrival_s: float,
        start_s: float,
        token_times_s: Sequence[float],
        token_ids: Sequence[int],
    ) -> RequestRecord:
        """The record of a planned request as one mode served it (the request's own facts copied from the plan), its
        whole prompt computed; the engine replaces the prefill counts with what its prefix cache saved."""
        return cls(
            id=planned.id,
            prompt_text=planned.prompt_text,
            prompt_token_ids=planned.prompt_token_ids,
            prefix_tokens=planned.prefix_tokens,
            max_new_tokens=planned.max_new_tokens,
            arrival_s=arrival_s,
            start_s=start_s,
            token_times_s=tuple(token_times_s),
            token_ids=tuple(int(t) for t in token_ids),
            prefill_tokens_computed=len(planned.prompt_token_ids),
        )

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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        derived = ("ttft_s", "queue_s", "prefill_s", "itl_s", "e2e_s", "finish_s")
        derived += ("itl_p50_s", "itl_p90_s", "itl_p99_s")  # every ItlPercentiles figure
        data.update({name: getattr(self, name) for name in derived})  # for readers of the JSON
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """Back from `to_dict` (the derived figures it adds are recomputed, not read)."""
        tuples = {name: tuple(data[name]) for name in ("prompt_token_ids", "token_times_s", "token_ids")}
        return cls(**{**known(cls, data), **tuples})


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

    def goodput(self, ttft_slo_s: float, tpot_slo_s: float) -> GoodputCount:
        """Each request met or missed the SLO pair, and the count (`explorer.labs.schedule.goodput`)."""
        return goodput_count([(r.id, r.arrival_s, r.token_times_s) for r in self.requests], ttft_slo_s, tpot_slo_s)

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServedMode:
        return cls(
            mode=data["mode"],
            requests=tuple(RequestRecord.from_dict(r) for r in data["requests"]),
            checks=tuple(TokenCheck(**c) for c in data["checks"]),
            load_avg_1m=data.get("load_avg_1m"),
        )


def known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The entries of `data` that are fields of the dataclass `cls` (what `to_dict` adds for readers is left)."""
    return {f.name: data[f.name] for f in fields(cls) if f.name in data}


CONTINUOUS, STATIC, SEQUENTIAL = "continuous batching", "static batching", "one at a time"


@dataclass(frozen=True)
class ScheduleRun(JsonRecord):
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
    max_context: int | None = None  # the model's context: a contiguous server's reservation per request, unknown output
    transformers_version: str = ""
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    # The per-layer rule, for a model with sliding-window layers; older runs (and full-attention models) leave them
    # unset: every layer then holds every position at kv_bytes_per_token.
    layer_windows: tuple[int, ...] = ()  # per layer, the window its cache applies (0: full attention)
    kv_bytes_per_token_per_layer: int = 0  # one layer's K and V for one position
    recorded_block_bytes: int = 0  # one recorded block: block_size positions of the layers its allocator holds

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
        """One recorded block: block_size positions of the layers its allocator holds (every layer, or a hybrid's
        full-attention layers)."""
        return self.recorded_block_bytes or self.settings.block_size * self.kv_bytes_per_token

    def kv_bytes_for(self, positions: int) -> int:
        """A request's KV cache at `positions`, by the per-layer rule: a sliding layer holds at most window - 1
        positions, as transformers' caches keep them."""
        if not self.layer_windows:
            return positions * self.kv_bytes_per_token
        held = sum(min(positions, w - 1) if w else positions for w in self.layer_windows)
        return held * self.kv_bytes_per_token_per_layer

    def request(self, request_id: str) -> RequestRecord:
        return next(r for r in self.requests if r.id == request_id)

    @property
    def mixed_steps(self) -> int:
        """Steps that computed prefill and decode tokens in one forward pass."""
        return sum(s.is_mixed for s in self.steps)

    @property
    def steps_with_partial_prefill(self) -> int:
        """Steps that carried part of a prompt the token budget split."""
        return sum(s.has_partial_prefill for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": asdict(self.workload),
            "settings": asdict(self.settings),
            "model": self.model,
            "dtype": self.dtype,
            "device": self.device,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "layer_windows": list(self.layer_windows),
            "kv_bytes_per_token_per_layer": self.kv_bytes_per_token_per_layer,
            "recorded_block_bytes": self.recorded_block_bytes,
            "engine_num_blocks": self.engine_num_blocks,
            "max_context": self.max_context,
            "load_avg_1m": self.load_avg_1m,
            "transformers_version": self.transformers_version,
            "created_at": self.created_at,
            "summary": {  # derived, for readers of the file
                "steps": len(self.steps),
                "mixed_steps": self.mixed_steps,
                "steps_with_partial_prefill": self.steps_with_partial_prefill,
                "prefill_tokens_computed": self.prefill_tokens_computed,
                "prefix_tokens_reused": self.prefix_tokens_reused,
                "total_tokens": self.served.total_tokens,
                "tokens_per_s": self.served.tokens_per_s,
                "all_tokens_match_solo": self.served.all_tokens_match,
            },
            "steps": [
                {**asdict(s), "prefill_tokens": s.prefill_tokens, "decode_tokens": s.decode_tokens, "kind": s.kind}
                for s in self.steps
            ],
            "requests": [r.to_dict() for r in self.requests],
            "checks": [asdict(c) for c in self.checks],
            "comparison": [m.to_dict() for m in self.modes] if self.baselines else [],
            "prefix_off": self.prefix_off.to_dict() if self.prefix_off else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleRun:
        """Back from `to_dict`: the settings, every step and request, the comparisons; the summary is recomputed."""
        comparison = [ServedMode.from_dict(m) for m in data.get("comparison", [])]
        plain = ("model", "dtype", "device", "kv_bytes_per_token", "engine_num_blocks", "load_avg_1m", "max_context")
        return cls(
            **{name: data[name] for name in plain},
            workload=Workload.from_dict(data["workload"]),
            settings=EngineSettings(**data["settings"]),
            steps=tuple(StepRecord.from_dict(s) for s in data["steps"]),
            requests=tuple(RequestRecord.from_dict(r) for r in data["requests"]),
            checks=tuple(TokenCheck(**c) for c in data["checks"]),
            baselines=tuple(comparison[1:]),  # the first is the continuous run itself
            prefix_off=cls.from_dict(data["prefix_off"]) if data.get("prefix_off") else None,
            transformers_version=data.get("transformers_version", ""),
            created_at=data["created_at"],
            layer_windows=tuple(data.get("layer_windows", ())),
            kv_bytes_per_token_per_layer=data.get("kv_bytes_per_token_per_layer", 0),
            recorded_block_bytes=data.get("recorded_block_bytes", 0),
        )

    @classmethod
    def from_json(cls, text: str) -> ScheduleRun:
        return cls.from_dict(json.loads(text))
