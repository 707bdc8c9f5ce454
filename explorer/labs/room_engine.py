"""A Room round served by a serving engine (vLLM from `./run vllm`, or any OpenAI-compatible server) instead of this
device: every prompt sent at once, one streamed request per participant, so the engine batches them as it batches any
users; then each prompt alone, greedy, to check the round's tokens against the engine's answer to that prompt alone.

Why alone on the same engine: the two answers then differ only in the batch. An engine's kernels may sum in another
order when several requests share a step, so a near tie between two tokens can flip; where the texts differ, the
alone answer's top-2 log-probabilities at the first differing token say how near that tie was.

Plain Python and httpx: the web tier sends the round itself (this device's owner never sees it), as the Endpoint page
sends its sweeps. Figures: TTFT and ITL measured (client), token counts and cached tokens reported (server)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import httpx

from explorer.core.errors import BadInput, ExplorerError, RunFailed, one_line
from explorer.core.stats import percentile
from explorer.core.trace import JsonRecord
from explorer.labs.room_records import RoundAsk, RoundPrompt
from explorer.remote import wire
from explorer.remote.answer import Stream
from explorer.remote.deadlines import CallEnded, Deadline, Watchdog
from explorer.remote.endpoint import Endpoint, make_endpoint
from explorer.remote.metrics import ServerDelta
from explorer.remote.server_text import error_message
from explorer.remote.watch import Watch

REQUEST_TIMEOUT_S = 120.0  # one answer, from sending to its end: a round of 30 on 2 CPU cores takes tens of seconds
ROUND_LIMIT_S = 600.0  # the round and its alone runs, all told
TOP_LOGPROBS = 2  # the chosen token and its runner-up: how near a tie was

Progress = Callable[[float, str], None]


def served_model(base_url: str, timeout_s: float = 5.0) -> str:
    """The first model the server lists (GET /models): the round asks for what the engine serves."""
    try:
        answer = httpx.get(f"{base_url}/models", timeout=timeout_s, trust_env=False)
        answer.raise_for_status()
        return str(answer.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BadInput(f"{base_url}/models lists no model to send the round to ({one_line(exc)}).") from None


@dataclass(frozen=True)
class EngineLane:
    """One person's request as the engine served it in the round, beside the engine's answer to it alone."""

    participant: int
    prompt_text: str  # "" where hidden from the viewer
    answer_text: str  # the round's answer; "" where hidden
    ttft_s: float | None  # measured (client): sending to the first chunk with text; None when it failed
    chunk_arrivals_s: tuple[float, ...]  # measured (client): each chunk with text, since sending
    output_tokens: int  # reported (server): usage.completion_tokens, else one per chunk
    prompt_tokens: int | None  # reported (server): chat template included
    cached_tokens: int | None  # reported (server): prompt tokens taken from its prefix cache; None where not sent
    alone_text: str = ""  # the engine's greedy answer to this prompt alone; "" where hidden
    same_tokens: bool | None = None  # the round's answer equals the alone answer; None when either failed
    difference: str = ""  # where they first differ and how near a tie it was; "" where equal or hidden
    error: str = ""  # one line, when the round's request failed

    @property
    def itl_s(self) -> tuple[float, ...]:
        """Gaps between streamed chunks: vLLM streams one token per chunk, so one gap per token."""
        return tuple(b - a for a, b in zip(self.chunk_arrivals_s, self.chunk_arrivals_s[1:]))

    @property
    def itl_p50_s(self) -> float | None:
        return percentile(self.itl_s, 50)

    def hidden(self) -> EngineLane:
        """This lane as another person sees it: times and counts, no text."""
        return replace(self, prompt_text="", answer_text="", alone_text="", difference="")


@dataclass(frozen=True)
class EngineRound(JsonRecord):
    """One round of a room served by an engine: every person's streamed request, sent at once."""

    code: str
    number: int
    base_url: str
    model: str
    api: str  # "chat" (the chat template, the engine's own) or "completions" (raw prompts)
    max_new_tokens: int
    wall_s: float  # measured: the round's first send to its last answer
    lanes: tuple[EngineLane, ...]
    # The engine's step mix during the round (steps that carried a prefill chunk, steps of decodes only), from the
    # server's /metrics before and after the round (`round_step_mix`); None where the server publishes none.
    step_mix: dict[str, float] | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def all_same_tokens(self) -> bool:
        return all(lane.same_tokens for lane in self.lanes)

    def lane_of(self, participant: int | None) -> EngineLane | None:
        return next((lane for lane in self.lanes if lane.participant == participant), None)

    def seen_by(self, participant: int | None, show_prompts: bool = False) -> EngineRound:
        lanes = tuple(lane if show_prompts or lane.participant == participant else lane.hidden() for lane in self.lanes)
        return replace(self, lanes=lanes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = "engine"  # a room's stored rounds are either kind: this says which to read it as
        data["lanes"] = [{**asdict(lane), "itl_p50_s": lane.itl_p50_s} for lane in self.lanes]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineRound:
        lanes = []
        for lane in data["lanes"]:
            values = {k: v for k, v in lane.items() if k in EngineLane.__dataclass_fields__}
            values["chunk_arrivals_s"] = tuple(float(x) for x in values["chunk_arrivals_s"])
            lanes.append(EngineLane(**values))
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "lanes"}
        return cls(**values, lanes=tuple(lanes))

    @classmethod
    def from_json(cls, text: str) -> EngineRound:
        return cls.from_dict(json.loads(text))

    def median_ttft_s(self) -> float | None:
        ttfts = [lane.ttft_s for lane in self.lanes if lane.ttft_s is not None]
        return statistics.median(ttfts) if ttfts else None


# --- serving a round -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Alone:
    """The engine's greedy answer to one prompt alone, with each token's top log-probabilities (the server's)."""

    text: str
    tokens: tuple[str, ...]
    top: tuple[tuple[tuple[str, float], ...], ...]  # per token: (token, logprob) best first


def alone_answer(endpoint: Endpoint, prompt: str, max_tokens: int, client: httpx.Client) -> Alone:
    """One request, not streamed, greedy, with the top-2 log-probabilities of every token."""
    payload: dict[str, Any] = {"model": endpoint.model, "max_tokens": max_tokens, "temperature": 0.0}
    if endpoint.api == "chat":
        payload.update(messages=[{"role": "user", "content": prompt}], logprobs=True, top_logprobs=TOP_LOGPROBS)
    else:
        payload.update(prompt=prompt, logprobs=TOP_LOGPROBS)
    try:
        answer = client.post(endpoint.url, json=payload)
    except httpx.HTTPError as exc:
        raise RunFailed(f"{endpoint.url}: the alone request failed ({one_line(exc)}).") from None
    if answer.status_code != 200:
        raise RunFailed(f"{endpoint.url} refused the alone request (HTTP {answer.status_code}): "
                        f"{error_message(answer.content)}")  # fmt: skip
    try:
        return parse_alone(answer.json(), endpoint.api)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise RunFailed(
            f"{endpoint.url} answered the alone request in an unexpected shape ({one_line(exc)})."
        ) from None


def parse_alone(data: Mapping[str, Any], api: str) -> Alone:
    """The text, tokens and top log-probabilities of a non-streamed answer (the chat and the completions shapes)."""
    choice = data["choices"][0]
    if api == "chat":
        text = choice["message"].get("content") or ""
        content = (choice.get("logprobs") or {}).get("content") or []
        tokens = tuple(str(t["token"]) for t in content)
        top = tuple(tuple((str(x["token"]), float(x["logprob"])) for x in t.get("top_logprobs") or []) for t in content)
    else:
        text = choice.get("text") or ""
        logprobs = choice.get("logprobs") or {}
        tokens = tuple(str(t) for t in logprobs.get("tokens") or [])
        top = tuple(
            tuple(sorted(((str(k), float(v)) for k, v in (t or {}).items()), key=lambda kv: -kv[1]))
            for t in logprobs.get("top_logprobs") or []
        )
    return Alone(text, tokens, top)


def difference(round_text: str, alone: Alone) -> str:
    """Where the round's answer first differs from the alone answer, and how near a tie the alone run had there."""
    if round_text == alone.text:
        return ""
    at = next(
        (k for k, (a, b) in enumerate(zip(round_text, alone.text)) if a != b), min(len(round_text), len(alone.text))
    )
    if at == min(len(round_text), len(alone.text)):
        shorter = "round's answer" if len(round_text) < len(alone.text) else "alone answer"
        return f"The same text, but the {shorter} stopped after {at} characters."
    spent, index = 0, len(alone.tokens)
    for k, token in enumerate(alone.tokens):  # the alone token that holds character `at`
        if spent + len(token) > at:
            index = k
            break
        spent += len(token)
    text = (
        f"Character {at} (the alone answer's token {index}): the round wrote {round_text[at : at + 12]!r}, alone "
        f"{alone.text[at : at + 12]!r}."
    )
    if index < len(alone.top) and len(alone.top[index]) >= 2:
        (first, first_lp), (second, second_lp) = alone.top[index][:2]
        text += f" Alone, the engine chose {first!r} over {second!r} by {first_lp - second_lp:.4f} in log-probability: "
        text += (
            "a near tie, which the batch's other summation order flipped (an engine's numerics depend on the batch)."
            if first_lp - second_lp < 0.1
            else "no near tie there: more than the batch's rounding differs (an earlier token's context)."
        )
    return text


def serve_round_on_engine(ask: RoundAsk, base_url: str, model: str, progress: Progress | None = None) -> EngineRound:
    """Every prompt at once (one streamed request each), then each alone; BadInput/RunFailed as one line when the
    engine cannot be reached at all. A request that fails is its lane's one line; the others are kept."""
    if not ask.prompts:
        raise BadInput(f"Round {ask.number} has no prompts: nothing was sent.")
    endpoint = make_endpoint(base_url, model, "chat" if ask.chat_template else "completions")
    say = progress or (lambda _f, _t: None)
    requests = [
        wire.StreamRequest(endpoint, p.text, ask.max_new_tokens, timeout_s=REQUEST_TIMEOUT_S) for p in ask.prompts
    ]
    say(0.05, f"Sending {len(requests)} prompts to {endpoint.base_url} at once…")
    deadline = Deadline.after(ROUND_LIMIT_S)  # the round and its alone runs, all told
    with (
        Watchdog(deadline) as watchdog,
        wire.open_client(len(requests), REQUEST_TIMEOUT_S) as client,
    ):

        def stream(request: wire.StreamRequest) -> Stream | str:
            call = watchdog.open(request.timeout_s)
            try:
                return wire.stream_once(request, client, call)
            except CallEnded:
                return wire.ended_message(request, call, answered=True)
            except ExplorerError as exc:
                return str(exc)
            finally:
                watchdog.close(call)

        started = time.perf_counter()
        with (
            Watch(endpoint.base_url, poll_interval_s=0).around() as batch,  # the engine's own /metrics, before/after
            ThreadPoolExecutor(max_workers=len(requests)) as pool,  # all in flight together: the engine batches them
        ):
            streams = list(pool.map(stream, requests))
            batch.expect(sum(not isinstance(s, str) for s in streams))
        wall_s = time.perf_counter() - started
        if all(isinstance(s, str) for s in streams):
            raise RunFailed(f"Every request of round {ask.number} failed; the first: {streams[0]}")
        lanes = []
        for k, (prompt, served) in enumerate(zip(ask.prompts, streams)):
            say(0.5 + 0.5 * k / len(requests), f"Alone: prompt {k + 1} of {len(requests)}…")
            lanes.append(lane_of(prompt, served, endpoint, ask.max_new_tokens, client, compare=not deadline.passed()))
    say(1.0, "Done.")
    return EngineRound(
        ask.code,
        ask.number,
        endpoint.base_url,
        endpoint.model,
        endpoint.api,
        ask.max_new_tokens,
        wall_s,
        tuple(lanes),
        step_mix=round_step_mix(batch.delta, len(requests)),
    )


def round_step_mix(delta: ServerDelta | None, requests: int) -> dict[str, float] | None:
    """The engine's steps during the round (its streamed requests only, not the alone runs after it), from its
    /metrics: how many carried a prefill chunk, how many only decodes (`explorer.remote.metrics.StepMix`); None where
    the server publishes no /metrics or no per-step token counts."""
    mix = delta.step_mix(max_in_flight=requests) if delta is not None else None
    if mix is None or mix.steps == 0:
        return None
    found = {"steps with a prefill chunk": mix.with_prefill, "decode-only steps": mix.decode_only}
    if mix.unsure:
        found["steps either way"] = mix.unsure
    return found


def lane_of(
    prompt: RoundPrompt,
    served: Stream | str,
    endpoint: Endpoint,
    max_tokens: int,
    client: httpx.Client,
    compare: bool = True,
) -> EngineLane:
    """One person's lane; their prompt sent alone too, unless `compare` is False (the round's time is up)."""
    if isinstance(served, str):
        return EngineLane(prompt.participant, prompt.text, "", None, (), 0, None, None, error=served)
    text = "".join(served.texts)
    same, why, alone_text = None, f"Not compared: the round's {ROUND_LIMIT_S:.0f} s were used up.", ""
    try:
        if compare:
            alone = alone_answer(endpoint, prompt.text, max_tokens, client)
            same, why, alone_text = text == alone.text, difference(text, alone), alone.text
    except ExplorerError as exc:
        same, why, alone_text = None, f"The alone request failed: {exc}", ""
    return EngineLane(
        participant=prompt.participant,
        prompt_text=prompt.text,
        answer_text=text,
        ttft_s=served.arrivals_s[0],
        chunk_arrivals_s=served.arrivals_s,
        output_tokens=served.completion_tokens if served.completion_tokens is not None else len(served.texts),
        prompt_tokens=served.prompt_tokens,
        cached_tokens=served.cached_tokens,
        alone_text=alone_text,
        same_tokens=same,
        difference=why,
    )


def ttft_sentence(lanes: Sequence[EngineLane]) -> str:
    """The spread of the round's first tokens: every prompt was sent at the same moment, so the spread is the engine's
    (its queue and how it split the prefills into steps) and the network's."""
    ttfts = sorted(lane.ttft_s for lane in lanes if lane.ttft_s is not None)
    if len(ttfts) < 2:
        return ""
    return (
        f"All {len(lanes)} prompts were sent at the same moment; their first tokens arrived between "
        f"{ttfts[0] * 1e3:.0f} and {ttfts[-1] * 1e3:.0f} ms later."
    )
