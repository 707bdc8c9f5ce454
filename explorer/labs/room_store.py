"""The Room's store: rooms a presenter opens under a short code, the people who join by its link, each round's prompts
(one per person) and each finished round's result, until the room has been idle for 30 minutes. Pure Python,
thread-safe and torch-free: web-tier state, one store per web process (`explorer.ui.room_view.room_store`), which
the device owner never sees; the clock is injected for tests.

Who is who: a member is a person, not a tab. Joining mints an unguessable member token (`secrets.token_urlsafe`) kept
beside the person's number in the room (in the order they joined, 1 for whoever opened it: the presenter). The page
keeps the token in the person's own link (`?room=CODE&me=TOKEN`), so a reload or a tab the phone discarded comes back
as the same person, with their lane and answer, and the head count counts people. A token that is not one of the
room's is refused (`NotAMember`): the page says so and joins its visitor as someone new. Pages show numbers only
("participant 3"), never another's token. A round moves open → running → done; a run that was refused, failed or cut off
(the presenter's tab closed) puts it back to open with its prompts and a note, so the presenter can start it again.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from explorer.core.errors import BadInput
from explorer.core.trace import JsonRecord

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: a code read off a projector is typed right
CODE_LENGTH = 5  # 32^5 = 33 million codes
CODE_PATTERN = re.compile(f"^[{CODE_ALPHABET}]{{{CODE_LENGTH}}}$")
IDLE_S = 30 * 60.0  # a room whose page nobody opened, submitted to or ran a round in for this long is closed
RUNNING_LIMIT_S = 15 * 60.0  # a round still running after this was lost with its server thread: it reopens
MAX_ROOMS = 64  # rooms open at once on one server
MAX_MEMBERS = 500  # people who joined one room
MAX_ROUND_SIZE = 32  # the engine lab's own request limit (explorer.labs.schedule.workload.MAX_REQUESTS)
ROUNDS_KEPT = 20  # finished rounds a room keeps, newest; older results go
EXPIRED_KEPT = 256  # codes remembered as expired, so a late visitor is told so rather than "no such room"
PRESENTER = 1  # the number of whoever opened the room
TOKEN_BYTES = 16  # a member token's randomness: 128 bits, 22 URL-safe characters, not guessable within a room's life

OPEN, RUNNING, DONE = "open", "running", "done"


@dataclass(frozen=True)
class Submission:
    """One person's prompt in a round."""

    participant: int
    prompt: str
    at_s: float  # the store's clock when it was submitted (or last replaced)


@dataclass(frozen=True)
class Round:
    """One round of a room: its prompts, its state and, once done, its result."""

    number: int  # 1, 2, ... within the room
    state: str = OPEN  # OPEN, RUNNING or DONE
    submissions: tuple[Submission, ...] = ()  # in the order they first came
    started_s: float | None = None  # the store's clock when the presenter started it
    result: JsonRecord | None = None  # the round's record (explorer.labs.room_records.RoomRound) once done
    note: str = ""  # why the last start did not finish, shown to the room

    @property
    def size(self) -> int:
        return len(self.submissions)

    def prompt_of(self, participant: int) -> str | None:
        return next((s.prompt for s in self.submissions if s.participant == participant), None)


@dataclass(frozen=True)
class RoomView:
    """A room as one member sees it, at one moment: a snapshot, safe to read while the store changes."""

    code: str
    participant: int  # the viewer's number in this room
    members: int  # people who joined (each once, however many tabs or reloads)
    current: Round  # the round that is open or running
    finished: tuple[Round, ...]  # done rounds, oldest first
    rounds_version: int  # changes when a round starts, ends or reopens: a page redraws then (`RoomStatus`)
    member: str  # the viewer's own member token: their personal link carries it, nobody else's page shows it

    @property
    def is_presenter(self) -> bool:
        return self.participant == PRESENTER


@dataclass(frozen=True)
class RoomStatus:
    """What a page polls every few seconds: cheap, joins nobody. It redraws itself when `rounds_version` moves; the
    rest (people, prompts in) it only prints."""

    rounds_version: int
    members: int
    current: Round


@dataclass
class _Room:
    code: str
    members: dict[str, int]  # member token -> number
    current: Round
    last_active_s: float
    finished: list[Round] = field(default_factory=list)
    rounds_version: int = 0

    def touch(self, now_s: float, rounds_changed: bool = False) -> None:
        self.last_active_s = now_s
        self.rounds_version += rounds_changed

    def view(self, member: str) -> RoomView:
        members = self.members
        return RoomView(
            self.code, members[member], len(members), self.current, tuple(self.finished), self.rounds_version, member
        )


class NotAMember(BadInput):
    """A member token that is not one of the room's (mistyped, from another room, or the room's own link copied with
    someone else's token cut off): the visitor joins as someone new instead."""


def random_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def random_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalized_code(code: str) -> str:
    """The code as stored (upper case, no spaces); one line when it cannot be a room code at all."""
    cleaned = code.strip().upper().replace(" ", "").replace("-", "")
    if not CODE_PATTERN.match(cleaned):
        raise BadInput(
            f"A room code is {CODE_LENGTH} letters and digits, like K7QX2: check the link or the code you typed."
        )
    return cleaned


class RoomStore:
    """Every room of one server. Each method takes the one lock, expires idle rooms first, and returns snapshots."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        idle_s: float = IDLE_S,
        make_code: Callable[[], str] = random_code,
        max_rooms: int = MAX_ROOMS,
    ) -> None:
        self.clock, self.idle_s, self.make_code, self.max_rooms = clock, idle_s, make_code, max_rooms
        self._rooms: dict[str, _Room] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    # --- rooms -------------------------------------------------------------------------------------------------------
    def open_room(self, member: str | None = None) -> RoomView:
        """A new room with `member` (a fresh token when None) as its presenter (number 1) and round 1 open."""
        member = member or random_token()
        with self._lock:
            now_s = self._sweep()
            if len(self._rooms) >= self.max_rooms:
                raise BadInput(
                    f"This server has {len(self._rooms)} rooms open, its most: try again once one has been idle "
                    f"{self.idle_s / 60:.0f} minutes."
                )
            code = next((c for c in (self.make_code() for _ in range(100)) if c not in self._rooms), None)
            if code is None:
                raise BadInput("No free room code was found: try again.")
            self._expired.pop(code, None)
            room = _Room(code, {member: PRESENTER}, Round(1), now_s)
            self._rooms[code] = room
            return room.view(member)

    def join(self, code: str) -> RoomView:
        """Someone new in the room: the next number, under a fresh member token (`RoomView.member`)."""
        return self.view(code, random_token())

    def rejoin(self, code: str, member: str) -> RoomView:
        """The room as the member with this token sees it (a reload, a tab come back); `NotAMember` when the token is
        not one of this room's, and nobody joins."""
        with self._lock:
            now_s = self._sweep()
            room = self._room(code)
            if member not in room.members:
                raise NotAMember(
                    f"This link's member token is not one of room {room.code}'s: you join it as someone new."
                )
            room.touch(now_s)
            return room.view(member)

    def view(self, code: str, member: str) -> RoomView:
        """The room as `member` sees it; a member new to the room joins it under that token (the next number)."""
        with self._lock:
            now_s = self._sweep()
            room = self._room(code)
            if member not in room.members:
                if len(room.members) >= MAX_MEMBERS:
                    raise BadInput(f"Room {room.code} has {MAX_MEMBERS} people, its most: ask for another room.")
                room.members[member] = max(room.members.values()) + 1
            room.touch(now_s)  # a room whose page is drawn is in use (the page's poll, `status`, does not count)
            return room.view(member)

    def status(self, code: str) -> RoomStatus | None:
        """The room's round and counts, or None once it has closed. Cheap, joins nobody: a page polls it."""
        with self._lock:
            self._sweep()
            room = self._rooms.get(code)
            return None if room is None else RoomStatus(room.rounds_version, len(room.members), room.current)

    # --- a round -----------------------------------------------------------------------------------------------------
    def submit(self, code: str, member: str, prompt: str, max_round_size: int | None) -> Round:
        """`member`'s prompt joins the open round, or replaces the one they sent to it before."""
        text = prompt.strip()
        if not text:
            raise BadInput("The prompt is empty: type a prompt, then submit it.")
        limit = min(MAX_ROUND_SIZE, max_round_size or MAX_ROUND_SIZE)
        with self._lock:
            now_s = self._sweep()
            room = self._room(code)
            participant = self._member(room, member)
            current = room.current
            if current.state == RUNNING:
                raise BadInput(
                    f"Round {current.number} has started: submit again once it ends, and your prompt joins round "
                    f"{current.number + 1}."
                )
            mine = Submission(participant, text, now_s)
            if current.prompt_of(participant) is not None:  # one prompt per person per round: the later one counts
                kept = tuple(mine if s.participant == participant else s for s in current.submissions)
            elif current.size >= limit:
                raise BadInput(
                    f"Round {current.number} is full ({limit} prompts, this server's most): your prompt can join "
                    "the next round."
                )
            else:
                kept = (*current.submissions, mine)
            room.current = replace(current, submissions=kept)
            room.touch(now_s)
            return room.current

    def start_round(self, code: str, member: str) -> Round:
        """The presenter starts the open round: its prompts are fixed and no more join it. The round as started."""
        with self._lock:
            now_s = self._sweep()
            room = self._room(code)
            current = room.current
            if self._member(room, member) != PRESENTER:
                raise BadInput(f"Only the presenter who opened room {room.code} starts its rounds.")
            if current.state == RUNNING:
                raise BadInput(f"Round {current.number} is already running.")
            if not current.submissions:
                raise BadInput(f"Round {current.number} has no prompts yet: ask the room to submit theirs first.")
            room.current = replace(current, state=RUNNING, started_s=now_s, note="")
            room.touch(now_s, rounds_changed=True)
            return room.current

    def finish_round(self, code: str, number: int, result: JsonRecord) -> None:
        """Round `number` is done with `result`; the next round opens. Nothing when the room or round is gone."""
        with self._lock:
            now_s = self._sweep()
            room = self._rooms.get(code)
            if room is None or room.current.number != number or room.current.state != RUNNING:
                return
            room.finished = [*room.finished, replace(room.current, state=DONE, result=result)][-ROUNDS_KEPT:]
            room.current = Round(number + 1)
            room.touch(now_s, rounds_changed=True)

    def reopen_round(self, code: str, number: int, note: str) -> None:
        """Round `number` did not finish (refused, failed, cut off): open again with its prompts, saying why."""
        with self._lock:
            room = self._rooms.get(code)
            if room is not None and room.current.number == number and room.current.state == RUNNING:
                self._reopen(room, note)

    # --- inside the lock ---------------------------------------------------------------------------------------------
    def _room(self, code: str) -> _Room:
        key = normalized_code(code)
        room = self._rooms.get(key)
        if room is not None:
            return room
        if key in self._expired:
            raise BadInput(
                f"Room {key} has closed: it was idle for over {self.idle_s / 60:.0f} minutes. Ask the presenter for "
                "a new link."
            )
        raise BadInput(f"There is no room {key} on this server: check the code, or ask the presenter for the link.")

    @staticmethod
    def _member(room: _Room, member: str) -> int:
        if member not in room.members:
            raise BadInput(f"Open room {room.code}'s link first: you have not joined it.")
        return room.members[member]

    def _reopen(self, room: _Room, note: str) -> None:
        room.current = replace(room.current, state=OPEN, started_s=None, note=note)
        room.touch(self.clock(), rounds_changed=True)

    def _sweep(self) -> float:
        """Close rooms idle past `idle_s` (never one whose round runs), reopen a round running past its limit, and
        drop prompts left in an open round past `idle_s` (their authors have gone). The clock's time now."""
        now_s = self.clock()
        for code, room in list(self._rooms.items()):
            current = room.current
            if current.state == RUNNING and now_s - (current.started_s or now_s) > RUNNING_LIMIT_S:
                self._reopen(room, f"Round {current.number} did not finish: start it again.")
            elif current.state == OPEN and any(now_s - s.at_s > self.idle_s for s in current.submissions):
                kept = tuple(s for s in current.submissions if now_s - s.at_s <= self.idle_s)
                room.current = replace(current, submissions=kept)
            if room.current.state != RUNNING and now_s - room.last_active_s > self.idle_s:
                del self._rooms[code]
                self._expired[code] = None
                while len(self._expired) > EXPIRED_KEPT:
                    self._expired.popitem(last=False)
        return now_s
