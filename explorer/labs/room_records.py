"""A Room round's record, torch-free: each person's request as the round served it beside the same prompt served alone
(`Lane`), every engine step, the round itself (`RoomRound`) with its JSON both ways, what one person may see of it
(others' prompts and answers hidden), and each person's figures (`Seat`) with the sentence that says what to notice.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from explorer.core.errors import BadInput
from explorer.core.stats import ItlPercentiles, percentile
from explorer.core.trace import JsonRecord
from explorer.core.units import short_time
from explorer.labs.schedule.goodput import GoodputCount, goodput_count, tpot_of
from explorer.labs.schedule.records import StepRecord, known
from explorer.labs.schedule.workload import CORPUS, MAX_PROMPT_TOKENS, EngineSettings

BLOCK_SIZE = 16  # tokens per KV block, the Scheduling lab's default; also the least chunk budget the engine takes
MAX_LONG_PROMPT_TOKENS = MAX_PROMPT_TOKENS  # the Scheduling lab's longest prompt: a long round's seconds on a CPU
PASSAGE_WORDS = tuple(" ".join(CORPUS).split())  # a long round's shared passage: these, repeated, in this order
PASSAGE_END = "\n\n"  # between the passage and the person's own prompt


def split_passage(text: str) -> tuple[str, str]:
    """A long round's prompt as (the shared passage, the person's own prompt); ("", text) where none was put in front
    (a prompt already as long as asked)."""
    passage, end, own = text.partition(PASSAGE_END)
    if end and passage and set(passage.split()) <= set(PASSAGE_WORDS):
        return passage, own
    return "", text


@dataclass(frozen=True)
class RoundPrompt:
    """One person's prompt as the round takes it."""

    participant: int
    text: str


@dataclass(frozen=True)
class RoundAsk:
    """What the presenter's start hands the run: the body of the device owner's "room" job, as JSON both ways (here,
    torch-free, because the web tier that sends it never imports the engine)."""

    code: str
    number: int
    prompts: tuple[RoundPrompt, ...]
    max_new_tokens: int
    chat_template: bool = True
    max_prompt_tokens: int | None = None  # a hosted server's cap, chat template included
    # "Everyone send a long prompt now": each prompt after a shared passage, to this many tokens (chat template
    # included), and handed in one after another, each once the ones before it are decoding. None: as typed, at once.
    long_prompt_tokens: int | None = None
    chunk_budget: int | None = None  # a long round served again with prefill chunked to this many tokens per step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundAsk:
        """Back from `to_dict`; a body that is not one (a missing field, a prompt that is not text) is one line."""
        try:
            prompts = tuple(RoundPrompt(int(p["participant"]), str(p["text"])) for p in data["prompts"])
            cap, long, chunk = (data.get(name) for name in ("max_prompt_tokens", "long_prompt_tokens", "chunk_budget"))
            return cls(
                code=str(data["code"]),
                number=int(data["number"]),
                prompts=prompts,
                max_new_tokens=int(data["max_new_tokens"]),
                chat_template=bool(data.get("chat_template", True)),
                max_prompt_tokens=None if cap is None else int(cap),
                long_prompt_tokens=None if long is None else int(long),
                chunk_budget=None if chunk is None else int(chunk),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"A room round's ask is not one the device owner can read ({exc!r}): nothing ran.") from exc


def gaps(token_times_s: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(b - a for a, b in zip(token_times_s, token_times_s[1:]))


def request_id(participant: int) -> str:
    """The engine's id for a person's request: the room's number, never a name or a session."""
    return f"p{participant}"


def participant_of(request: str) -> int:
    """The person's number back from their request's id ("p3" -> 3)."""
    return int(request.removeprefix("p"))


@dataclass(frozen=True)
class Lane(ItlPercentiles):
    """One person's request: as the round served it, and the same prompt served alone by the same engine."""

    participant: int  # the person's number in the room (1: whoever opened it)
    prompt_text: str  # as typed; "" where hidden from the viewer
    answer_text: str  # the round's answer; "" where hidden
    prompt_tokens: int  # chat template included, as the engine got them
    token_ids: tuple[int, ...]  # the round's new tokens; () where hidden
    new_tokens: int  # how many the round made (kept where the tokens are hidden)
    ttft_s: float  # measured: handed to the engine to its first token, in the round
    token_times_s: tuple[float, ...]  # measured: each new token, after the round's start
    alone_ttft_s: float  # measured: the same, the prompt served alone
    alone_token_times_s: tuple[float, ...]  # measured: each new token alone, after its own start
    alone_decode_step_s: tuple[float, ...]  # measured: each decode step of the alone run (a batch of one)
    same_tokens: bool  # the round's tokens equal the alone run's, token for token
    difference: str = ""  # where they first differ, when they do; "" where hidden
    chunked_token_times_s: tuple[float, ...] = ()  # measured: each new token when a long round is served again
    # chunked, on that run's clock; () when it was not
    chunked_ttft_s: float | None = None  # measured: the same, handed in to the first token (chunks delay it)

    @property
    def request(self) -> str:
        return request_id(self.participant)

    @property
    def itl_s(self) -> tuple[float, ...]:
        return gaps(self.token_times_s)

    @property
    def alone_itl_s(self) -> tuple[float, ...]:
        return gaps(self.alone_token_times_s)

    @property
    def alone_itl_p50_s(self) -> float | None:
        return percentile(self.alone_itl_s, 50)

    def hidden(self) -> Lane:
        """This lane as another person sees it: times and counts, no text and no tokens."""
        return replace(self, prompt_text="", answer_text="", token_ids=(), difference="")


@dataclass(frozen=True)
class LeftOut:
    """A prompt the round did not serve, and why (never its text)."""

    participant: int
    reason: str


@dataclass(frozen=True)
class Seat:
    """One person's figures in a round, all measured: TTFT and ITL in the round and alone, and the steps they rode."""

    participant: int
    ttft_s: float
    alone_ttft_s: float
    itl_p50_s: float | None  # None: a one-token answer has no gap
    alone_itl_p50_s: float | None
    batch: float | None  # median requests in the steps that carried this person's decode tokens
    steps: tuple[int, ...]  # engine steps that carried any of this person's tokens
    total_steps: int
    same_tokens: bool

    @property
    def itl_ratio(self) -> float | None:
        if self.itl_p50_s is None or not self.alone_itl_p50_s:
            return None
        return self.itl_p50_s / self.alone_itl_p50_s

    @property
    def steps_text(self) -> str:
        """The steps as runs of consecutive numbers: "0–11, 14"."""
        runs: list[list[int]] = []
        for index in self.steps:
            if runs and index == runs[-1][-1] + 1:
                runs[-1].append(index)
            else:
                runs.append([index])
        return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)

    def sentence(self) -> str:
        """What to notice, computed: your ITL in a batch against alone (or, for a one-token answer, your TTFT)."""
        if self.itl_p50_s is None or self.alone_itl_p50_s is None or self.batch is None:
            return (
                f"Your answer was one token: its TTFT was {short_time(self.ttft_s)} in the round against "
                f"{short_time(self.alone_ttft_s)} alone."
            )
        batch, ratio = f"{self.batch:g}", self.itl_ratio or 0.0
        text = (
            f"Your ITL in a batch of {batch} was {short_time(self.itl_p50_s)} against "
            f"{short_time(self.alone_itl_p50_s)} alone ({ratio:.1f}x)"
        )
        if self.batch <= 1:
            return text + ": the others had finished, so your tokens rode alone."
        per_token = ratio / self.batch
        text += (
            f": each of those steps made {batch} tokens, one per person, in {ratio:.1f}x the time of a step of one, "
            f"so each token cost {per_token:.2f}x a token alone."
        )
        if per_token < 1:
            return text + " The step reads the weights once for everyone in it."
        return text + " Batching saved nothing here: other work slowed these steps (a busy machine); run it again."


@dataclass(frozen=True)
class TpotMark:
    """One person's TPOT in one serving of a round against the session's TPOT SLO (all measured)."""

    participant: int
    serving: str  # NOT_CHUNKED or CHUNKED
    budget: int  # the tokens one engine step could compute in that serving
    ttft_s: float | None  # handed to the engine to the first token in that serving
    tpot_s: float | None  # None: a one-token answer has no time per output token
    longest_gap_s: float | None  # the longest wait between two of their tokens
    alone_tpot_s: float | None  # the same prompt served alone
    tpot_slo_s: float

    @property
    def past_slo(self) -> bool:
        return self.tpot_s is not None and self.tpot_s >= self.tpot_slo_s

    @property
    def pushed(self) -> bool:
        """Past the SLO in the round though under it alone: the others' work in the round pushed it there."""
        return self.past_slo and self.alone_tpot_s is not None and self.alone_tpot_s < self.tpot_slo_s


NOT_CHUNKED, CHUNKED = "not chunked", "chunked"


@dataclass(frozen=True)
class RoomRound(JsonRecord):
    """One round of a room, served: every engine step of the batched run and every person's lane."""

    code: str  # the room's code
    number: int  # the round's number in the room
    model: str  # display name
    dtype: str
    device: str
    settings: EngineSettings
    max_new_tokens: int
    chat_template: bool  # prompts went through the model's chat template
    steps: tuple[StepRecord, ...]  # the round's engine steps, measured
    lanes: tuple[Lane, ...]  # in the order the prompts came
    left_out: tuple[LeftOut, ...] = ()
    load_avg_1m: float | None = None  # the OS's 1-minute load average as the round finished: others' work here
    transformers_version: str = ""
    long_prompt_tokens: int | None = None  # the presenter's "everyone send a long prompt now" (`RoundAsk`)
    chunk_budget: int | None = None  # the long round served again, prefill chunked to this budget
    chunked_steps: tuple[StepRecord, ...] = ()  # that second serving's engine steps, measured
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def tpot_marks(self, tpot_slo_s: float) -> tuple[TpotMark, ...]:
        """Each person's TPOT and longest gap against the SLO: as the round served them (not chunked: the budget
        holds a whole prompt), and, where it was served again chunked, as that run did."""
        servings = [(NOT_CHUNKED, self.settings.token_budget, "ttft_s", "token_times_s")]
        if self.chunk_budget is not None:
            servings.append((CHUNKED, self.chunk_budget, "chunked_ttft_s", "chunked_token_times_s"))
        return tuple(
            TpotMark(
                lane.participant,
                serving,
                budget,
                getattr(lane, ttft),
                tpot_of(getattr(lane, times)),
                max(gaps(getattr(lane, times)), default=None),
                tpot_of(lane.alone_token_times_s),
                tpot_slo_s,
            )
            for serving, budget, ttft, times in servings
            for lane in self.lanes
        )

    def tpot_sentence(self, tpot_slo_s: float) -> str:
        """How many people's TPOT the long prefills pushed past the SLO, and what chunking did (all measured)."""
        marks = self.tpot_marks(tpot_slo_s)
        parts = []
        for serving in (NOT_CHUNKED, CHUNKED):
            mine = [m for m in marks if m.serving == serving]
            if not mine:
                continue
            longest = max((m.longest_gap_s for m in mine if m.longest_gap_s is not None), default=None)
            budget = f"{mine[0].budget:,}-token budget"
            parts.append(
                f"{serving.capitalize()} ({budget}): {sum(m.past_slo for m in mine)} of {len(mine)} people's TPOT "
                f"past the {short_time(tpot_slo_s)} SLO ({sum(m.pushed for m in mine)} of them under it alone), the "
                f"longest gap between two tokens {short_time(longest) if longest is not None else 'none'}."
            )
        return " ".join(parts)

    def goodput(self, ttft_slo_s: float, tpot_slo_s: float) -> GoodputCount:
        """Each person's request met or missed the session's SLO pair in the round (measured), and the count: its
        arrival is its first token less its TTFT, on the round's clock. A lane with no token has no arrival to read:
        left out before reading it."""
        served = [
            (lane.request, lane.token_times_s[0] - lane.ttft_s, lane.token_times_s)
            for lane in self.lanes
            if lane.token_times_s
        ]
        return goodput_count(served, ttft_slo_s, tpot_slo_s)

    @property
    def all_same_tokens(self) -> bool:
        return all(lane.same_tokens for lane in self.lanes)

    def lane_of(self, participant: int | None) -> Lane | None:
        return next((lane for lane in self.lanes if lane.participant == participant), None)

    def left_out_of(self, participant: int | None) -> LeftOut | None:
        return next((x for x in self.left_out if x.participant == participant), None)

    def steps_of(self, participant: int) -> tuple[StepRecord, ...]:
        """The engine steps that carried any of this person's tokens (prompt or new)."""
        rid = request_id(participant)
        return tuple(s for s in self.steps if any(e.request == rid for e in s.entries))

    def seat(self, participant: int) -> Seat | None:
        lane = self.lane_of(participant)
        if lane is None:
            return None
        rid = request_id(participant)
        steps = self.steps_of(participant)
        decoding = [len(s.entries) for s in steps if any(e.request == rid and e.decode_tokens for e in s.entries)]
        return Seat(
            participant=participant,
            ttft_s=lane.ttft_s,
            alone_ttft_s=lane.alone_ttft_s,
            itl_p50_s=lane.itl_p50_s,
            alone_itl_p50_s=lane.alone_itl_p50_s,
            batch=float(statistics.median(decoding)) if decoding else None,
            steps=tuple(s.index for s in steps),
            total_steps=len(self.steps),
            same_tokens=lane.same_tokens,
        )

    def decode_steps_by_batch(self) -> dict[int, tuple[float, ...]]:
        """The round's decode-only steps' measured times, by how many requests each carried."""
        by_batch: dict[int, list[float]] = {}
        for s in self.steps:
            if s.kind == "decode":
                by_batch.setdefault(len(s.entries), []).append(s.wall_s)
        return {batch: tuple(times) for batch, times in sorted(by_batch.items())}

    @property
    def alone_decode_step_s(self) -> tuple[float, ...]:
        """Every alone run's decode steps: a batch of one, on the same engine."""
        return tuple(t for lane in self.lanes for t in lane.alone_decode_step_s)

    def batch_sentence(self) -> str:
        """The batching lesson in numbers from this round: its largest decode batch's median step against alone."""
        by_batch, alone = self.decode_steps_by_batch(), self.alone_decode_step_s
        if not by_batch or not alone:
            return "No decode step to compare: every answer was one token."
        batch = max(by_batch)
        step_s, alone_s = statistics.median(by_batch[batch]), statistics.median(alone)
        if batch == 1:
            one = f"{short_time(step_s)} in the round, {short_time(alone_s)} alone"
            return f"Every decode step carried one request: {one}."
        text = (
            f"A decode step of {batch} requests took {short_time(step_s)} (median of {len(by_batch[batch])}), one "
            f"request alone {short_time(alone_s)}: {batch} tokens for {step_s / alone_s:.1f}x the time of one."
        )
        if step_s / alone_s < batch:
            return text + " The weights are read once per step, whoever is in it."
        return text + " Batching saved nothing here: other work slowed these steps (a busy machine)."

    def seen_by(self, participant: int | None, show_prompts: bool = False) -> RoomRound:
        """The round as `participant` may see it: their own lane whole, every other lane's text and tokens hidden
        (unless `show_prompts`, the presenter's choice). `None`: someone with no lane (sees no text)."""
        lanes = tuple(lane if show_prompts or lane.participant == participant else lane.hidden() for lane in self.lanes)
        return replace(self, lanes=lanes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("steps", "chunked_steps"):
            data[name] = [
                {**asdict(s), "prefill_tokens": s.prefill_tokens, "decode_tokens": s.decode_tokens, "kind": s.kind}
                for s in getattr(self, name)
            ]
        derived = ("request", "itl_s", "itl_p50_s", "alone_itl_s", "alone_itl_p50_s")
        data["lanes"] = [{**asdict(lane), **{name: getattr(lane, name) for name in derived}} for lane in self.lanes]
        data["summary"] = {"lanes": len(self.lanes), "steps": len(self.steps), "all_same_tokens": self.all_same_tokens}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoomRound:
        """Back from `to_dict` (the derived figures it adds for readers are recomputed, not read)."""
        tuples = ("token_ids", "token_times_s", "alone_token_times_s", "alone_decode_step_s", "chunked_token_times_s")
        built = ("settings", "steps", "lanes", "left_out", "chunked_steps")
        return cls(
            **{name: value for name, value in known(cls, data).items() if name not in built},
            settings=EngineSettings(**data["settings"]),
            steps=tuple(StepRecord.from_dict(s) for s in data["steps"]),
            chunked_steps=tuple(StepRecord.from_dict(s) for s in data.get("chunked_steps", ())),
            lanes=tuple(
                Lane(**{**known(Lane, lane), **{name: tuple(lane[name]) for name in tuples if name in lane}})
                for lane in data["lanes"]
            ),
            left_out=tuple(LeftOut(**x) for x in data.get("left_out", ())),
        )

    @classmethod
    def from_json(cls, text: str) -> RoomRound:
        return cls.from_dict(json.loads(text))
