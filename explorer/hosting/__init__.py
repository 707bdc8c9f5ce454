"""What a shared server allows and how its sessions take turns on the one device: the hosted-mode policy (allow-listed
models, per-run caps, a per-session rate limit) read from the environment, and a FIFO ticket queue for the device.

Pure Python and thread-safe, no Streamlit and no torch: `explorer.ui` draws what this module decides, and tests use it
directly. One switch, `EXPLORER_HOSTED=1`, turns the caps on; outside hosted mode a local user is as free as before
(only the app's own text-box bound and an operator's `EXPLORER_ALLOWED_MODELS` apply).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED
from explorer.core.units import MIB

# --- the environment an operator sets (README.md, "Hosting a shared demo", lists them) -----------------------------
HOSTED_ENV = "EXPLORER_HOSTED"
ALLOWED_MODELS_ENV = "EXPLORER_ALLOWED_MODELS"  # comma-separated names a visitor may type in the Model box
MAX_PROMPT_TOKENS_ENV = "EXPLORER_MAX_PROMPT_TOKENS"
MAX_PROMPT_CHARS_ENV = "EXPLORER_MAX_PROMPT_CHARS"
MAX_NEW_TOKENS_ENV = "EXPLORER_MAX_NEW_TOKENS"
MAX_REPEATS_ENV = "EXPLORER_MAX_REPEATS"
MAX_BATCH_ENV = "EXPLORER_MAX_BATCH"
MAX_LAB_S_ENV = "EXPLORER_MAX_LAB_S"
ATTENTION_CAP_ENV = "EXPLORER_ATTENTION_CAP_MIB"  # the same variable explorer.core.attention reads outside hosted mode
RUNS_PER_MINUTE_ENV = "EXPLORER_RUNS_PER_MINUTE"
MAX_WAIT_ENV = "EXPLORER_MAX_WAIT_S"
# On a hosted server, one visitor switching device or dtype would load a second copy of the model and evict the one
# everyone else is using: both stay at the server's defaults unless the operator sets this to 1.
ALLOW_DEVICE_CHOICE_ENV = "EXPLORER_ALLOW_DEVICE_CHOICE"
TURN_LOG_ENV = "EXPLORER_TURN_LOG"  # a file to append one JSON line per device turn (who waited, how long, held)

TRUE_WORDS = ("1", "true", "yes", "on")

# Outside hosted mode: the app's text box bound, nothing else (the engine keeps its own limits).
LOCAL_MAX_PROMPT_CHARS = 20_000

# Hosted defaults, sized for a 2-core CPU box shared by a team: a run stays within a few seconds, a lab within a
# minute, and a prompt cannot make the attention capture or the prefill hog the machine.
HOSTED_MAX_PROMPT_TOKENS = 256  # chat template included; ~0.5 s of prefill for SmolLM2-135M on 2 cores
CHARS_PER_TOKEN_BOUND = 8  # English runs ~4 characters a token: 8 leaves room, and bounds tokenizing before counting
HOSTED_MAX_NEW_TOKENS = 64  # ~3 s of decode at ~45 ms a token
HOSTED_MAX_REPEATS = 3
HOSTED_MAX_BATCH = 8
HOSTED_MAX_LAB_S = 60.0  # a lab's own time budget may not exceed this
HOSTED_ATTENTION_CAP_MIB = 64.0  # 30 layers x 9 heads x 256^2 x 2 bytes = 34 MiB fits; 512 tokens (141 MiB) does not
HOSTED_RUNS_PER_MINUTE = 6
HOSTED_MAX_WAIT_S = 120.0
RATE_WINDOW_S = 60.0


def _number(env: Mapping[str, str], name: str, default: float | None, whole: bool) -> float | None:
    """An operator's number, `0` meaning "no limit"; a malformed value is refused with one line naming the variable."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        # The value is not echoed: a visitor reads this line, and it is the operator's setting.
        raise BadInput(f"{name} must be {kind} (0 for no limit): fix the server's settings.") from None
    if value < 0:
        raise BadInput(f"{name} must be 0 (no limit) or more: fix the server's settings.")
    return None if value == 0 else value


@dataclass(frozen=True)
class LabSize:
    """What a lab is about to run, declared by its page so a hosted server can refuse it before it takes the device."""

    prompt_tokens: int | None = None  # a lab that makes its own prompts of a fixed token length
    prompt_chars: int | None = None  # a lab that takes a typed prompt
    new_tokens: int = 0
    batch_sizes: tuple[int, ...] = ()
    budget_s: float | None = None  # the lab's own time budget


@dataclass(frozen=True)
class HostedPolicy:
    """The limits of this server. `None` means no limit beyond the engine's own."""

    hosted: bool = False
    allowed_models: tuple[str, ...] = ()  # empty: any model (local use)
    max_prompt_chars: int = LOCAL_MAX_PROMPT_CHARS
    max_prompt_tokens: int | None = None  # counted after the chat template is applied
    max_new_tokens: int | None = None
    max_repeats: int | None = None
    max_batch: int | None = None
    max_lab_s: float | None = None
    attention_cap_mib: float | None = None  # None: explorer.core.attention's own default
    runs_per_minute: int | None = None  # per browser session: every run, lab and re-measure takes the device
    max_wait_s: float | None = None  # how long a run may wait for the device before it is refused
    device_choice: bool = True  # visitors may pick device and dtype; a hosted server pins them unless allowed
    turn_log: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HostedPolicy:
        env = os.environ if env is None else env
        hosted = env.get(HOSTED_ENV, "").strip().lower() in TRUE_WORDS
        listed = tuple(m.strip() for m in env.get(ALLOWED_MODELS_ENV, "").split(",") if m.strip())
        log = env.get(TURN_LOG_ENV, "").strip()
        turn_log = Path(log).expanduser() if log else None
        if not hosted:
            return cls(
                allowed_models=listed,
                max_wait_s=_number(env, MAX_WAIT_ENV, None, whole=False),
                turn_log=turn_log,
            )
        max_tokens = _number(env, MAX_PROMPT_TOKENS_ENV, HOSTED_MAX_PROMPT_TOKENS, whole=True)
        default_chars = CHARS_PER_TOKEN_BOUND * max_tokens if max_tokens else LOCAL_MAX_PROMPT_CHARS
        return cls(
            hosted=True,
            allowed_models=listed or (EMBEDDED,),
            max_prompt_chars=_number(env, MAX_PROMPT_CHARS_ENV, default_chars, whole=True) or LOCAL_MAX_PROMPT_CHARS,
            max_prompt_tokens=max_tokens,
            max_new_tokens=_number(env, MAX_NEW_TOKENS_ENV, HOSTED_MAX_NEW_TOKENS, whole=True),
            max_repeats=_number(env, MAX_REPEATS_ENV, HOSTED_MAX_REPEATS, whole=True),
            max_batch=_number(env, MAX_BATCH_ENV, HOSTED_MAX_BATCH, whole=True),
            max_lab_s=_number(env, MAX_LAB_S_ENV, HOSTED_MAX_LAB_S, whole=False),
            attention_cap_mib=_number(env, ATTENTION_CAP_ENV, HOSTED_ATTENTION_CAP_MIB, whole=False),
            runs_per_minute=_number(env, RUNS_PER_MINUTE_ENV, HOSTED_RUNS_PER_MINUTE, whole=True),
            max_wait_s=_number(env, MAX_WAIT_ENV, HOSTED_MAX_WAIT_S, whole=False),
            device_choice=env.get(ALLOW_DEVICE_CHOICE_ENV, "").strip().lower() in TRUE_WORDS,
            turn_log=turn_log,
        )

    @property
    def attention_cap_bytes(self) -> int | None:
        return None if self.attention_cap_mib is None else int(self.attention_cap_mib * MIB)

    # --- checks, each one line that says what to do; none touches the filesystem or the model ---------------------
    def check_model(self, name: str) -> str:
        """The model to load for what a visitor typed; anything not on the allow-list is refused by name alone, so a
        path, `..`, a hub id or a URL never reaches the filesystem or the network."""
        wanted = name.strip() or EMBEDDED
        if self.allowed_models and wanted not in self.allowed_models:
            raise BadInput(
                f"This server only runs these models: {', '.join(self.allowed_models)}. "
                "Type one of them in the Model box."
            )
        return wanted

    def check_prompt_chars(self, prompt: str) -> None:
        """Characters first, so a pasted book is refused before any of it is tokenized."""
        if len(prompt) > self.max_prompt_chars:
            tokens = f" and {self.max_prompt_tokens:,} tokens" if self.max_prompt_tokens else ""
            raise BadInput(
                f"The prompt is {len(prompt):,} characters; this server takes at most {self.max_prompt_chars:,} "
                f"characters{tokens} per prompt: shorten it. Nothing ran."
            )

    def check_request(self, prompt: str, max_new_tokens: int, repeats: int) -> None:
        """Everything about a run that is known before the model is loaded."""
        self.check_prompt_chars(prompt)
        if self.max_new_tokens is not None and max_new_tokens > self.max_new_tokens:
            raise BadInput(
                f"This server makes at most {self.max_new_tokens} new tokens per run, not {max_new_tokens}: "
                "lower Max new tokens."
            )
        if self.max_repeats is not None and repeats > self.max_repeats:
            raise BadInput(
                f"This server runs at most {self.max_repeats} repeats per run, not {repeats}: lower Repeats."
            )

    def check_prompt_tokens(self, prompt_tokens: int) -> None:
        """After tokenizing a prompt that passed the character cap (a few thousand characters at most)."""
        if self.max_prompt_tokens is not None and prompt_tokens > self.max_prompt_tokens:
            raise BadInput(
                f"The prompt is {prompt_tokens:,} tokens (chat template included); this server takes at most "
                f"{self.max_prompt_tokens:,}: shorten it. Nothing ran."
            )

    def check_lab(self, size: LabSize | None) -> None:
        """A lab's declared size against the caps; a hosted server refuses a lab that declares none."""
        if not self.hosted:
            return
        if size is None:
            raise BadInput("This lab does not state its size, so this hosted server does not run it.")
        if size.prompt_chars is not None and size.prompt_chars > self.max_prompt_chars:
            raise BadInput(
                f"The prompt is {size.prompt_chars:,} characters; this server takes at most "
                f"{self.max_prompt_chars:,}: shorten it. Nothing ran."
            )
        if size.prompt_tokens is not None:
            self.check_prompt_tokens(size.prompt_tokens)
        if self.max_new_tokens is not None and size.new_tokens > self.max_new_tokens:
            raise BadInput(
                f"This server makes at most {self.max_new_tokens} new tokens per lab run, not {size.new_tokens}: "
                "lower New tokens."
            )
        if self.max_batch is not None and any(b > self.max_batch for b in size.batch_sizes):
            raise BadInput(
                f"This server runs batches of at most {self.max_batch}, not {max(size.batch_sizes)}: "
                "choose smaller batch sizes."
            )
        if self.max_lab_s is not None and (size.budget_s is None or size.budget_s > self.max_lab_s):
            raise BadInput(
                f"This server gives a lab at most {self.max_lab_s:.0f} s on the device: lower the time budget "
                f"to {self.max_lab_s:.0f} s or less."
            )

    def lab_budget_s(self, default_s: float) -> float:
        """A lab's time budget on this server: its own default, lowered to the hosted cap."""
        return default_s if self.max_lab_s is None else min(default_s, self.max_lab_s)

    def check_rate(self, recent_starts_s: tuple[float, ...], now_s: float) -> tuple[float, ...]:
        """The session's start times within the last minute, with `now_s` added; refused when the minute is full."""
        kept = tuple(t for t in recent_starts_s if now_s - t < RATE_WINDOW_S)
        if self.runs_per_minute is not None and len(kept) >= self.runs_per_minute:
            again_s = max(1, int(RATE_WINDOW_S - (now_s - kept[0])) + 1)
            raise BadInput(
                f"This server allows {self.runs_per_minute} runs per minute per visitor, and you have started "
                f"{len(kept)}: try again in {again_s} s. Nothing ran."
            )
        return (*kept, now_s)

    def caps_lines(self) -> list[str]:
        """The caps in force, one short phrase each, for the sidebar."""
        lines = [f"models: {', '.join(self.allowed_models)}"] if self.allowed_models else []
        if not self.hosted:
            return lines
        prompt = f"prompts up to {self.max_prompt_chars:,} characters"
        if self.max_prompt_tokens:
            prompt += f" and {self.max_prompt_tokens:,} tokens (chat template included)"
        lines.append(prompt)
        optional = [
            (self.max_new_tokens, lambda v: f"up to {v} new tokens per run"),
            (self.max_repeats, lambda v: f"up to {v} repeats"),
            (self.max_batch, lambda v: f"batches up to {v}"),
            (self.max_lab_s, lambda v: f"labs up to {v:.0f} s"),
            (self.attention_cap_mib, lambda v: f"attention maps up to {v:.0f} MiB per run"),
            (self.runs_per_minute, lambda v: f"{v} runs per minute per visitor"),
            (self.max_wait_s, lambda v: f"a run waits at most {v:.0f} s for the device"),
        ]
        lines += [describe(value) for value, describe in optional if value is not None]
        if not self.device_choice:
            lines.append("device and dtype fixed by the server")
        return lines


# --- the device queue --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ticket:
    """A place in the device's line. `number` orders tickets; `what` and `owner` are for the wait message and log."""

    number: int
    what: str  # "run", "lab", "device figures"
    owner: str = ""  # an anonymous session label, never a prompt or a path
    entered_s: float = 0.0  # the queue's clock
    thread_id: int = 0  # the script thread that waits with it: a waiting session draws nothing worth counting


@dataclass(frozen=True)
class QueueStatus:
    """Where a ticket stands, for the waiting message."""

    holding: bool  # the ticket's turn has come
    in_line: bool  # waiting for it (False once it holds the device, or after it left)
    ahead: int  # turns before this one: the one on the device, if any, and those waiting in front
    expected_wait_s: float | None  # None until a turn has finished and given a duration to go by
    waited_s: float
    recent_turns: int  # how many finished turns the estimate averages
    mean_turn_s: float | None


@dataclass(frozen=True)
class TurnRecord:
    """One finished turn on the device, as the log keeps it (seconds; `*_unix_s` are wall-clock times)."""

    number: int
    what: str
    owner: str
    first_ahead: int  # turns ahead when the ticket was taken
    waited_s: float
    held_s: float
    granted_unix_s: float
    released_unix_s: float
    ended: str  # "released", "cancelled" (never held), "after drawing", "hold limit"


@dataclass
class _Entry:
    ticket: Ticket
    first_ahead: int
    granted_s: float | None = None
    granted_unix_s: float | None = None
    hold_until_s: float | None = None  # a finished turn kept while its session draws, at most until then


@dataclass
class DeviceQueue:
    """First come, first served turns on one device, thread-safe.

    `enter()` takes a ticket at the back of the line; the head of the line gets the device as soon as it is free.
    `wait()` blocks up to a timeout (callers poll, so a waiting page can redraw its place and be cancelled);
    `release()` gives the turn back or leaves the line; `release_when_done()` keeps a finished turn until the thread
    that ran it ends (its page is drawn) or a limit passes, so the next run's passes never compete with that drawing.
    The expected wait is the mean of the last few turns' durations times the turns ahead, less what the one on the
    device has already used.
    """

    history: int = 8
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    log_path: Path | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _line: deque[_Entry] = field(default_factory=deque, init=False)
    _holder: _Entry | None = field(default=None, init=False)
    _next_number: int = field(default=1, init=False)
    _durations_s: deque[float] = field(default_factory=deque, init=False)
    turns: deque[TurnRecord] = field(default_factory=lambda: deque(maxlen=64), init=False)  # the latest turns

    # --- taking and giving back turns ----------------------------------------------------------------------------
    def enter(self, what: str, owner: str = "") -> Ticket:
        with self._cond:
            ticket = Ticket(self._next_number, what, owner, self.clock(), threading.get_ident())
            self._next_number += 1
            ahead = len(self._line) + (self._holder is not None)
            self._line.append(_Entry(ticket, ahead))
            self._promote()
            return ticket

    def wait(self, ticket: Ticket, timeout_s: float | None) -> bool:
        """True once `ticket` holds the device; False after `timeout_s` (None: no limit) or if it left the line."""
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with self._cond:
            while True:
                self._expire_holds()
                if self._holder is not None and self._holder.ticket.number == ticket.number:
                    return True
                if not any(e.ticket.number == ticket.number for e in self._line):
                    return False  # cancelled
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    return False
                hold_left = self._hold_left_s()
                step = min(x for x in (remaining, hold_left, 1.0) if x is not None)
                self._cond.wait(max(step, 0.001))

    def release(self, ticket: Ticket, ended: str = "released") -> None:
        """Give the turn back, or leave the line if it had not come yet. Calling it again does nothing."""
        with self._cond:
            if self._holder is not None and self._holder.ticket.number == ticket.number:
                self._finish(self._holder, ended)
                self._holder = None
                self._promote()
            else:
                for entry in list(self._line):
                    if entry.ticket.number == ticket.number:
                        self._line.remove(entry)
                        self._record(entry, "cancelled")
                        self._promote()  # the ones behind move up
            self._cond.notify_all()

    def release_when_done(self, ticket: Ticket, thread: threading.Thread, limit_s: float) -> None:
        """Keep a finished turn until `thread` ends or `limit_s` passes, whichever is first; then give it back."""
        with self._cond:
            if self._holder is None or self._holder.ticket.number != ticket.number:
                return
            self._holder.hold_until_s = self.clock() + limit_s

        def watch() -> None:
            thread.join(limit_s)
            self.release(ticket, "after drawing" if not thread.is_alive() else "hold limit")

        threading.Thread(target=watch, name=f"device-turn-{ticket.number}", daemon=True).start()

    # --- what a waiting page shows ---------------------------------------------------------------------------------
    def holds(self, ticket: Ticket) -> bool:
        with self._cond:
            return self._holder is not None and self._holder.ticket.number == ticket.number

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._line)

    def waiting_thread_ids(self) -> frozenset[int]:
        with self._cond:
            return frozenset(e.ticket.thread_id for e in self._line)

    def status(self, ticket: Ticket) -> QueueStatus:
        with self._cond:
            now = self.clock()
            durations = list(self._durations_s)
            mean = statistics.fmean(durations) if durations else None
            waited = now - ticket.entered_s
            if self._holder is not None and self._holder.ticket.number == ticket.number:
                return QueueStatus(True, False, 0, 0.0, waited, len(durations), mean)
            place = next((i for i, e in enumerate(self._line) if e.ticket.number == ticket.number), None)
            in_front = len(self._line) if place is None else place
            ahead = in_front + (self._holder is not None)
            expected = None
            if mean is not None:
                used = 0.0 if self._holder is None or self._holder.granted_s is None else now - self._holder.granted_s
                current = max(0.0, mean - used) if self._holder is not None else 0.0
                expected = current + mean * in_front
            return QueueStatus(False, place is not None, ahead, expected, waited, len(durations), mean)

    # --- inside the lock -------------------------------------------------------------------------------------------
    def _promote(self) -> None:
        if self._holder is None and self._line:
            self._holder = self._line.popleft()
            self._holder.granted_s = self.clock()
            self._holder.granted_unix_s = self.wall_clock()
            self._cond.notify_all()

    def _hold_left_s(self) -> float | None:
        if self._holder is None or self._holder.hold_until_s is None:
            return None
        return self._holder.hold_until_s - self.clock()

    def _expire_holds(self) -> None:
        """A kept turn past its limit is given back here too, in case its watcher never ran."""
        left = self._hold_left_s()
        if left is not None and left <= 0 and self._holder is not None:
            self._finish(self._holder, "hold limit")
            self._holder = None
            self._promote()

    def _finish(self, entry: _Entry, ended: str) -> None:
        now = self.clock()
        held_s = now - (entry.granted_s if entry.granted_s is not None else now)
        self._durations_s.append(held_s)
        while len(self._durations_s) > self.history:
            self._durations_s.popleft()
        self._record(entry, ended)

    def _record(self, entry: _Entry, ended: str) -> None:
        now, now_unix = self.clock(), self.wall_clock()
        granted = entry.granted_s if entry.granted_s is not None else now
        record = TurnRecord(
            number=entry.ticket.number,
            what=entry.ticket.what,
            owner=entry.ticket.owner,
            first_ahead=entry.first_ahead,
            waited_s=granted - entry.ticket.entered_s,
            held_s=now - granted,
            granted_unix_s=entry.granted_unix_s if entry.granted_unix_s is not None else now_unix,
            released_unix_s=now_unix,
            ended=ended,
        )
        self.turns.append(record)
        if self.log_path is not None:
            try:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write(json.dumps(asdict(record)) + "\n")
            except OSError:
                pass  # the log is for the operator; a full disk must not stop the demo


class ScriptActivity:
    """Which script threads of this process are alive: each browser session's script run is one thread, from its
    first line to its last drawing. A run is flagged when another session's script was drawing while its passes ran
    (sampled at the start and after every pass), since that drawing competes with the passes for the same cores."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[int, threading.Thread] = {}

    def note(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = {i: t for i, t in self._threads.items() if t.is_alive()}
            if thread.ident is not None:
                self._threads[thread.ident] = thread

    def others_drawing(self, me: int, waiting: frozenset[int]) -> int:
        """Alive script threads other than `me` that are not waiting in the device's line."""
        with self._lock:
            return sum(1 for i, t in self._threads.items() if i != me and i not in waiting and t.is_alive())


def read_turn_log(path: Path) -> list[TurnRecord]:
    """The turns a log holds, oldest first."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [TurnRecord(**json.loads(line)) for line in lines if line.strip()]


def wait_sentence(status: QueueStatus, max_wait_s: float | None) -> str:
    """What a waiting visitor reads, redrawn as the line moves. "Number n in line" counts the turn on the device."""
    if status.ahead <= 1:
        place = "You are next in line"
    else:
        waiting = status.ahead - 1
        place = f"You are number {status.ahead} in line: {waiting} waiting before you, behind the run on the device"
    if status.expected_wait_s is None:
        expected = "Expected wait: not known until a first turn has finished"
    elif status.expected_wait_s < 1:
        expected = "Expected wait: any moment now"
    else:
        turns = "the last turn took" if status.recent_turns == 1 else f"the last {status.recent_turns} turns took"
        expected = (
            f"Expected wait: about {status.expected_wait_s:.0f} s ({turns} {status.mean_turn_s:.1f} s on average)"
        )
    limit = f" (a run waits at most {max_wait_s:.0f} s)" if max_wait_s else ""
    return (
        "Another session is using the device, so this run waits its turn and the timings stay clean. "
        f"{place}. {expected}. Waiting for {status.waited_s:.0f} s so far{limit}."
    )
