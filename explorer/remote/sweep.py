"""A concurrency sweep against one endpoint: a warm-up request, then every level's requests from a thread pool that
keeps at most `concurrency` in flight, each request a record (a failure is its one line, never raised past the sweep).

Every count and wait is bounded: requests per level, levels, a connect timeout, a deadline per request and a time
limit for the whole sweep. A sweep returns what finished: when a later level fails entirely, the time limit passes or
Ctrl-C arrives, the levels done so far are kept and `SweepResult.stopped` says why it ended early.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import httpx

from explorer.core.errors import BadInput, ExplorerError, RunFailed, one_line
from explorer.core.limits import check_above_zero
from explorer.hosting.settings import EndpointPolicy
from explorer.remote import wire
from explorer.remote.answer import Stream, TokenCount
from explorer.remote.deadlines import CallEnded, Deadline, Watchdog
from explorer.remote.endpoint import Endpoint
from explorer.remote.records import LevelResult, RequestRecord, SweepResult
from explorer.remote.tokens import ChunkCounter, count_tokens
from explorer.remote.watch import Watch

# The Latency page's defaults (explorer.charts.latency.DEFAULT_*), repeated so the CLI need not import altair; a test
# keeps them equal.
DEFAULT_TTFT_SLO_S = 1.0
DEFAULT_ITL_SLO_S = 0.050
DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."
# The completions API continues raw text: after the bare question, greedy SmolLM2 puts its end-of-sequence token first
# (logprob -1.23 against -1.27 for a newline) and streams nothing. The question with its answer begun is continued.
DEFAULT_COMPLETION_PROMPT = f"{DEFAULT_PROMPT} The sky is blue because"
DEFAULT_MAX_TOKENS = 32
DEFAULT_LEVELS = (1, 4)
DEFAULT_REQUESTS = 8
DEFAULT_TIMEOUT_S = 60.0  # one request, from sending it to the end of its stream
DEFAULT_TIME_LIMIT_S = 600.0  # the whole sweep
WARMUP_MAX_TOKENS = 4
MAX_REQUESTS = 1000
MAX_CONCURRENCY = 256
MAX_LEVELS = 16
MAX_TOKENS_LIMIT = 4096
MAX_SLO_S = 3600.0
MAX_TIMEOUT_S = 3600.0  # one request
MAX_TIME_LIMIT_S = 24 * 3600.0  # the whole sweep

INTERRUPTED = "Interrupted (Ctrl-C): the levels that finished are kept."

Progress = Callable[[float, str], None]  # (fraction done 0..1, what is happening)


@dataclass(frozen=True)
class SweepConfig:
    endpoint: Endpoint
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = DEFAULT_MAX_TOKENS
    concurrency_levels: tuple[int, ...] = DEFAULT_LEVELS
    requests_per_level: int = DEFAULT_REQUESTS
    ttft_slo_s: float = DEFAULT_TTFT_SLO_S
    itl_slo_s: float = DEFAULT_ITL_SLO_S
    timeout_s: float = DEFAULT_TIMEOUT_S  # each request's deadline
    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # the sweep's deadline
    warmup: bool = True  # one request first, left out of the statistics: engines pay one-off costs on the first
    fixed_length: bool = False  # every request asks for exactly max_tokens (wire.StreamRequest.fixed_length)
    server_metrics: bool = True  # read the server's /metrics around each level (where it publishes them)

    def validate(self) -> None:
        if not self.prompt.strip():
            raise BadInput("The prompt is empty: type some text to send.")
        if not 1 <= self.max_tokens <= MAX_TOKENS_LIMIT:
            raise BadInput(f"max tokens must be between 1 and {MAX_TOKENS_LIMIT}, not {self.max_tokens}.")
        if not 1 <= self.requests_per_level <= MAX_REQUESTS:
            raise BadInput(f"requests per level must be between 1 and {MAX_REQUESTS}, not {self.requests_per_level}.")
        if not self.concurrency_levels or len(self.concurrency_levels) > MAX_LEVELS:
            raise BadInput(f"Give between 1 and {MAX_LEVELS} concurrency levels.")
        if any(not 1 <= c <= MAX_CONCURRENCY for c in self.concurrency_levels):
            raise BadInput(f"Concurrency levels must be between 1 and {MAX_CONCURRENCY}.")
        check_above_zero("The TTFT SLO (s)", self.ttft_slo_s, MAX_SLO_S)  # NaN passed `<= 0`: refused here
        check_above_zero("The ITL SLO (s)", self.itl_slo_s, MAX_SLO_S)
        check_above_zero("The request timeout (s)", self.timeout_s, MAX_TIMEOUT_S)
        check_above_zero("The sweep's time limit (s)", self.time_limit_s, MAX_TIME_LIMIT_S)

    @property
    def total_requests(self) -> int:
        return self.requests_per_level * len(self.concurrency_levels) + (1 if self.warmup else 0)

    def request(self, api_key: str | None, warmup: bool = False) -> wire.StreamRequest:
        max_tokens = min(WARMUP_MAX_TOKENS, self.max_tokens) if warmup else self.max_tokens
        return wire.StreamRequest(
            self.endpoint, self.prompt, max_tokens, api_key, self.timeout_s, fixed_length=self.fixed_length
        )


def default_prompt(api: str) -> str:
    """The prompt a sweep sends unless told: one each API's answer starts from (DEFAULT_COMPLETION_PROMPT's why)."""
    return DEFAULT_COMPLETION_PROMPT if api == "completions" else DEFAULT_PROMPT


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,4' -> (1, 4): sorted, without repeats."""
    try:
        levels = sorted({int(part) for part in str(text).split(",") if part.strip()})
    except ValueError as exc:
        raise BadInput(f"Concurrency takes comma-separated whole numbers such as 1,4 — not '{text}'.") from exc
    if not levels:
        raise BadInput("Give at least one concurrency level, e.g. 1,4.")
    return tuple(levels)


def record_of(stream: Stream, counted: TokenCount, index: int = -1, start_s: float = 0.0) -> RequestRecord:
    chunk_tokens, chunk_source, output_tokens, output_source = counted
    return RequestRecord(
        index=index,
        start_s=start_s,
        ttft_s=stream.arrivals_s[0],
        e2e_s=stream.arrivals_s[-1],
        chunk_arrivals_s=stream.arrivals_s,
        chunk_tokens=tuple(chunk_tokens),
        output_tokens=output_tokens,
        output_tokens_from=output_source,
        chunk_tokens_from=chunk_source,
        prompt_tokens=stream.prompt_tokens,
        finish_reason=stream.finish_reason,
        text="".join(stream.texts),
        cached_tokens=stream.cached_tokens,
    )


# --- a running sweep ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepRun:
    """What every request of a running sweep shares: one client, the watchdog that keeps the deadlines, the counter."""

    request: wire.StreamRequest
    client: httpx.Client
    watchdog: Watchdog
    counter: ChunkCounter | None

    def send(self, request: wire.StreamRequest, index: int = -1, start_s: float = 0.0) -> RequestRecord:
        """One request, its tokens counted, under its deadline; raises its one-line ExplorerError."""
        call = self.watchdog.open(request.timeout_s)
        try:
            stream = wire.stream_once(request, self.client, call)
            counted = count_tokens(stream, self.counter, call.check)  # the tokenizer not waited for past the deadline
        except CallEnded:
            raise RunFailed(wire.ended_message(request, call, answered=True)) from None
        finally:
            self.watchdog.close(call)
        request.bounds().check_counted(request.endpoint.url, counted)
        return record_of(stream, counted, index, start_s)

    def not_sent_because(self) -> str:
        if self.watchdog.stopped == "interrupted":
            return "Not sent: the sweep was interrupted."
        if self.watchdog.deadline.passed():
            return f"Not sent: the sweep's time limit of {self.watchdog.deadline.limit_s:g} s was reached."
        return ""

    def measure(self, index: int, level_started: float) -> RequestRecord:
        """One request as a record; a failure is kept as its one-line message, so one bad request never ends a sweep."""
        start_s = time.perf_counter() - level_started
        try:
            if why := self.not_sent_because():
                return RequestRecord.failed(index, start_s, why)
            return self.send(self.request, index, start_s)
        except ExplorerError as exc:
            return RequestRecord.failed(index, start_s, str(exc))
        except Exception as exc:  # noqa: BLE001 - one odd server reply must not end the sweep
            return RequestRecord.failed(index, start_s, f"Unexpected failure: {one_line(exc)}")


def run_level(run: SweepRun, concurrency: int, requests: int, on_done: Callable[[RequestRecord], None]) -> LevelResult:
    """`requests` requests, at most `concurrency` in flight; `on_done` runs in the calling thread. Ctrl-C ends every
    open stream at once and sends nothing more; the level keeps what finished. Anything else raised in the calling
    thread (a page that stops) ends the open streams too, then goes on up."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"remote-c{concurrency}") as pool:
        futures = [pool.submit(run.measure, i, started) for i in range(requests)]
        try:
            for future in as_completed(futures):
                on_done(future.result())  # measure never raises
        except KeyboardInterrupt:
            run.watchdog.stop_all("interrupted")  # the rest return at once: streams shut, nothing more sent
        except BaseException:
            run.watchdog.stop_all("interrupted")
            raise
        records = [future.result() for future in futures]  # all done or about to be
    return LevelResult(concurrency, time.perf_counter() - started, tuple(sorted(records, key=lambda r: r.index)))


def run_sweep(
    config: SweepConfig,
    api_key: str | None = None,
    counter: ChunkCounter | None = None,
    on_progress: Progress | None = None,
    policy: EndpointPolicy | None = None,
) -> SweepResult:
    """Check (the allow-list before any connection), warm up with one request (whose failure ends the sweep with its
    one line: nothing was measured), then run every level; the result keeps every level that finished."""
    config.validate()
    policy = policy or EndpointPolicy.from_env()
    policy.check(config.endpoint.base_url)
    policy.check_limits(config.concurrency_levels, config.requests_per_level, config.max_tokens)
    progress = _Progress(on_progress, config.total_requests)
    watch = Watch(config.endpoint.base_url, api_key) if config.server_metrics else None
    if watch is not None:
        watch.read()  # the whole sweep's reading starts before the warm-up
    with (
        Watchdog(Deadline.after(config.time_limit_s)) as watchdog,
        wire.open_client(max(config.concurrency_levels), config.timeout_s) as client,
    ):
        run = SweepRun(config.request(api_key), client, watchdog, counter)
        warmup = None
        if config.warmup:
            # A bad URL, model or server fails here, once, with its own line.
            warmup = run.send(config.request(api_key, warmup=True))
            if watch is not None:
                watch.settled(watch.first, 1)  # so the first level's reading holds the warm-up, left out of it
            progress.done("Warm-up request answered (not counted)")
        levels, stopped = _run_levels(run, config, progress, watch)
    return SweepResult(
        endpoint=config.endpoint,
        prompt=config.prompt,
        max_tokens=config.max_tokens,
        requests_per_level=config.requests_per_level,
        ttft_slo_s=config.ttft_slo_s,
        itl_slo_s=config.itl_slo_s,
        levels=tuple(levels),
        warmup=warmup,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        stopped=stopped,
        interrupted=stopped == INTERRUPTED,
        server_total=watch.whole if watch is not None else None,
        metrics_note=watch.unavailable if watch is not None else "not read (server metrics were turned off)",
    )


def _run_levels(
    run: SweepRun, config: SweepConfig, progress: _Progress, watch: Watch | None = None
) -> tuple[list[LevelResult], str]:
    """Each level in turn until one fails entirely, the time limit passes or Ctrl-C; (levels kept, why it stopped).
    A level cut short keeps its finished requests (the others say why they did not finish); one with none is
    dropped. With no level kept, the sweep fails with that line (Ctrl-C goes on up as itself)."""
    levels: list[LevelResult] = []
    stopped = ""
    try:
        for concurrency in config.concurrency_levels:
            progress.say(f"Concurrency {concurrency}: sending {config.requests_per_level} requests…")
            if watch is None:
                level = run_level(run, concurrency, config.requests_per_level, progress.on_done(concurrency))
            else:
                with watch.around() as batch:  # /metrics read before and after the level, gauges polled during
                    level = run_level(run, concurrency, config.requests_per_level, progress.on_done(concurrency))
                    batch.expect(len(level.succeeded))
                level = replace(level, server=batch.delta)
            if level.succeeded:
                levels.append(level)
            if stopped := _why_stopped(run, level, concurrency):
                break
        else:
            return levels, ""
    except KeyboardInterrupt:  # between two levels, or in a progress report
        run.watchdog.stop_all("interrupted")
    if run.watchdog.stopped == "interrupted":
        if not levels:
            raise KeyboardInterrupt
        return levels, INTERRUPTED
    if not levels:
        raise RunFailed(stopped)
    return levels, stopped


def _why_stopped(run: SweepRun, level: LevelResult, concurrency: int) -> str:
    if run.watchdog.stopped == "interrupted":
        return INTERRUPTED
    if run.watchdog.deadline.passed():
        return f"Stopped at the sweep's time limit of {run.watchdog.deadline.limit_s:g} s."
    if not level.succeeded:
        first = next(r.error for r in level.records if r.error)
        return f"All {len(level.records)} requests at concurrency {concurrency} failed; the first: {first}"
    return ""


class _Progress:
    """Requests answered out of all the sweep will send, reported in the calling thread."""

    def __init__(self, on_progress: Progress | None, total: int) -> None:
        self.on_progress = on_progress
        self.total = max(total, 1)
        self.answered = 0

    def say(self, text: str) -> None:
        if self.on_progress:
            self.on_progress(min(1.0, self.answered / self.total), text)

    def done(self, text: str) -> None:
        self.answered += 1
        self.say(text)

    def on_done(self, concurrency: int) -> Callable[[RequestRecord], None]:
        def note(_record: RequestRecord) -> None:
            self.done(f"Concurrency {concurrency}: {self.answered + 1} of {self.total} requests answered")

        return note
