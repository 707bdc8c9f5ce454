"""What this server allows, read from the environment: the ONE reader of the project's `EXPLORER_*` settings.

Hosted mode (`EXPLORER_HOSTED=1`) turns on the caps of `HostedPolicy` (allow-listed models, per-run caps, a per-session
rate limit) and the endpoint allow-list of `EndpointPolicy`; outside hosted mode a local user is as free as before
(only the app's own text-box bound and an operator's `EXPLORER_ALLOWED_MODELS` apply). Pure Python, no Streamlit and
no torch: `explorer.ui` draws what this module decides, and tests use it directly.

Every environment variable of the project and where it is read (docs/hosting.md documents them):

- here: EXPLORER_HOSTED, EXPLORER_ALLOWED_MODELS, EXPLORER_MAX_PROMPT_TOKENS, EXPLORER_MAX_PROMPT_CHARS,
  EXPLORER_MAX_NEW_TOKENS, EXPLORER_MAX_REPEATS, EXPLORER_MAX_BATCH, EXPLORER_MAX_LAB_S, EXPLORER_ATTENTION_CAP_MIB
  (in hosted mode), EXPLORER_RUNS_PER_MINUTE, EXPLORER_MAX_WAIT_S, EXPLORER_ALLOW_DEVICE_CHOICE, EXPLORER_TURN_LOG,
  EXPLORER_ALLOWED_ENDPOINTS, EXPLORER_MAX_ROOM_SIZE (in hosted mode), EXPLORER_WARM (`warming_on`), and the variable
  a user names with `remote --api-key-env` (`api_key_from_env`).
- explorer/core/paths.py: EXPLORER_CACHE_DIR (the CLI must know it before torch loads; core never imports hosting).
- explorer/core/attention.py: EXPLORER_ATTENTION_CAP_MIB outside hosted mode (its default cap; core never imports
  hosting).
- explorer/cli: EXPLORER_DEBUG (a developer's switch for tracebacks, read where the traceback is caught).
- deploy/run.sh: EXPLORER_HOST, EXPLORER_PORT, EXPLORER_PYTHON (the shell script's own); tests read
  EXPLORER_SCREENSHOTS (where browser tests save screenshots).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED
from explorer.core.units import MIB
from explorer.remote.endpoint import parse_base_url  # the allow-list compares normalized URLs

# --- the environment an operator sets (docs/hosting.md, "Settings", lists them) -------------------------------------
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
MAX_ROOM_SIZE_ENV = "EXPLORER_MAX_ROOM_SIZE"  # prompts in one round of a Room (explorer/labs/room_store.py)
# On a hosted server, one visitor switching device or dtype would load a second copy of the model and evict the one
# everyone else is using: both stay at the server's defaults unless the operator sets this to 1.
ALLOW_DEVICE_CHOICE_ENV = "EXPLORER_ALLOW_DEVICE_CHOICE"
TURN_LOG_ENV = "EXPLORER_TURN_LOG"  # a file to append one JSON line per device turn (who waited, how long, held)
ALLOWED_ENDPOINTS_ENV = "EXPLORER_ALLOWED_ENDPOINTS"  # comma-separated base URLs a hosted app may measure
# On by default: the server loads the default model and takes the device figures when it starts
# (explorer.ui.warm_start). 0 switches it off (the tests do, so no AppTest loads the real model in the background).
WARM_ENV = "EXPLORER_WARM"

TRUE_WORDS = ("1", "true", "yes", "on")


def is_hosted(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(HOSTED_ENV, "").strip().lower() in TRUE_WORDS


def warming_on(env: Mapping[str, str] | None = None) -> bool:
    """Whether the server warms up at start (`EXPLORER_WARM`, on unless set to 0, false, no or off)."""
    env = os.environ if env is None else env
    return env.get(WARM_ENV, "").strip().lower() not in ("0", "false", "no", "off")


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
HOSTED_MAX_ROOM_SIZE = 8  # a round of 8 at 64 new tokens: ~8 s batched and ~25 s alone on 2 cores, one turn
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
    max_room_size: int | None = None  # prompts in one Room round; None: the store's own (room_store.MAX_ROUND_SIZE)
    turn_log: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HostedPolicy:
        env = os.environ if env is None else env
        hosted = is_hosted(env)
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
            max_room_size=_number(env, MAX_ROOM_SIZE_ENV, HOSTED_MAX_ROOM_SIZE, whole=True),
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
            (self.max_room_size, lambda v: f"Room rounds of up to {v} prompts"),
        ]
        lines += [describe(value) for value, describe in optional if value is not None]
        if not self.device_choice:
            lines.append("device and dtype fixed by the server")
        return lines


# --- which endpoints a visitor may point the Endpoint page at --------------------------------------------------------
# A hosted visitor's sweep stays small: it loads someone's server, maybe a shared one.
HOSTED_MAX_CONCURRENCY = 16
HOSTED_MAX_REQUESTS = 64
HOSTED_MAX_TOKENS = 512


@dataclass(frozen=True)
class EndpointPolicy:
    """Outside hosted mode any endpoint goes; in hosted mode only the operator's allow-list (none by default), so a
    visitor cannot make the server send requests to hosts of their choosing."""

    hosted: bool = False
    allowed: tuple[str, ...] = ()  # normalized base URLs

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EndpointPolicy:
        env = os.environ if env is None else env
        allowed = []
        for item in env.get(ALLOWED_ENDPOINTS_ENV, "").split(","):
            if item.strip():
                try:
                    allowed.append(parse_base_url(item).normalized)
                except BadInput:  # an operator's typo must not open anything; it simply matches nothing
                    continue
        return cls(is_hosted(env), tuple(allowed))

    def check(self, base_url: str) -> None:
        """Raise BadInput unless `base_url` may be measured. Pure: reads only this policy, sends nothing."""
        normalized = parse_base_url(base_url).normalized
        if not self.hosted:
            return
        if not self.allowed:
            raise BadInput(
                f"This hosted server measures no endpoints: its operator lists them in {ALLOWED_ENDPOINTS_ENV}."
            )
        if normalized not in self.allowed:
            raise BadInput(f"This hosted server only measures these endpoints: {', '.join(self.allowed)}.")

    def check_limits(self, concurrency_levels: Sequence[int], requests_per_level: int, max_tokens: int) -> None:
        if not self.hosted:
            return
        if (
            max(concurrency_levels, default=0) > HOSTED_MAX_CONCURRENCY
            or requests_per_level > HOSTED_MAX_REQUESTS
            or max_tokens > HOSTED_MAX_TOKENS
        ):
            raise BadInput(
                f"This hosted server caps a sweep at concurrency {HOSTED_MAX_CONCURRENCY}, {HOSTED_MAX_REQUESTS} "
                f"requests per level and {HOSTED_MAX_TOKENS} max tokens."
            )


def check_endpoint_allowed(base_url: str, env: Mapping[str, str] | None = None) -> None:
    """The hosted-mode check on the environment's settings (`EXPLORER_HOSTED`, `EXPLORER_ALLOWED_ENDPOINTS`)."""
    EndpointPolicy.from_env(env).check(base_url)


def api_key_from_env(name: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The API key held by the environment variable a user named (`remote --api-key-env`): never typed on a command
    line, so it stays out of shell history and process lists."""
    if not name:
        return None
    value = (os.environ if env is None else env).get(name)
    if not value:
        raise BadInput(f"The environment variable {name} (named by --api-key-env) is not set or empty.")
    return value
