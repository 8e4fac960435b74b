"""The model's state: every table of contract §3 as frozen data, plus the bigserial counter.

`State` is immutable: a transition (model/store.py) works on a `Tables` copy and freezes the result.
Keys mirror the tables' primary keys, so a snapshot loaded from PostgreSQL (`from_rows`) is the same
kind of value as the model's, and the §11 invariant predicates run unchanged on either.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from model.rows import CronRow, Event, Job, QueueRow, RateWindow, Signal, Step


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class State:
    jobs: Mapping[int, Job] = field(default_factory=_empty)  # belay_jobs by id (§3)
    steps: Mapping[tuple[int, str], Step] = field(default_factory=_empty)  # belay_steps by (job_id, name) (§8.2)
    events: Mapping[tuple[int, int], Event] = field(default_factory=_empty)  # belay_events by (job_id, seq)
    signals: Mapping[tuple[str, str], Signal] = field(default_factory=_empty)  # belay_signals by (scope, name) (§8.1)
    rate: Mapping[tuple[str, datetime], RateWindow] = field(
        default_factory=_empty
    )  # belay_rate by (bucket, window_start) (§6)
    queues: Mapping[str, QueueRow] = field(default_factory=_empty)  # belay_queues by name
    crons: Mapping[str, CronRow] = field(default_factory=_empty)  # belay_crons by name (§8.5)
    version: int = 3  # belay_meta.version (§1)
    contract_major: int = 1  # belay_meta.contract_major (§1)
    next_id: int = 1  # the next value of belay_jobs_id_seq (ids consumed by skipped rows too)

    def job(self, job_id: int) -> Job | None:
        return self.jobs.get(job_id)

    def steps_of(self, job_id: int) -> list[Step]:
        return sorted((s for (j, _), s in self.steps.items() if j == job_id), key=lambda s: s.seq)

    def events_of(self, job_id: int) -> list[Event]:
        return sorted((e for (j, _), e in self.events.items() if j == job_id), key=lambda e: e.seq)

    def children_of(self, parent_id: int) -> list[Job]:
        return sorted((j for j in self.jobs.values() if j.parent_id == parent_id), key=lambda j: j.id)

    def workflow(self, workflow_id: str) -> list[Job]:
        return sorted((j for j in self.jobs.values() if j.workflow_id == workflow_id), key=lambda j: j.id)


@dataclass
class Tables:
    """A mutable working copy of one State, used inside a single transition."""

    jobs: dict[int, Job]
    steps: dict[tuple[int, str], Step]
    events: dict[tuple[int, int], Event]
    signals: dict[tuple[str, str], Signal]
    rate: dict[tuple[str, datetime], RateWindow]
    queues: dict[str, QueueRow]
    crons: dict[str, CronRow]
    version: int
    contract_major: int
    next_id: int
    # The ids the sequence handed an insert, when they are known and not consecutive (the trace validation
    # of a real history: a concurrent insert can take ids between one statement's rows); None: next_id on.
    id_supply: Iterator[int] | None = None

    @classmethod
    def of(cls, state: State) -> Tables:
        return cls(
            dict(state.jobs),
            dict(state.steps),
            dict(state.events),
            dict(state.signals),
            dict(state.rate),
            dict(state.queues),
            dict(state.crons),
            state.version,
            state.contract_major,
            state.next_id,
        )

    def freeze(self) -> State:
        return State(
            MappingProxyType(self.jobs),
            MappingProxyType(self.steps),
            MappingProxyType(self.events),
            MappingProxyType(self.signals),
            MappingProxyType(self.rate),
            MappingProxyType(self.queues),
            MappingProxyType(self.crons),
            self.version,
            self.contract_major,
            self.next_id,
        )

    def update(self, job_id: int, **changes: Any) -> Job:
        old = self.jobs[job_id]
        if type(old) is Job and changes.keys() <= _JOB_FIELDS:
            # dataclasses.replace(old, **changes) without its per-field __init__ call: Job has no
            # __post_init__ and no init=False field, so the new row is the old one's fields with `changes`
            # (the same value; tests/test_model.py compares). The trace validation's hottest path.
            job = object.__new__(Job)
            fields_ = job.__dict__
            fields_.update(old.__dict__)
            fields_.update(changes)
        else:
            job = replace(old, **changes)
        self.jobs[job_id] = job
        return job


_JOB_FIELDS = frozenset(Job.__dataclass_fields__)


def from_rows(
    jobs: Iterable[Job] = (),
    steps: Iterable[Step] = (),
    events: Iterable[Event] = (),
    signals: Iterable[Signal] = (),
    rate: Iterable[RateWindow] = (),
    queues: Iterable[QueueRow] = (),
    crons: Iterable[CronRow] = (),
    *,
    version: int = 3,
    contract_major: int = 1,
    next_id: int | None = None,
) -> State:
    """A State from rows (e.g. a snapshot read from a real database)."""
    by_id = {j.id: j for j in jobs}
    return State(
        MappingProxyType(by_id),
        MappingProxyType({(s.job_id, s.name): s for s in steps}),
        MappingProxyType({(e.job_id, e.seq): e for e in events}),
        MappingProxyType({(s.scope, s.name): s for s in signals}),
        MappingProxyType({(r.bucket, r.window_start): r for r in rate}),
        MappingProxyType({q.name: q for q in queues}),
        MappingProxyType({c.name: c for c in crons}),
        version,
        contract_major,
        next_id if next_id is not None else max(by_id, default=0) + 1,
    )


def in_key_order(table: Mapping[Any, Any]) -> Iterable[Any]:
    """A table's values in key order (jobs: by id). A table that iterates in key order already — a long
    soak's disk-backed snapshot table says so with `ordered = True` — is streamed; a dict is sorted."""
    if getattr(table, "ordered", False):
        return table.values()
    return [table[k] for k in sorted(table)]


def items_in_key_order(table: Mapping[Any, Any]) -> Iterable[tuple[Any, Any]]:
    """`sorted(table.items())`. A table that iterates in the order of its keys' first element (`ordered`:
    a disk-backed snapshot table, keys (job id, …) or job ids) is streamed one first element at a time,
    each group sorted — never a list of every row (issue 54: the check's steps, held at once)."""
    if getattr(table, "ordered", False):
        return (kv for _, group in itertools.groupby(table.items(), key=_first) for kv in sorted(group))
    return sorted(table.items())


def _first(item: tuple[Any, Any]) -> Any:
    key = item[0]
    return key[0] if isinstance(key, tuple) else key


__all__ = ["State", "Tables", "from_rows", "in_key_order", "items_in_key_order"]
