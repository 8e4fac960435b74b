"""Worker-level operations (contract §§5–9) and their results: the rest of the shared vocabulary.

Like model/ops.py: one frozen dataclass per operation, carrying `now` and every input a decision
needs — the node id, the lease ttl, the retry time an SDK computed, the queue options in force — so
the model and the Postgres store are deterministic functions of the operations applied to them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from model.cron import CronDef
from model.envelope import EnvelopeError, encode, encode_step_value
from model.ops import (
    InvalidInput,
    JobSpec,
    as_json,
    require_aware,
    require_int,
    require_json,
    require_name,
)
from model.queues import QueueOpts
from model.rows import Job

MAX_DETAIL_BYTES = 8192  # failure detail is the one bound that truncates (UTF-8 safe), never rejects


def clamp_detail(detail: str | None, max_bytes: int = MAX_DETAIL_BYTES) -> str | None:
    """Clamp failure detail to max_bytes of UTF-8 without splitting a code point."""
    if detail is None:
        return None
    raw = detail.encode("utf-8", errors="replace")
    if len(raw) <= max_bytes:
        return detail
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def error_entry(attempt: int, at: datetime, error: str, detail: str | None) -> dict[str, Any]:
    """One element of belay_jobs.errors: {attempt, at, error, detail}."""
    return {"attempt": attempt, "at": at.isoformat(), "error": error, "detail": clamp_detail(detail)}


def _fenced(now: datetime, job_id: int, attempt: int) -> None:
    if type(job_id) is int and type(attempt) is int and 0 < job_id < _BIG and 0 < attempt < _BIG:
        if type(now) is datetime and now.tzinfo is UTC:  # what the runtime passes: nothing more to check
            return
    require_aware(now, "now")
    require_int(job_id, "job_id", minimum=1)
    require_int(attempt, "attempt", minimum=1)


_BIG = 2**63


@dataclass(frozen=True)
class Backoff:
    """A deterministic retry schedule: delay(attempt) = min(base * factor^(attempt-1), max)."""

    base_s: int = 1
    factor: int = 2
    max_s: int = 3600

    def __post_init__(self) -> None:
        require_int(self.base_s, "base_s", minimum=0)
        require_int(self.factor, "factor", minimum=1)
        require_int(self.max_s, "max_s", minimum=0)

    def retry_at(self, now: datetime, attempt: int) -> datetime:
        exponent = max(attempt - 1, 0)
        delay = self.max_s if exponent > 64 else min(self.base_s * self.factor**exponent, self.max_s)
        return now + timedelta(seconds=delay)


# --- §6 claims and leases -----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """§6: admit, select candidates in claim order, lease them to `node` until now + lease_ttl."""

    now: datetime
    queue: str
    node: str
    demand: int  # how many this node wants (its free local slots)
    lease_ttl: timedelta = timedelta(seconds=30)
    opts: QueueOpts = QueueOpts()  # the options in force (static config merged with belay_queues)

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_name(self.queue, "queue")
        require_name(self.node, "node")
        require_int(self.demand, "demand", minimum=0)
        if not isinstance(self.lease_ttl, timedelta) or self.lease_ttl <= timedelta(0):
            raise InvalidInput(f"lease_ttl must be a positive timedelta, got {self.lease_ttl!r}")
        if not isinstance(self.opts, QueueOpts):
            raise InvalidInput("opts must be a QueueOpts (use QueueOpts.parse on a JSON object)")


@dataclass(frozen=True)
class Renew:
    """§6: extend this node's leases; ids not returned are lost."""

    now: datetime
    node: str
    job_ids: tuple[int, ...]
    lease_until: datetime

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_aware(self.lease_until, "lease_until")
        require_name(self.node, "node")
        object.__setattr__(self, "job_ids", tuple(self.job_ids))


@dataclass(frozen=True)
class Reclaim:
    """§6: expired leases → retry (attempt < max) or failed with lease_expired, then settlement."""

    now: datetime
    backoff: Backoff = Backoff()
    limit: int = 500

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.limit, "limit", minimum=1)


# --- §7 acks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Succeed:
    value: Any = None  # encoded with the §2 envelope into belay_jobs.result
    # The value's §2 encoding, made once by the validation that needs it anyway (an ack writes it; a
    # value mutated after the Succeed was made is written as it was then).
    encoded: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            data = _NULL if self.value is None else encode(self.value)  # None: a drain's common result
        except EnvelopeError as exc:
            raise InvalidInput(f"result value: {exc}") from None
        object.__setattr__(self, "encoded", data)


_NULL = encode(None)


@dataclass(frozen=True)
class Fail:
    """An error. retry_at None means no retry (e.g. budget_exceeded): the job fails now."""

    error: str
    detail: str | None = None
    retry_at: datetime | None = None

    def __post_init__(self) -> None:
        require_name(self.error, "error")
        if self.detail is not None:
            if not isinstance(self.detail, str):
                raise InvalidInput("detail must be a string")
            require_json(self.detail, "detail")
        require_aware(self.retry_at, "retry_at")


@dataclass(frozen=True)
class CancelSelf:
    """Cooperative cancel honoured at a step boundary."""


@dataclass(frozen=True)
class Snooze:
    """Ready again at `until`; a snooze spends no attempt (max_attempts + 1)."""

    until: datetime

    def __post_init__(self) -> None:
        require_aware(self.until, "until")


Outcome = Succeed | Fail | CancelSelf | Snooze


@dataclass(frozen=True)
class Ack:
    """§7: one fenced ack: WHERE id AND state='running' AND attempt = the claimed attempt."""

    now: datetime
    job_id: int
    attempt: int
    outcome: Outcome

    def __post_init__(self) -> None:
        _fenced(self.now, self.job_id, self.attempt)
        if not isinstance(self.outcome, (Succeed, Fail, CancelSelf, Snooze)):
            raise InvalidInput(f"unknown ack outcome {self.outcome!r}")


@dataclass(frozen=True)
class AckMany:
    """Several acks in one transaction (chunk workers, batched acking): each row fenced on its own
    attempt exactly as a single Ack; the §7 after-terminal steps then run once for all of them."""

    now: datetime
    acks: tuple[Ack, ...]

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        object.__setattr__(self, "acks", tuple(self.acks))
        if not self.acks or not all(isinstance(a, Ack) for a in self.acks):
            raise InvalidInput("AckMany needs at least one Ack")
        ids = [a.job_id for a in self.acks]
        if len(set(ids)) != len(ids):
            raise InvalidInput(f"AckMany acks a job twice: {sorted(i for i in set(ids) if ids.count(i) > 1)}")


@dataclass(frozen=True)
class AckClaim:
    """Acks and the next claim of their queue in one transaction (the runtime's group commit, issue 33):
    exactly `acks` (an AckMany: each row fenced on its own attempt, the after-terminal steps once) and
    then `claim`, committed together — the claim sees the rows the acks wrote. On a queue whose claims
    take the admission lock (global limit, rate, partitions) the admission counts are taken after the
    acks, so the slots the acks freed count as free (§6: "All claim work happens in one transaction";
    the wire contract fixes no boundary between an ack's transaction and a claim's, and one commit for
    both is what the runtime's group commit does on every queue)."""

    acks: AckMany
    claim: Claim

    def __post_init__(self) -> None:
        if not isinstance(self.acks, AckMany) or not isinstance(self.claim, Claim):
            raise InvalidInput("AckClaim needs an AckMany and a Claim")


@dataclass(frozen=True)
class ParkAwait:
    """§7 ack outcome `await`, fenced, with the normative park-and-wake rule: under the scope lock,
    a signal row already present parks the job as ready instead."""

    now: datetime
    job_id: int
    attempt: int
    scope: str
    name: str
    deadline: datetime | None = None  # ready_at while awaiting: when the job resumes without the signal

    def __post_init__(self) -> None:
        _fenced(self.now, self.job_id, self.attempt)
        require_aware(self.deadline, "deadline")
        require_name(self.scope, "scope")
        require_name(self.name, "signal name")


@dataclass(frozen=True)
class Sleep:
    """Durable sleep: journal `$sleep:<name>` = until (memoized), then ready at that time."""

    now: datetime
    job_id: int
    attempt: int
    name: str
    until: datetime
    # The text journaled as the wake time, when the SDK spells it its own way: decisions.md asks for "an
    # ISO-8601 string", not Python's isoformat() (JavaScript writes `…T21:03:04.490Z`). None: isoformat().
    # The job is ready at the instant the journaled text denotes (`wake_time`), whatever its spelling.
    spelled: str | None = None

    def __post_init__(self) -> None:
        _fenced(self.now, self.job_id, self.attempt)
        require_name(self.name, "sleep name")
        require_aware(self.until, "until")
        if self.spelled is not None:
            wake_time(self.spelled)  # raises InvalidInput when the text is no ISO-8601 instant


_ISO_FRACTION = re.compile(r"([T ]\d{2}:?\d{2}:?\d{2})[.,](\d+)")


def wake_time(text: Any) -> datetime:
    """The instant a `$sleep:<name>` value denotes (decisions.md "Reserved names": "the wake time, an
    ISO-8601 string"), in any ISO-8601 spelling: `Z` or an offset, any fractional precision (rounded
    to PostgreSQL's microseconds, as timestamptz input rounds), basic or extended format. A time without
    a zone is read as UTC (contract §2: "Timestamps are timestamptz in UTC"). Not a string, or not an
    ISO-8601 date-time: InvalidInput — the documents fix the value's type, only its spelling is free."""
    if not isinstance(text, str):
        raise InvalidInput(f"a $sleep value must be an ISO-8601 string, got {type(text).__name__}")
    micro = 0
    m = _ISO_FRACTION.search(text)
    body = text
    if m is not None:
        digits = m.group(2)
        scaled = Decimal("0." + digits).quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN)
        micro = int(scaled * 1_000_000)
        body = text[: m.start(2) - 1] + text[m.end(2) :]
    try:
        at = datetime.fromisoformat(body)
    except ValueError as exc:
        raise InvalidInput(f"$sleep value {text!r} is not an ISO-8601 date-time: {exc}") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC) + timedelta(microseconds=micro)


# --- §8.2 steps, events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadStep:
    job_id: int
    name: str


@dataclass(frozen=True)
class Preflight:
    """§8.2: before executing a missed step, re-read the job: is durable spend already over budget?
    (The same read reports cancel_requested, which workers honour at step boundaries, §8.6.)"""

    job_id: int


@dataclass(frozen=True)
class RecordStep:
    """§8.2: journal a step value (ON CONFLICT DO NOTHING) and add its costs, in one transaction."""

    now: datetime
    job_id: int
    name: str
    value: Any
    usd_micros: int = 0
    tokens: int = 0

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.job_id, "job_id", minimum=1)
        require_name(self.name, "step name")
        if self.name.startswith(("$sleep:", "$spawn:")):
            raise InvalidInput(f"step name {self.name!r} uses a reserved prefix ($sleep:, $spawn:)")
        require_int(self.usd_micros, "usd_micros", minimum=0)
        require_int(self.tokens, "tokens", minimum=0)
        try:
            encode_step_value(self.value)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None


@dataclass(frozen=True)
class EmitEvent:
    now: datetime
    job_id: int
    payload: Any
    # The seq the SDK gave the event, when it numbers its own way: the contract fixes only "PK (job_id,
    # seq); append-only stream" (§3), not the numbering (steps' seq is fixed by §8.2's SQL, events' is
    # not) — any seq above the job's earlier ones. None: the reference's MAX(seq) + 1.
    seq: int | None = None
    # The SDK retries this emit through transient faults (sdk-guide §7): an event of the job with this
    # payload inserted at this `now` is this emit's own, appended by a try whose answer was lost — answered,
    # not appended again. (Two emits of one job at one microsecond with one payload are one event.)
    once: bool = field(default=False, metadata={"wire": False})  # not in the SDK adapter protocol

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.job_id, "job_id", minimum=1)
        object.__setattr__(self, "payload", as_json(self.payload, "event payload"))
        require_int(self.seq, "seq", minimum=-(2**31), optional=True)


# --- §8.4 children --------------------------------------------------------------------------------


def child_id_list(value: Any) -> list[int] | None:
    """The ids a decoded `$spawn:<name>` value lists (decisions.md: "the child id list"), else None.
    An id is a JSON integer or its canonical decimal string: ids are bigints, and JSON writers that
    cannot hold 64-bit integers exactly (JavaScript's, whose PostgreSQL driver returns int8 as a string)
    spell them as strings — a spelling, judged as the id it denotes (§2: "never interpret a foreign SDK's
    reserved values")."""
    if not isinstance(value, (list, tuple)):
        return None
    ids = []
    for i in value:
        if isinstance(i, int) and not isinstance(i, bool):
            ids.append(i)
        elif isinstance(i, str) and i.isascii() and i.isdigit() and str(int(i)) == i:
            ids.append(int(i))
        else:
            return None
    return ids


@dataclass(frozen=True)
class Spawn:
    """§8.4: doubly idempotent spawn — a memoized `$spawn:<name>` step and per-child unique keys
    `$spawn:<parent>:<name>:<index>` (mode always); the id list is rebuilt from the keys."""

    now: datetime
    job_id: int
    name: str
    children: tuple[JobSpec, ...]
    # the list as the SDK spells it (ids as decimal strings, `child_id_list`); journaled only when it
    # denotes exactly the ids the keys hold, else the model journals those ids (and differs). None: ints.
    spelled: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.job_id, "job_id", minimum=1)
        require_name(self.name, "spawn name")
        object.__setattr__(self, "children", tuple(self.children))
        for child in self.children:
            if child.unique_key is not None or child.cron_name is not None or child.parent_id is not None:
                raise InvalidInput("spawned children get their unique key and parent from the spawn; leave them unset")


@dataclass(frozen=True)
class SpawnChildren:
    """§8.4 split in two: insert some of a spawn's children with their keys `$spawn:<parent>:<name>:<index>`
    (mode always), without journaling `$spawn:<name>` — a later transaction (`Spawn`, every child then
    held) journals the list "rebuilt by fetching those keys — never trusted from a possibly-partial
    insert" (§8.4), and I8 holds "regardless of crashes between insert and journal" (§11.8).
    `children` are (index, spec) in the order the SDK inserted them (one statement or several: the ids
    the sequence hands out follow that order). A spawn already journaled is memoized: nothing is inserted."""

    now: datetime
    job_id: int
    name: str
    children: tuple[tuple[int, JobSpec], ...]

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.job_id, "job_id", minimum=1)
        require_name(self.name, "spawn name")
        object.__setattr__(self, "children", tuple((i, c) for i, c in self.children))
        for index, child in self.children:
            require_int(index, "child index", minimum=0)
            if child.unique_key is not None or child.cron_name is not None or child.parent_id is not None:
                raise InvalidInput("spawned children get their unique key and parent from the spawn; leave them unset")
        if len({i for i, _ in self.children}) != len(self.children):
            raise InvalidInput("a child index appears twice")


@dataclass(frozen=True)
class AwaitChildren:
    """§8.4: re-verify; if any child is live, clear the stale `$children` signal, re-verify, park."""

    now: datetime
    job_id: int
    attempt: int
    deadline: datetime | None = None

    def __post_init__(self) -> None:
        _fenced(self.now, self.job_id, self.attempt)
        require_aware(self.deadline, "deadline")


@dataclass(frozen=True)
class Reconcile:
    """§8.4 backstop (R2): awaiting on `$children` with every child terminal → ready."""

    now: datetime


# --- §8.5 cron, §8.7 retention --------------------------------------------------------------------


@dataclass(frozen=True)
class FireCrons:
    """§8.5: for each due UTC minute slot in (since, now], insert with (cron_name, cron_slot)."""

    now: datetime
    since: datetime
    static: tuple[CronDef, ...] = ()
    queues: frozenset[str] | None = None  # fire only the crons of these queues (None: every cron)
    # fire only these (cron name, slot) pairs of the plan (None: all): §8.5 says "for each due minute
    # slot … insert", so an SDK may insert each due slot in its own transaction (a subset, any order)
    slots: frozenset[tuple[str, datetime]] | None = None

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_aware(self.since, "since")
        object.__setattr__(self, "static", tuple(self.static))
        if self.queues is not None:
            object.__setattr__(self, "queues", frozenset(self.queues))
        if self.slots is not None:
            object.__setattr__(self, "slots", frozenset(self.slots))


@dataclass(frozen=True)
class Prune:
    """§8.7: delete terminal jobs past per-state retention (with steps and events), signals past
    TTL and rate windows older than a day. None keeps a state forever."""

    now: datetime
    retention: Mapping[str, int | None]  # seconds per terminal state
    signal_ttl: int | None = 7 * 86400
    limit: int = 500

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        unknown = sorted(set(self.retention) - {"succeeded", "failed", "cancelled"})
        if unknown:
            raise InvalidInput(f"retention names states {unknown}; only succeeded, failed, cancelled are prunable")
        for state, seconds in self.retention.items():
            require_int(seconds, f"retention[{state}]", minimum=0, optional=True)
        require_int(self.signal_ttl, "signal_ttl", minimum=0, optional=True)
        require_int(self.limit, "limit", minimum=1)


# --- results ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    jobs: tuple[Job, ...]  # the leased rows after the claim update, in claim order


@dataclass(frozen=True)
class Renewed:
    kept: tuple[int, ...]
    lost: tuple[int, ...]


@dataclass(frozen=True)
class Reclaimed:
    retried: tuple[int, ...]
    failed: tuple[int, ...]


@dataclass(frozen=True)
class Acked:
    job_id: int
    state: str


@dataclass(frozen=True)
class AckedMany:
    results: tuple[Acked | Stale, ...]  # one per ack, in order


@dataclass(frozen=True)
class AckedClaimed:
    acked: AckedMany
    claimed: Claimed


@dataclass(frozen=True)
class Parked:
    job_id: int
    state: str  # "awaiting", or "ready" when the signal was already there


@dataclass(frozen=True)
class Slept:
    job_id: int
    until: datetime  # the journaled wake time (the first sleep's, on a re-run)


@dataclass(frozen=True)
class Stale:
    """A fenced write matched no row: the attempt was reclaimed; the SDK discards it (§7)."""

    job_id: int
    attempt: int


@dataclass(frozen=True)
class StepHit:
    value: bytes  # §2 envelope


@dataclass(frozen=True)
class StepMiss:
    pass


@dataclass(frozen=True)
class BudgetOk:
    cancel_requested: bool = False  # the step boundary is also where a cancel request is honoured


@dataclass(frozen=True)
class OverBudget:
    """Durable spend already exceeds a budget column: fail with budget_exceeded, run nothing."""

    spent_usd_micros: int
    spent_tokens: int
    cancel_requested: bool = False


@dataclass(frozen=True)
class Recorded:
    inserted: bool  # False: another execution journaled this name first; `value` is theirs
    value: bytes
    spent_usd_micros: int
    spent_tokens: int
    over_budget: bool  # a returned spent exceeds its budget column: fail with budget_exceeded


@dataclass(frozen=True)
class Emitted:
    seq: int


@dataclass(frozen=True)
class Spawned:
    child_ids: tuple[int, ...]
    memoized: bool  # True when the `$spawn:<name>` step already existed


@dataclass(frozen=True)
class ChildrenDone:
    child_ids: tuple[int, ...]


@dataclass(frozen=True)
class Reconciled:
    woken: tuple[int, ...]


@dataclass(frozen=True)
class Fired:
    cron_name: str
    slot: datetime
    job_id: int
    inserted: bool


@dataclass(frozen=True)
class CronsFired:
    fired: tuple[Fired, ...]


@dataclass(frozen=True)
class Pruned:
    jobs: tuple[int, ...]
    signals: int
    rate_windows: int


@dataclass(frozen=True)
class JobGone:
    """A job-scoped write found no job at all (pruned, or never existed)."""

    job_id: int
