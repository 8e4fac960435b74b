"""The shared vocabulary: one frozen dataclass per store operation, one result type per outcome.

docs/architecture.md "How an operation flows": `model.apply(op)` and `impl.apply(op)` take and return these same types.
Every mutating operation carries its `now` (the clock rule, contract §2) and every other input it
needs, so a store is a deterministic function of the operations applied to it. Bad input is refused
at construction with `InvalidInput` (a ValueError) before any store sees it: "bad input gets a clear
error and changes nothing". Expected outcomes (a duplicate, a stale ack, a job that cannot be retried)
are result values, never exceptions.

Client-level operations (contract §10) live here; worker-level ones are added beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from model.queues import QueueOpts
from model.rows import UNIQUE_MODES, Job
from model.validate import (  # the validation layer; re-exported: model.ops.InvalidInput is the public name
    INT4_MAX as INT4_MAX,
)
from model.validate import (
    INT8_MAX as INT8_MAX,
)
from model.validate import (
    MAX_NAME_BYTES as MAX_NAME_BYTES,
)
from model.validate import (
    SCHEMA_NAME as SCHEMA_NAME,
)
from model.validate import (
    InvalidInput as InvalidInput,
)
from model.validate import (
    as_json as as_json,
)
from model.validate import (
    minute_slot as minute_slot,
)
from model.validate import (
    parse_expression as parse_expression,
)
from model.validate import (
    require_aware as require_aware,
)
from model.validate import (
    require_int as require_int,
)
from model.validate import (
    require_json as require_json,
)
from model.validate import (
    require_name as require_name,
)
from model.validate import (
    validate_schema_name as validate_schema_name,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_MAX_ATTEMPTS = 20


class IncompatibleSchema(RuntimeError):
    """The database's schema cannot be used by this SDK (§1); the message says what to do."""


def window_bucket(now: datetime, window_seconds: int) -> int:
    """§5.2: floor(epoch_seconds / window), computed exactly (no float rounding)."""
    return (now - EPOCH) // timedelta(seconds=window_seconds)


def window_key(key: str, now: datetime, window_seconds: int) -> str:
    """§5.2: a window-mode key MUST embed the bucket: <key>@<floor(epoch / window)>."""
    return f"{key}@{window_bucket(now, window_seconds)}"


def check_versions(version: int, major: int, *, known_major: int = 1, min_version: int = 3) -> Compatible:
    """§1: refuse a higher contract major and an older migration; accept newer ones in the major."""
    if major > known_major:
        raise IncompatibleSchema(
            f"the database speaks Belay wire-contract major {major}, this SDK knows only up to {known_major}: "
            "upgrade the belay-toolkit package (never downgrade the database)"
        )
    if version < min_version:
        raise IncompatibleSchema(
            f"the database is at migration {version}, this SDK needs at least {min_version}: run `belay migrate`"
        )
    return Compatible(version=version, contract_major=major)


# ---------------------------------------------------------------------------------------------
# job specifications

_UNSET: Any = object()  # JobSpec's input and meta when not given: a new {} each


@dataclass(frozen=True, init=False)
class JobSpec:
    """What a caller asks to insert (§5.1). Validated at construction.

    The constructor is written out (the dataclass's own, for a frozen class, sets each of the fifteen
    fields through object.__setattr__: half of building a spec, and a bulk enqueue builds thousands);
    it takes the same arguments, positional or by name, with the same defaults."""

    queue: str
    worker: str
    input: Any = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 0  # lower runs first; never negative
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    scheduled_at: datetime | None = None  # None: ready at once (ready_at = now)
    unique_key: str | None = None
    unique_mode: str | None = None  # incomplete | window | always; defaults to incomplete with a key
    unique_window: int | None = None  # seconds; required by (and only for) window mode
    cron_name: str | None = None
    cron_slot: datetime | None = None
    budget_usd_micros: int | None = None  # None = no cap
    budget_tokens: int | None = None
    parent_id: int | None = None

    def __init__(
        self,
        queue: str,
        worker: str,
        input: Any = _UNSET,
        meta: Mapping[str, Any] = _UNSET,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        scheduled_at: datetime | None = None,
        unique_key: str | None = None,
        unique_mode: str | None = None,
        unique_window: int | None = None,
        cron_name: str | None = None,
        cron_slot: datetime | None = None,
        budget_usd_micros: int | None = None,
        budget_tokens: int | None = None,
        parent_id: int | None = None,
    ) -> None:
        self.__dict__.update(
            queue=queue,
            worker=worker,
            input={} if input is _UNSET else input,
            meta={} if meta is _UNSET else meta,
            priority=priority,
            max_attempts=max_attempts,
            scheduled_at=scheduled_at,
            unique_key=unique_key,
            unique_mode=unique_mode,
            unique_window=unique_window,
            cron_name=cron_name,
            cron_slot=cron_slot,
            budget_usd_micros=budget_usd_micros,
            budget_tokens=budget_tokens,
            parent_id=parent_id,
        )
        self.__post_init__()

    def __post_init__(self) -> None:
        require_name(self.queue, "queue")
        require_name(self.worker, "worker")
        object.__setattr__(self, "input", as_json(self.input, "input"))
        if not isinstance(self.meta, Mapping):
            raise InvalidInput(f"meta must be a JSON object (a dict), got {type(self.meta).__name__}")
        object.__setattr__(self, "meta", as_json(dict(self.meta), "meta"))
        if not (type(self.priority) is int and 0 <= self.priority <= 32767):  # else: say what is wrong
            require_int(self.priority, "priority", minimum=0)
            raise InvalidInput(f"priority must be at most 32767, got {self.priority}")
        if not (type(self.max_attempts) is int and 1 <= self.max_attempts <= INT4_MAX):
            require_int(self.max_attempts, "max_attempts", minimum=1)
            raise InvalidInput(f"max_attempts must be at most {INT4_MAX} (an integer column), got {self.max_attempts}")
        if self.scheduled_at is not None:
            require_aware(self.scheduled_at, "scheduled_at")
        if self.unique_key is not None:
            require_name(self.unique_key, "unique_key")
            if self.unique_mode is None:
                object.__setattr__(self, "unique_mode", "incomplete")
        if self.unique_mode is not None:
            if self.unique_mode not in UNIQUE_MODES:
                raise InvalidInput(f"unique_mode must be one of {', '.join(UNIQUE_MODES)}; got {self.unique_mode!r}")
            if self.unique_key is None:
                raise InvalidInput(f"unique_mode {self.unique_mode!r} needs a unique_key")
        if self.unique_mode == "window":
            if self.unique_window is None:
                raise InvalidInput("unique_mode 'window' needs unique_window (the window length in seconds)")
            require_int(self.unique_window, "unique_window", minimum=1)
        elif self.unique_window is not None:
            raise InvalidInput("unique_window is only meaningful with unique_mode 'window'")
        if (self.cron_name is None) != (self.cron_slot is None):
            raise InvalidInput("cron_name and cron_slot go together: give both or neither")
        if self.cron_name is not None and self.cron_slot is not None:  # both or neither (checked above)
            require_name(self.cron_name, "cron_name")
            require_aware(self.cron_slot, "cron_slot")
            if self.cron_slot != minute_slot(self.cron_slot):
                raise InvalidInput(f"cron_slot must be a whole UTC minute, got {self.cron_slot.isoformat()}")
        if self.budget_usd_micros is not None or self.budget_tokens is not None or self.parent_id is not None:
            require_int(self.budget_usd_micros, "budget_usd_micros", minimum=0, optional=True)
            require_int(self.budget_tokens, "budget_tokens", minimum=0, optional=True)
            require_int(self.parent_id, "parent_id", minimum=1, optional=True)


@dataclass(frozen=True)
class WorkflowMember:
    """One named member of a workflow; deps name other members (of this call or already stored)."""

    name: str
    job: JobSpec
    deps: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()  # dep outcomes this member tolerates: subset of failed, cancelled

    def __post_init__(self) -> None:
        require_name(self.name, "workflow member name")
        object.__setattr__(self, "deps", tuple(self.deps))
        object.__setattr__(self, "ignore", tuple(self.ignore))
        for dep in self.deps:
            require_name(dep, f"dep of member {self.name!r}")
        if len(set(self.deps)) != len(self.deps):
            raise InvalidInput(f"member {self.name!r} lists a dep twice: {list(self.deps)}")
        if self.name in self.deps:
            raise InvalidInput(f"member {self.name!r} depends on itself")
        bad = [flag for flag in self.ignore if flag not in ("failed", "cancelled")]
        if bad:
            raise InvalidInput(f"member {self.name!r}: ignore flags must be 'failed' or 'cancelled', got {bad}")
        if self.job.unique_key is not None or self.job.cron_name is not None:
            raise InvalidInput(
                f"member {self.name!r}: workflow members cannot carry a unique key or cron slot "
                "(a skipped member would leave its dependents waiting forever)"
            )
        if self.job.parent_id is not None:
            raise InvalidInput(f"member {self.name!r}: workflow members cannot set parent_id")


# ---------------------------------------------------------------------------------------------
# operations: client level (§10)


@dataclass(frozen=True)
class CheckCompat:
    """§1: refuse a higher contract major and a migration older than the minimum required."""

    known_major: int = 1
    min_version: int = 3


@dataclass(frozen=True)
class Enqueue:
    """§5.1: insert a batch with one multi-row INSERT ... ON CONFLICT DO NOTHING."""

    now: datetime
    jobs: tuple[JobSpec, ...]

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        object.__setattr__(self, "jobs", tuple(self.jobs))
        if not self.jobs:
            raise InvalidInput("enqueue needs at least one job")
        for spec in self.jobs:
            if not isinstance(spec, JobSpec):
                raise InvalidInput(f"enqueue takes JobSpec values, got {type(spec).__name__}")


@dataclass(frozen=True)
class EnqueueWorkflow:
    """§8.3: insert workflow members (dep-bearing ones held), then settle under the workflow lock."""

    now: datetime
    workflow_id: str
    members: tuple[WorkflowMember, ...]

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_name(self.workflow_id, "workflow_id")
        object.__setattr__(self, "members", tuple(self.members))
        if not self.members:
            raise InvalidInput("a workflow needs at least one member")
        names = [m.name for m in self.members]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidInput(f"workflow {self.workflow_id!r} names a member twice: {dupes}")


@dataclass(frozen=True)
class DeliverSignal:
    """§8.1: upsert the signal under the scope lock and wake its awaiters."""

    now: datetime
    scope: str
    name: str
    payload: Any = None

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_name(self.scope, "scope")
        require_name(self.name, "signal name")
        object.__setattr__(self, "payload", as_json(self.payload, "signal payload"))


@dataclass(frozen=True)
class Steer:
    """Steering: deliver `$steer` to scope job:<id> (read by the job at its next step)."""

    now: datetime
    job_id: int
    payload: Any

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.job_id, "job_id", minimum=1)
        object.__setattr__(self, "payload", as_json(self.payload, "steer payload"))


@dataclass(frozen=True)
class ClearSignal:
    """Delete one signal row (signals persist until cleared or TTL-pruned)."""

    scope: str
    name: str

    def __post_init__(self) -> None:
        require_name(self.scope, "scope")
        require_name(self.name, "signal name")


@dataclass(frozen=True)
class _JobCommand:
    """An operator command on one job at `now`."""

    now: datetime
    job_id: int

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_int(self.job_id, "job_id", minimum=1)


@dataclass(frozen=True)
class Cancel(_JobCommand):
    """§8.6: parked/held → cancelled (+ settlement, parent notify); running → cancel_requested."""


@dataclass(frozen=True)
class Retry(_JobCommand):
    """§8.6: failed|cancelled → ready (or held, then settled, for dep-bearing workflow members)."""


@dataclass(frozen=True)
class PutQueue:
    """Runtime queue options (belay_queues), validated by `QueueOpts`."""

    now: datetime
    name: str
    opts: Mapping[str, Any]

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_name(self.name, "queue")
        QueueOpts.parse(self.opts)


@dataclass(frozen=True)
class PutCron:
    """A dynamic cron row (belay_crons) that merges over static config by name (§8.5)."""

    now: datetime
    name: str
    expression: str
    worker: str
    input: Any = field(default_factory=dict)
    opts: Mapping[str, Any] = field(default_factory=dict)
    paused: bool = False

    def __post_init__(self) -> None:
        require_aware(self.now, "now")
        require_name(self.name, "cron name")
        require_name(self.worker, "worker")
        parse_expression(self.expression)
        object.__setattr__(self, "input", as_json(self.input, "cron input"))
        if not isinstance(self.opts, Mapping):
            raise InvalidInput("cron opts must be a JSON object")
        object.__setattr__(self, "opts", as_json(dict(self.opts), "cron opts"))
        unknown = sorted(set(self.opts) - {"queue", "priority", "max_attempts"})
        if unknown:
            raise InvalidInput(f"unknown cron options {unknown}; known: queue, priority, max_attempts")
        if not isinstance(self.paused, bool):
            raise InvalidInput("paused must be a bool")


# reads: no `now` (they observe committed state only)


@dataclass(frozen=True)
class ReadJob:
    job_id: int


@dataclass(frozen=True)
class ReadSteps:
    job_id: int


@dataclass(frozen=True)
class ReadEvents:
    job_id: int


@dataclass(frozen=True)
class ReadWorkflow:
    workflow_id: str


@dataclass(frozen=True)
class ReadSignals:
    scopes: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class Compatible:
    version: int
    contract_major: int


@dataclass(frozen=True)
class Inserted:
    id: int


@dataclass(frozen=True)
class Duplicate:
    """The row was skipped by ON CONFLICT DO NOTHING; `id` is the holder (§5.2)."""

    id: int | None
    reason: str  # "unique" | "cron"


@dataclass(frozen=True)
class Enqueued:
    outcomes: tuple[Inserted | Duplicate, ...]  # one per JobSpec, in order

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(o.id for o in self.outcomes if isinstance(o, Inserted))


@dataclass(frozen=True)
class WorkflowEnqueued:
    workflow_id: str
    ids: tuple[tuple[str, int], ...]  # (member name, job id) in member order
    released: tuple[int, ...]
    doomed: tuple[int, ...]


@dataclass(frozen=True)
class Signalled:
    woken: tuple[int, ...]  # job ids moved awaiting → ready, ascending


@dataclass(frozen=True)
class Cleared:
    existed: bool


@dataclass(frozen=True)
class NotFound:
    job_id: int


@dataclass(frozen=True)
class Cancelled:
    job_id: int


@dataclass(frozen=True)
class CancelRequested:
    job_id: int


@dataclass(frozen=True)
class NotCancellable:
    job_id: int
    state: str  # already terminal


@dataclass(frozen=True)
class Retried:
    job_id: int
    state: str  # ready, or held/cancelled/ready after re-settlement


@dataclass(frozen=True)
class NotRetryable:
    job_id: int
    state: str  # only failed and cancelled jobs can be retried


@dataclass(frozen=True)
class RetryBlocked:
    """Retrying would make a second live holder of an incomplete-mode unique key (§5.2)."""

    job_id: int
    holder_id: int | None


@dataclass(frozen=True)
class DepsGone:
    """Retrying would re-hold a member whose deps retention already deleted: it could never settle."""

    job_id: int
    missing: tuple[str, ...]


@dataclass(frozen=True)
class QueuePut:
    name: str


@dataclass(frozen=True)
class CronPut:
    name: str


CancelResult = Cancelled | CancelRequested | NotCancellable | NotFound
RetryResult = Retried | NotRetryable | RetryBlocked | DepsGone | NotFound
ReadJobResult = Job | NotFound
