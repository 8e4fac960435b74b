"""The §11 invariants of the Belay wire contract as named, pure predicates.

    I1  "No inserted job is ever lost; all reach a terminal state given workers."
    I2  "A fenced ack from a stale attempt never mutates the row."
    I3  "At-least-once execution; step values, once journaled, are immutable and exactly one row per
        (job, name)."
    I4  "Budgets fail the job on the first step whose recorded spend crosses a cap."
    I5  "Workflow releases occur only with satisfied deps; dooms only with a doomed dep; settlement is a
        fixpoint (re-settling is a no-op)."
    I6  "Cron slots insert exactly once cluster-wide."
    I7  "Unique keys admit at most one live holder (incomplete) / one ever (window per bucket, always)."
    I8  "A parent has exactly the children its spawn declared, regardless of crashes between insert and
        journal."
    I9  "Awaiting jobs with a delivered signal eventually run (lock-serialized wake + persistent signals +
        reconciler backstop)."

Each predicate returns `list[Violation]`; an empty list means the invariant holds on what it was shown.
Every violation names the invariant, the job (when there is one) and the rule broken, so a report line
reads on its own: `I2 job 17: a stale ack (attempt 1) changed the row: state running→succeeded`.

The same functions serve three callers, so their inputs are plain values:
  * the model-vs-Postgres stateful tests (a `State` from `ModelStore`, or `from_rows` of a PG snapshot,
    plus the histories built by `replay` / `stale_acks_from_history` / `ledger_from_history`);
  * the soak checker, which reads one snapshot from the database (take it in one REPEATABLE READ
    transaction: I9 compares belay_jobs with belay_signals) and a ledger the driver wrote (`Ledger`);
  * reports (`str(violation)`, `violation.contract`, `by_invariant`).

State-only invariants (I4–I9, and I3's per-snapshot rules) need nothing but a `State`; I1 needs the ids
the driver inserted, I2 needs observations made around stale fenced writes, I3's immutability needs two
or more snapshots in time order. `check_all` runs everything a single snapshot (plus an optional ledger)
can decide.

What a row snapshot cannot show is said in each predicate's docstring, with what is checked instead —
an invariant that silently over-approximates would make soak verdicts meaningless.

Pure: no I/O, no clock (no predicate needs `now`: every rule is about rows, not deadlines), no
randomness. Imports only model/ and the standard library (`replay` imports model.store lazily).
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, NamedTuple

from model import ops
from model import worker_ops as w
from model.envelope import EnvelopeError, decode
from model.rows import INCOMPLETE, TERMINAL, UNIQUE_MODES, Job, Step
from model.settle import Member, settle
from model.state import State, in_key_order, items_in_key_order

CONTRACT: dict[str, str] = {
    "I1": "No inserted job is ever lost; all reach a terminal state given workers.",
    "I2": "A fenced ack from a stale attempt never mutates the row.",
    "I3": "At-least-once execution; step values, once journaled, are immutable and exactly one row per (job, name).",
    "I4": "Budgets fail the job on the first step whose recorded spend crosses a cap.",
    "I5": "Workflow releases occur only with satisfied deps; dooms only with a doomed dep; settlement is a "
    "fixpoint (re-settling is a no-op).",
    "I6": "Cron slots insert exactly once cluster-wide.",
    "I7": "Unique keys admit at most one live holder (incomplete) / one ever (window per bucket, always).",
    "I8": "A parent has exactly the children its spawn declared, regardless of crashes between insert and journal.",
    "I9": "Awaiting jobs with a delivered signal eventually run (lock-serialized wake + persistent signals + "
    "reconciler backstop).",
}

SPAWN_STEP = "$spawn:"  # §8.4 step name prefix: $spawn:<name>, value = the child-id list
CHILDREN = "$children"  # §8.4 signal name, scope job:<parent_id>
_SPAWN_KEY = re.compile(r"^\$spawn:(\d+):(.*):(\d+)$", re.DOTALL)  # $spawn:<parent>:<name>:<index>
_WINDOW_KEY = re.compile(r"@-?\d+$")  # §5.2 <key>@<floor(epoch_seconds / window)>


@dataclass(frozen=True)
class Violation:
    """One counterexample: which invariant, which job (None when no single job is to blame), which rule."""

    invariant: str  # "I1" … "I9"
    job_id: int | None
    rule: str  # the rule broken, with the observed values

    def __str__(self) -> str:
        who = f" job {self.job_id}" if self.job_id is not None else ""
        return f"{self.invariant}{who}: {self.rule}"

    @property
    def contract(self) -> str:
        """The §11 sentence this violation breaks."""
        return CONTRACT[self.invariant]


def by_invariant(violations: Iterable[Violation]) -> dict[str, list[Violation]]:
    """Violations grouped under every invariant name I1…I9 (empty lists included), for reports."""
    grouped: dict[str, list[Violation]] = {name: [] for name in CONTRACT}
    for v in violations:
        grouped.setdefault(v.invariant, []).append(v)
    return grouped


# ---------------------------------------------------------------------------------------------------
# formatting helpers


def _show(value: Any, limit: int = 60) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat()
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row_diff(before: Any, after: Any) -> list[str]:
    """`column old→new` for every column that differs between two rows of one dataclass type."""
    return [
        f"{f.name} {_show(getattr(before, f.name))}→{_show(getattr(after, f.name))}"
        for f in fields(before)
        if getattr(before, f.name) != getattr(after, f.name)
    ]


def _last_error(job: Job) -> str | None:
    entry = job.errors[-1] if job.errors else None
    return entry.get("error") if isinstance(entry, Mapping) else None


def _steps_by_job(steps: Iterable[Step]) -> dict[int, list[Step]]:
    grouped: dict[int, list[Step]] = defaultdict(list)
    for s in steps:
        grouped[s.job_id].append(s)
    for rows in grouped.values():
        rows.sort(key=lambda s: (s.seq, s.name))
    return grouped


def _both_ordered(state: State) -> bool:
    return bool(getattr(state.jobs, "ordered", False) and getattr(state.steps, "ordered", False))


class _StepsInOrder:
    """`_steps_by_job(steps.values())` for a steps table iterated in job order (a disk-backed snapshot's),
    read for ascending job ids: one job's steps held at a time, not every step of the run (issue 54). A
    step stored under another job's key (none in a snapshot) is found by a first pass over the keys."""

    def __init__(self, steps: Mapping[tuple[int, str], Step]) -> None:
        self._strays: dict[int, list[tuple[int, Step]]] = defaultdict(list)  # job → (the key's job, step)
        for (job_id, _name), s in steps.items():
            if s.job_id != job_id:
                self._strays[s.job_id].append((job_id, s))
        self._groups = itertools.groupby(steps.items(), key=lambda kv: kv[0][0])
        self._at: tuple[int, list[Step]] | None = None

    def get(self, job_id: int, default: list[Step]) -> list[Step]:
        while self._at is None or self._at[0] < job_id:
            nxt = next(self._groups, None)
            if nxt is None:
                self._at = (job_id + 1, [])  # past the last step: nothing further
                break
            self._at = (nxt[0], [s for _k, s in nxt[1]])
        mine = [(job_id, s) for s in self._at[1] if s.job_id == job_id] if self._at[0] == job_id else []
        mine += self._strays.get(job_id, [])
        if not mine:
            return default
        # ties of (seq, name) — only with a stray — in the table's order, as the stable sort of
        # _steps_by_job keeps them
        mine.sort(key=lambda ks: (ks[1].seq, ks[1].name, ks[0]))
        return [s for _k, s in mine]


def parse_spawn_key(key: str | None) -> tuple[int, str, int] | None:
    """(parent_id, spawn name, index) of a §8.4 child key `$spawn:<parent_id>:<name>:<index>`, else None.

    The name may itself contain ':' — the parent id is up to the first ':', the index after the last.
    """
    match = _SPAWN_KEY.match(key) if key is not None else None
    return (int(match.group(1)), match.group(2), int(match.group(3))) if match else None


# ---------------------------------------------------------------------------------------------------
# I1


def i1_no_job_lost(
    state: State, expected_ids: Iterable[int], *, drained: bool, pruned: Iterable[int] = ()
) -> list[Violation]:
    """§11.1: No inserted job is ever lost; all reach a terminal state given workers.

    Inputs: the snapshot; `expected_ids`, every id the driver saw inserted (Inserted results, spawned
    child ids, fired cron jobs); `pruned`, the ids retention deleted (§8.7 deletes terminal rows only, so
    a pruned id is not lost); `drained` — True once the driver stopped producing work and let workers
    run until idle (every due deadline passed, awaited signals delivered), when "given workers" applies.

    Rules: every expected id has a row unless it was pruned; when drained, every expected row is terminal.
    Jobs the driver did not insert are none of I1's business.
    """
    pruned = set(pruned)
    out: list[Violation] = []
    for job_id in sorted(set(expected_ids)):
        job = state.jobs.get(job_id)
        if job is None:
            if job_id not in pruned:
                out.append(Violation("I1", job_id, "was inserted but its row is gone and retention did not prune it"))
        elif drained and job.state not in TERMINAL:
            out.append(Violation("I1", job_id, f"is {job.state}, not terminal, after the workers drained all work"))
    return out


# ---------------------------------------------------------------------------------------------------
# I2


@dataclass(frozen=True)
class StaleAck:
    """What a checker observed around one fenced write (§7) that returned `Stale`.

    `before`/`after`: the job row immediately before and after the write (None: no row). The observation
    must exclude concurrent writers (a sequential test, or both reads in the write's own transaction),
    otherwise another node's legitimate change would be blamed on the stale ack. Optionally the job's
    step rows before/after (a stale `Sleep` must not journal `$sleep:*`) and `elsewhere`, the tables a
    whole-state comparison found changed besides this row and its steps (a stale await-children must
    not clear `$children`).
    """

    job_id: int
    attempt: int
    before: Job | None
    after: Job | None
    kind: str = "ack"  # ack | batched ack | await park | sleep | await-children
    steps_before: tuple[Step, ...] | None = None
    steps_after: tuple[Step, ...] | None = None
    elsewhere: tuple[str, ...] = ()


def i2_stale_acks_change_nothing(observations: Iterable[StaleAck]) -> list[Violation]:
    """§11.2: A fenced ack from a stale attempt never mutates the row.

    Input: `StaleAck` observations (from `stale_acks_from_history`, or recorded by a checker around a
    write whose result was `Stale`). Rules: the row is unchanged (every column); when step rows were
    observed, they are unchanged; when a whole-state comparison was made, nothing else changed either.
    """
    out: list[Violation] = []
    for o in observations:
        changes: list[str] = []
        if o.before is None and o.after is not None:
            changes.append("created the row")
        elif o.before is not None and o.after is None:
            changes.append("deleted the row")
        elif o.before != o.after:
            changes.append("changed the row: " + ", ".join(_row_diff(o.before, o.after)))
        if o.steps_before is not None and o.steps_after is not None and o.steps_before != o.steps_after:
            old = {s.name: s for s in o.steps_before}
            new = {s.name: s for s in o.steps_after}
            touched = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
            changes.append("changed its steps: " + ", ".join(repr(n) for n in touched))
        if o.elsewhere:
            changes.append("changed " + ", ".join(o.elsewhere))
        if changes:
            out.append(Violation("I2", o.job_id, f"a stale {o.kind} (attempt {o.attempt}) " + "; ".join(changes)))
    return out


_FENCED = {w.Ack: "ack", w.ParkAwait: "await park", w.Sleep: "sleep", w.AwaitChildren: "await-children"}


def _elsewhere(before: State, after: State, job_id: int) -> tuple[str, ...]:
    """The tables that differ between two states, ignoring one job's row and its steps."""
    changed = []
    if {k: v for k, v in before.jobs.items() if k != job_id} != {k: v for k, v in after.jobs.items() if k != job_id}:
        changed.append("other belay_jobs rows")
    if {k: v for k, v in before.steps.items() if k[0] != job_id} != {
        k: v for k, v in after.steps.items() if k[0] != job_id
    }:
        changed.append("other jobs' belay_steps")
    for table in ("events", "signals", "rate", "queues", "crons"):
        if dict(getattr(before, table)) != dict(getattr(after, table)):
            changed.append(f"belay_{table}")
    if before.next_id != after.next_id:
        changed.append("the id sequence")
    return tuple(changed)


def stale_acks_from_history(history_with_states: Iterable[tuple[Any, Any, State, State]]) -> list[StaleAck]:
    """The I2 observations in a history of `(op, result, state_before, state_after)` (see `replay`): one
    per Ack / ParkAwait / Sleep / AwaitChildren whose result is `Stale`, compared over the whole state,
    and one per stale member of an `AckMany` batch, compared over its row and steps (the batch's other
    acks legitimately change the rest)."""
    out: list[StaleAck] = []
    for op, result, before, after in history_with_states:
        if isinstance(op, w.AckMany) and isinstance(result, w.AckedMany):
            out.extend(
                StaleAck(
                    a.job_id,
                    a.attempt,
                    before.jobs.get(a.job_id),
                    after.jobs.get(a.job_id),
                    "batched ack",
                    tuple(before.steps_of(a.job_id)),
                    tuple(after.steps_of(a.job_id)),
                )
                for a, r in zip(op.acks, result.results, strict=True)
                if isinstance(r, w.Stale)
            )
            continue
        kind = _FENCED.get(type(op))
        if kind is None or not isinstance(result, w.Stale):
            continue
        out.append(
            StaleAck(
                op.job_id,
                op.attempt,
                before.jobs.get(op.job_id),
                after.jobs.get(op.job_id),
                kind,
                tuple(before.steps_of(op.job_id)),
                tuple(after.steps_of(op.job_id)),
                _elsewhere(before, after, op.job_id),
            )
        )
    return out


def replay(operations: Iterable[Any], initial: State | None = None) -> list[tuple[Any, Any, State, State]]:
    """Re-run operations through the model: `(op, result, state_before, state_after)` per operation.

    `ModelStore.history` keeps `(op, result)` only; the model is deterministic, so
    `replay(op for op, _ in store.history)` rebuilds the states the history-based checks (I2, I3) need.
    """
    # Imported here: the soak checker needs none of the store's dependencies (cronsim, networkx).
    from model.store import transition

    state = initial if initial is not None else State()
    out = []
    for op in operations:
        after, result = transition(state, op)
        out.append((op, result, state, after))
        state = after
    return out


# ---------------------------------------------------------------------------------------------------
# I3


def _shared_seqs(steps: Iterable[Step]) -> list[Violation]:
    by_seq: dict[tuple[int, int], list[str]] = defaultdict(list)  # the names only: not every step's row
    for s in steps:
        by_seq[(s.job_id, s.seq)].append(s.name)
    out = []
    for (job_id, seq), rows in sorted(by_seq.items()):
        if len(rows) > 1:
            names = ", ".join(sorted(repr(name) for name in rows))
            out.append(Violation("I3", job_id, f"steps {names} share seq {seq}; seq is the per-job insertion order"))
    return out


def i3_one_row_per_step(steps: Iterable[Step]) -> list[Violation]:
    """§11.3: At-least-once execution; step values, once journaled, are immutable and exactly one row per (job, name).

    For raw belay_steps rows (a `State` keys steps by (job_id, name), so it cannot hold duplicates —
    check the rows before building one). Rules: one row per (job_id, name) — the primary key; one row
    per (job_id, seq) — seq is the per-job insertion order (§3).
    """
    steps = list(steps)
    out: list[Violation] = []
    by_name: dict[tuple[int, str], list[Step]] = defaultdict(list)
    for s in steps:
        by_name[(s.job_id, s.name)].append(s)
    for (job_id, name), rows in sorted(by_name.items()):
        if len(rows) > 1:
            out.append(
                Violation("I3", job_id, f"has {len(rows)} rows for step {name!r}; (job, name) admits exactly one")
            )
    return out + _shared_seqs(steps)


Journal = Mapping[tuple[int, str], bytes] | Iterable[tuple[tuple[int, str], bytes]]
"""Step values workers were handed: `{(job_id, name): value}` or `((job_id, name), value)` pairs."""


def _journal_entries(journal: Journal | None) -> list[tuple[tuple[int, str], bytes]]:
    if journal is None:
        return []
    if isinstance(journal, Mapping):
        return list(journal.items())
    return list(journal)


def i3_steps_immutable(snapshots: Sequence[State], *, journal: Journal | None = None) -> list[Violation]:
    """§11.3: At-least-once execution; step values, once journaled, are immutable and exactly one row per (job, name).

    Inputs: `snapshots` in time order (one is enough for the per-snapshot rules); `journal`, the values
    workers were handed for a step — `RecordStep`'s returned value, a `ReadStep` hit — as a mapping
    `{(job_id, name): value}` or as `((job_id, name), value)` pairs (pairs keep repeats, which is where
    a disagreement shows); each entry must have been observed before the last snapshot was taken.

    Rules, per snapshot: each row sits under its own (job_id, name); seq is unique per job. Between
    consecutive snapshots: a step present earlier is identical later (value, seq, costs, inserted_at),
    and may vanish only together with its job row (§8.7 deletes both; whether the job's disappearance
    was legitimate is I1's question); a step added later has a seq above every earlier seq of its job.
    Against the journal: every value a worker was handed equals the stored value ("results consistent
    with the journal"), and the row is still there while its job is.

    "At-least-once execution" itself is not visible in rows: a job that reached a terminal state through
    a worker ran at least once, which I1 covers.
    """
    snapshots = list(snapshots)
    out: list[Violation] = []
    for snap in snapshots:
        for (job_id, name), s in items_in_key_order(snap.steps):
            if (s.job_id, s.name) != (job_id, name):
                out.append(
                    Violation("I3", job_id, f"the row stored under step {name!r} is job {s.job_id}'s step {s.name!r}")
                )
        out.extend(_shared_seqs(snap.steps.values()))
    for earlier, later in pairwise(snapshots):
        last_seq: dict[int, int] = {}
        for (job_id, name), s in sorted(earlier.steps.items()):
            last_seq[job_id] = max(last_seq.get(job_id, 0), s.seq)
            kept = later.steps.get((job_id, name))
            if kept is None:
                if job_id in later.jobs:
                    out.append(Violation("I3", job_id, f"step {name!r} vanished while its job row still exists"))
            elif kept != s:
                out.append(
                    Violation(
                        "I3", job_id, f"step {name!r} changed after it was journaled: " + ", ".join(_row_diff(s, kept))
                    )
                )
        for (job_id, name), s in sorted(later.steps.items()):
            if (job_id, name) not in earlier.steps and s.seq <= last_seq.get(job_id, 0):
                out.append(
                    Violation(
                        "I3",
                        job_id,
                        f"step {name!r} was journaled with seq {s.seq}, not after the existing seq {last_seq[job_id]} "
                        "(seq is the per-job insertion order)",
                    )
                )
    if snapshots:
        final = snapshots[-1]
        reported: set[tuple[tuple[int, str], bytes]] = set()
        for (job_id, name), value in _journal_entries(journal):
            stored = final.steps.get((job_id, name))
            if ((job_id, name), value) in reported:
                continue
            if stored is None:
                if job_id in final.jobs:
                    reported.add(((job_id, name), value))
                    out.append(
                        Violation(
                            "I3", job_id, f"a worker was handed step {name!r} as journaled, but no such row exists"
                        )
                    )
            elif bytes(stored.value) != bytes(value):
                reported.add(((job_id, name), value))
                out.append(
                    Violation(
                        "I3",
                        job_id,
                        f"a worker was handed {_show(bytes(value))} for step {name!r} but the journal holds {_show(bytes(stored.value))}",
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------------
# I4


def _over(job: Job, usd: int, tokens: int) -> list[str]:
    """The budget columns `usd`/`tokens` exceed (strictly), described."""
    over = []
    if job.budget_usd_micros is not None and usd > job.budget_usd_micros:
        over.append(f"usd {usd} > budget {job.budget_usd_micros}")
    if job.budget_tokens is not None and tokens > job.budget_tokens:
        over.append(f"tokens {tokens} > budget {job.budget_tokens}")
    return over


def i4_budget_fails_on_crossing_step(state: State) -> list[Violation]:
    """§11.4: Budgets fail the job on the first step whose recorded spend crosses a cap.

    Input: the snapshot. Per job, its steps are summed in seq order; the crossing step is the first at
    which a cumulative spend exceeds (strictly) a non-NULL budget column.

    Rules:
      * spent_usd_micros / spent_tokens equal the sums of the job's step costs (§8.2 adds a step's
        costs in the transaction that journals it, and only then);
      * no step is journaled after the crossing step — paid or free, `$sleep:`/`$spawn:` included: the
        SDK fails the job on the crossing step's returned spend, and a later attempt's pre-flight
        check refuses to run any missed step (§8.2);
      * a crossed job that is terminal did not succeed, and if it failed, its last error is
        `budget_exceeded`;
      * any `budget_exceeded` error entry implies a crossing (no false budget failures).

    Caveats — terminal states a crossed job may legitimately reach without `budget_exceeded`:
    `failed` with last error `lease_expired` (the worker died after journaling the crossing step and
    reclaim found no attempt left) and `cancelled` (an operator cancel or a settlement doom between a
    reclaim and the next claim; the row does not tell these apart from a cooperative self-cancel).
    Known ways a worker that follows §8.2 to the letter still ends `succeeded` after a crossing — reported
    here, because §11.4 says the job fails; they are gaps between §8.2 and §11.4, not checker noise:
      * the worker journals the crossing step as the job's *last* step and crashes before acking the
        failure; the next attempt replays every step as a hit (§8.2 pre-flights only a miss) and acks
        success. An SDK closes this by checking durable spend before acking success;
      * a *stale* execution (lease lost but still running: steps are not fenced) journals the crossing
        step after the live attempt already passed it; the live attempt never sees the spend.
    """
    out: list[Violation] = []
    steps = _StepsInOrder(state.steps) if _both_ordered(state) else _steps_by_job(state.steps.values())
    for job in in_key_order(state.jobs):
        rows = steps.get(job.id, [])
        usd = sum(s.usd_micros for s in rows)
        tokens = sum(s.tokens for s in rows)
        if job.spent_usd_micros != usd:
            out.append(
                Violation(
                    "I4",
                    job.id,
                    f"spent_usd_micros is {job.spent_usd_micros} but its {len(rows)} journaled steps cost {usd}",
                )
            )
        if job.spent_tokens != tokens:
            out.append(
                Violation(
                    "I4",
                    job.id,
                    f"spent_tokens is {job.spent_tokens} but its {len(rows)} journaled steps cost {tokens}",
                )
            )
        crossing: Step | None = None
        crossed_by: list[str] = []
        cu = ct = 0
        for s in rows:
            if crossing is not None:
                out.append(
                    Violation(
                        "I4",
                        job.id,
                        f"step {s.name!r} (seq {s.seq}) was journaled after step {crossing.name!r} (seq {crossing.seq}) "
                        f"crossed the budget ({'; '.join(crossed_by)}); the job must fail on the crossing step",
                    )
                )
                continue
            cu, ct = cu + s.usd_micros, ct + s.tokens
            crossed_by = _over(job, cu, ct)
            if crossed_by:
                crossing = s
        if crossing is not None:
            what = f"step {crossing.name!r} (seq {crossing.seq}) crossed the budget ({'; '.join(crossed_by)})"
            last = _last_error(job)
            if job.state == "succeeded":
                out.append(Violation("I4", job.id, f"succeeded although {what}; it must fail with budget_exceeded"))
            elif job.state == "failed" and last not in ("budget_exceeded", "lease_expired"):
                out.append(
                    Violation("I4", job.id, f"failed with last error {last!r}, not budget_exceeded, although {what}")
                )
        elif any(isinstance(e, Mapping) and e.get("error") == "budget_exceeded" for e in job.errors):
            spend = f"spent usd {job.spent_usd_micros} of {_show(job.budget_usd_micros)}, tokens {job.spent_tokens} of {_show(job.budget_tokens)}"
            out.append(
                Violation("I4", job.id, f"has a budget_exceeded error although no step crossed a budget ({spend})")
            )
    return out


# ---------------------------------------------------------------------------------------------------
# I5


def i5_settlement_consistent(state: State, *, retried: Iterable[int] | None = None) -> list[Violation]:
    """§11.5: Workflow releases occur only with satisfied deps; dooms only with a doomed dep; settlement is a fixpoint (re-settling is a no-op).

    Inputs: the snapshot; `retried`, the ids of jobs an operator retried (§8.6), when known (None:
    unknown — see below).

    Rules, per workflow:
      * member names are unique;
      * fixpoint: `settle(members)` is empty. A held dep-bearing member that settlement would release
        is a missed release; one it would doom is a missed doom;
      * releases: a dep-bearing member that is neither held nor cancelled was released, so each of its
        deps satisfied it at the time. `succeeded` is absorbing (nothing leaves it), so a dep that is
        not succeeded now never satisfied it through success; it may have satisfied it through a
        `failed`/`cancelled` outcome the member ignores and since been retried by an operator (§8.6
        retry leaves released dependents alone). Hence: a dep that is not succeeded and not terminal
        with a flag the member carries is a violation when the member carries no ignore flag at all,
        or when `retried` is given and does not contain the dep.

    Not checkable from rows: dooms. A doomed member is `cancelled`, exactly as an operator-cancelled
    one is, so "dooms only with a doomed dep" is checked only through the fixpoint (a held member
    with a doomed dep must have been doomed). A dep missing from the snapshot is skipped (retention
    prunes terminal deps after they settled their dependents).
    """
    retried_ids = None if retried is None else set(retried)
    out: list[Violation] = []
    workflows: dict[str, list[Job]] = defaultdict(list)
    for job in state.jobs.values():
        if job.workflow_id is not None and job.wf_name is not None:
            workflows[job.workflow_id].append(job)
    for wf in sorted(workflows):
        members = sorted(workflows[wf], key=lambda j: j.id)
        by_name: dict[str, Job] = {}
        for job in members:
            assert job.wf_name is not None  # only named members were collected above
            if job.wf_name in by_name:
                out.append(
                    Violation(
                        "I5",
                        job.id,
                        f"reuses member name {job.wf_name!r} of workflow {wf!r} (job {by_name[job.wf_name].id})",
                    )
                )
            else:
                by_name[job.wf_name] = job
        verdict = settle(
            Member(name, j.state, tuple(j.wf_deps or ()), tuple(j.wf_ignore or ())) for name, j in by_name.items()
        )
        for name in sorted(verdict.released):
            out.append(
                Violation(
                    "I5",
                    by_name[name].id,
                    f"settlement is not a fixpoint: held member {name!r} of workflow {wf!r} has every dep satisfied "
                    "but was not released (missed release)",
                )
            )
        for name in sorted(verdict.doomed):
            out.append(
                Violation(
                    "I5",
                    by_name[name].id,
                    f"settlement is not a fixpoint: held member {name!r} of workflow {wf!r} has a dep failed/cancelled "
                    "without its ignore flag (directly or through a doomed dep) but was not doomed (missed doom)",
                )
            )
        for job in members:
            if not job.wf_deps or job.state in ("held", "cancelled"):
                continue
            ignore = set(job.wf_ignore or ()) & {"failed", "cancelled"}
            for dep in job.wf_deps:
                d = by_name.get(dep)
                if d is None or d.state == "succeeded" or (d.state in ("failed", "cancelled") and d.state in ignore):
                    continue
                if ignore and (retried_ids is None or d.id in retried_ids):
                    continue  # it may have satisfied the member as failed/cancelled, then been retried
                flag = (
                    f" and member {job.wf_name!r} does not ignore {d.state}"
                    if d.state in ("failed", "cancelled")
                    else ""
                )
                out.append(
                    Violation(
                        "I5",
                        job.id,
                        f"member {job.wf_name!r} of workflow {wf!r} was released (it is {job.state}) although dep "
                        f"{dep!r} (job {d.id}) is {d.state}{flag}",
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------------
# I6


def i6_cron_slots_once(state: State, expected_slots: Iterable[tuple[str, datetime]] = ()) -> list[Violation]:
    """§11.6: Cron slots insert exactly once cluster-wide.

    Inputs: the snapshot; `expected_slots`, the (cron_name, slot) pairs that were due while crons were
    fired (e.g. every `Fired` of `CronsFired` results) — leave out slots whose job retention pruned.

    Rules: at most one job per (cron_name, cron_slot); cron_name and cron_slot are set together; a
    slot is a whole UTC minute (§8.5); every expected slot has its job ("exactly once" = at most once
    here and at least once there).
    """
    out: list[Violation] = []
    holders: dict[tuple[str, datetime], list[int]] = defaultdict(list)
    for job in in_key_order(state.jobs):
        if job.cron_name is None and job.cron_slot is None:
            continue
        if job.cron_name is None or job.cron_slot is None:
            out.append(
                Violation(
                    "I6",
                    job.id,
                    f"has cron_name {_show(job.cron_name)} but cron_slot {_show(job.cron_slot)}; they go together",
                )
            )
            continue
        if job.cron_slot != job.cron_slot.astimezone(UTC).replace(second=0, microsecond=0):
            out.append(
                Violation(
                    "I6", job.id, f"cron {job.cron_name!r} slot {job.cron_slot.isoformat()} is not a whole UTC minute"
                )
            )
        holders[(job.cron_name, job.cron_slot)].append(job.id)
    for (name, slot), ids in sorted(holders.items(), key=lambda kv: kv[1][0]):
        for extra in ids[1:]:
            out.append(
                Violation(
                    "I6",
                    extra,
                    f"cron {name!r} slot {slot.isoformat()} was inserted again (job {ids[0]} already holds it)",
                )
            )
    for name, slot in sorted(set(expected_slots)):
        if (name, slot) not in holders:
            out.append(Violation("I6", None, f"cron {name!r} slot {slot.isoformat()} was due but no job holds it"))
    return out


# ---------------------------------------------------------------------------------------------------
# I7


def i7_unique_keys(state: State) -> list[Violation]:
    """§11.7: Unique keys admit at most one live holder (incomplete) / one ever (window per bucket, always).

    Input: the snapshot. Rules: per key, at most one incomplete-mode row in a non-terminal state; per
    key, at most one window- or always-mode row in any state (the two modes share one index, §3); a
    window-mode key embeds its bucket `<key>@<n>` (§5.2); unique_mode is one of the three modes.
    Retention may delete the one window/always row; a later re-insert is then admitted by the index and
    is not visible as a violation here.
    """
    out: list[Violation] = []
    live: dict[str, list[int]] = defaultdict(list)
    ever: dict[str, list[int]] = defaultdict(list)
    for job in in_key_order(state.jobs):
        if job.unique_mode is not None and job.unique_mode not in UNIQUE_MODES:
            out.append(
                Violation("I7", job.id, f"has unique_mode {job.unique_mode!r}, not one of {', '.join(UNIQUE_MODES)}")
            )
        if job.unique_key is None:
            continue
        if job.unique_mode == "incomplete" and job.state in INCOMPLETE:
            live[job.unique_key].append(job.id)
        elif job.unique_mode in ("window", "always"):
            ever[job.unique_key].append(job.id)
            if job.unique_mode == "window" and not _WINDOW_KEY.search(job.unique_key):
                out.append(
                    Violation("I7", job.id, f"window-mode key {job.unique_key!r} does not embed its bucket (<key>@<n>)")
                )
    for key, ids in sorted(live.items(), key=lambda kv: kv[1][0]):
        for extra in ids[1:]:
            out.append(
                Violation(
                    "I7", extra, f"is a second live holder of incomplete-mode key {key!r} (job {ids[0]} holds it)"
                )
            )
    for key, ids in sorted(ever.items(), key=lambda kv: kv[1][0]):
        for extra in ids[1:]:
            out.append(
                Violation(
                    "I7",
                    extra,
                    f"is a second row for window/always key {key!r} (job {ids[0]} has it; such keys admit one row ever)",
                )
            )
    return out


# ---------------------------------------------------------------------------------------------------
# I8


def _child_ids(value: bytes) -> list[int] | None:
    try:
        ids = decode(value)
    except EnvelopeError:
        return None
    return w.child_id_list(ids)  # integers, or their decimal strings (a JSON spelling of bigints)


class _Keyed(NamedTuple):
    """A job holding a spawn key, as I8 keeps it (a long run has thousands of children: not their rows)."""

    id: int
    unique_key: str | None


def i8_children_as_declared(state: State, *, pruned: Iterable[int] = ()) -> list[Violation]:
    """§11.8: A parent has exactly the children its spawn declared, regardless of crashes between insert and journal.

    Inputs: the snapshot; `pruned`, ids retention deleted (a terminal child may be pruned before its
    parent, leaving a declared id without a row).

    A spawn (§8.4) declares its children twice: the `$spawn:<name>` step of parent p holds the id list,
    and child i carries unique key `$spawn:<p>:<name>:<i>` (mode always). Because the list is rebuilt
    from the keys, a crash between the child insert and the journal cannot make them disagree: the next
    attempt's spawn adopts the children already inserted. Rules:
      * the step value decodes to a list of job ids (§2 envelope, JSON or ETF);
      * for i in 0..n-1 the key `$spawn:<p>:<name>:<i>` is held by exactly the job at list[i] (or that id
        was pruned);
      * no job holds a key `$spawn:<p>:<name>:<j>` with j ≥ n (a child the declaration does not list);
      * every job with a spawn key of p has parent_id p and unique_mode 'always'.
    Allowed: keyed children of (p, name) while p has no `$spawn:<name>` step — the window between
    insert and journal (an SDK may journal in a later transaction than the insert: docs/certification.md
    "Allowed alternatives", split_spawn), made permanent if p then never re-ran its spawn (attempts
    exhausted, cancelled, pruned with its steps). Not allowed: such children of a p that *succeeded* —
    its code ran past the spawn, which journals it (§8.4 (a): "the spawn is a memoized step named
    $spawn:<name>"). The rules assume deterministic job code (a re-run spawns the same children),
    as durable execution does. Jobs given a parent_id by a plain enqueue (no spawn key) are outside I8.
    """
    pruned = set(pruned)
    out: list[Violation] = []
    # the keyed children by (parent, spawn name) and index: their id and key only, not their rows
    keyed: dict[tuple[int, str], dict[int, list[_Keyed]]] = defaultdict(lambda: defaultdict(list))
    for job in in_key_order(state.jobs):
        parsed = parse_spawn_key(job.unique_key)
        if parsed is None:
            continue
        parent, name, index = parsed
        keyed[(parent, name)][index].append(_Keyed(job.id, job.unique_key))
        if job.parent_id != parent:
            out.append(
                Violation(
                    "I8",
                    job.id,
                    f"carries spawn key {job.unique_key!r} of parent {parent} but its parent_id is {_show(job.parent_id)}",
                )
            )
        if job.unique_mode != "always":
            out.append(
                Violation(
                    "I8",
                    job.id,
                    f"carries spawn key {job.unique_key!r} with unique_mode {_show(job.unique_mode)}, not 'always'",
                )
            )
    for (parent, name), by_index in sorted(keyed.items()):
        holder = state.jobs.get(parent)
        if holder is not None and holder.state == "succeeded" and (parent, SPAWN_STEP + name) not in state.steps:
            kids = sorted(j.id for jobs in by_index.values() for j in jobs)
            out.append(
                Violation(
                    "I8",
                    parent,
                    f"succeeded with spawn {name!r} never journaled, though job(s) {', '.join(map(str, kids))} "
                    "hold its keys (a spawn is a memoized step, §8.4)",
                )
            )
    for (parent, step_name), step in items_in_key_order(state.steps):
        if not step_name.startswith(SPAWN_STEP):
            continue
        name = step_name[len(SPAWN_STEP) :]
        ids = _child_ids(step.value)
        if ids is None:
            out.append(
                Violation(
                    "I8", parent, f"spawn step {step_name!r} holds {_show(bytes(step.value))}, not a list of child ids"
                )
            )
            continue
        children = keyed.get((parent, name), {})
        for i, child in enumerate(ids):
            key = f"$spawn:{parent}:{name}:{i}"
            holders = [j.id for j in children.get(i, [])]
            if holders == [child] or (not holders and child in pruned):
                continue
            held = f"held by job(s) {', '.join(map(str, holders))}" if holders else "held by no job"
            out.append(
                Violation("I8", parent, f"spawn {name!r} declares child {child} at index {i} but key {key!r} is {held}")
            )
        for index in sorted(i for i in children if i >= len(ids)):
            for job in children[index]:
                out.append(
                    Violation(
                        "I8",
                        parent,
                        f"has child {job.id} (key {job.unique_key!r}) that spawn {name!r} did not declare (it declared {len(ids)})",
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------------
# I9


def i9_awaiters_eventually_run(state: State, *, quiescent: bool) -> list[Violation]:
    """§11.9: Awaiting jobs with a delivered signal eventually run (lock-serialized wake + persistent signals + reconciler backstop).

    Inputs: the snapshot (jobs and signals from one transaction); `quiescent` — True right after a
    reconcile pass (§8.4 backstop) with no writers in between.

    Rules:
      * never (not even transiently): a job awaiting (scope, name) while belay_signals holds that row.
        Delivery upserts the row and wakes awaiters under the scope lock, and a park checks for the row
        under the same lock (§7), so such a job is a lost wake-up;
      * never: an awaiting job with no await key and no deadline (nothing can ever make it claimable);
      * when quiescent: no job awaits (`job:<own id>`, `$children`) while all its children exist and are
        terminal (the R2 backstop wakes exactly those).
    "Eventually run" past the wake-up (a woken job being claimed) is I1's drained check.
    """
    out: list[Violation] = []
    # (id, state) of the children of the parents awaiting `$children` only: a long soak's snapshot has
    # hundreds of thousands of jobs, tens of thousands of them children of parents long finished
    children: dict[int, list[tuple[int, str]]] = defaultdict(list)
    if quiescent:
        parked = {
            j.id
            for j in state.jobs.values()
            if j.state == "awaiting" and j.await_name == CHILDREN and j.await_scope == f"job:{j.id}"
        }
        for job in state.jobs.values() if parked else ():
            if job.parent_id in parked:
                children[job.parent_id].append((job.id, job.state))
    for job in in_key_order(state.jobs):
        if job.state != "awaiting":
            continue
        if job.await_scope is None or job.await_name is None:
            if job.ready_at is None:
                out.append(
                    Violation(
                        "I9", job.id, "is awaiting with no await_scope/await_name and no deadline: nothing can wake it"
                    )
                )
            continue
        signal = state.signals.get((job.await_scope, job.await_name))
        if signal is not None:
            out.append(
                Violation(
                    "I9",
                    job.id,
                    f"is awaiting ({job.await_scope}, {job.await_name}) although that signal was delivered at "
                    f"{signal.inserted_at.isoformat()} (a lost wake-up)",
                )
            )
        if quiescent and job.await_name == CHILDREN and job.await_scope == f"job:{job.id}":
            kids = sorted(children.get(job.id, []))
            if kids and all(state_ in TERMINAL for _id, state_ in kids):
                out.append(
                    Violation(
                        "I9",
                        job.id,
                        f"awaits $children but all its {len(kids)} children ({', '.join(str(k) for k, _ in kids)}) are "
                        "terminal after a reconcile pass (the R2 backstop missed it)",
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------------
# ledger and convenience


@dataclass(frozen=True)
class Ledger:
    """What a driver knows besides the database: the inputs of I1, I3's journal, I5, I6 and I8."""

    inserted: frozenset[int] = frozenset()  # I1: every id the driver saw inserted
    pruned: frozenset[int] = frozenset()  # I1/I8: ids retention deleted
    retried: frozenset[int] | None = None  # I5: ids an operator retried; None = unknown
    cron_slots: frozenset[tuple[str, datetime]] = frozenset()  # I6: due slots (whose job was not pruned)
    journal: tuple[tuple[tuple[int, str], bytes], ...] = field(default=())  # I3: values handed to workers


def ledger_from_history(history: Iterable[tuple[Any, ...]]) -> Ledger:
    """The ledger implied by `(op, result, ...)` tuples (`ModelStore.history` or `replay`'s output)."""
    inserted: set[int] = set()
    pruned: set[int] = set()
    retried: set[int] = set()
    fired: list[w.Fired] = []
    journal: list[tuple[tuple[int, str], bytes]] = []
    for op, result, *_ in history:
        if isinstance(result, ops.Enqueued):
            inserted.update(result.ids)
        elif isinstance(result, ops.WorkflowEnqueued):
            inserted.update(i for _, i in result.ids if i is not None)
        elif isinstance(result, w.Spawned):
            inserted.update(result.child_ids)
        elif isinstance(result, w.CronsFired):
            fired.extend(result.fired)
            inserted.update(f.job_id for f in result.fired if f.inserted)
        elif isinstance(result, w.Pruned):
            pruned.update(result.jobs)
        elif isinstance(result, ops.Retried):
            retried.add(result.job_id)
        elif isinstance(result, (w.Recorded, w.StepHit)) and isinstance(op, (w.RecordStep, w.ReadStep)):
            journal.append(((op.job_id, op.name), result.value))  # the value the worker was handed
    slots = frozenset((f.cron_name, f.slot) for f in fired if f.job_id not in pruned)
    return Ledger(frozenset(inserted), frozenset(pruned), frozenset(retried), slots, tuple(journal))


def check_all(
    state: State, *, ledger: Ledger | None = None, drained: bool = False, quiescent: bool = False
) -> list[Violation]:
    """Every check one snapshot can decide: I3 (per snapshot), I4, I5, I6, I7, I8, I9; with a ledger also
    I1, I3 against the journal, I5 with known retries, I6's expected slots and I8's pruned children.
    I2 and I3's immutability need histories: run them on `stale_acks_from_history` / snapshot sequences."""
    out: list[Violation] = []
    if ledger is not None:
        out += i1_no_job_lost(state, ledger.inserted, drained=drained, pruned=ledger.pruned)
    out += i3_steps_immutable([state], journal=ledger.journal if ledger else None)
    out += i4_budget_fails_on_crossing_step(state)
    out += i5_settlement_consistent(state, retried=ledger.retried if ledger else None)
    out += i6_cron_slots_once(state, ledger.cron_slots if ledger else ())
    out += i7_unique_keys(state)
    out += i8_children_as_declared(state, pruned=ledger.pruned if ledger else ())
    out += i9_awaiters_eventually_run(state, quiescent=quiescent)
    return out


__all__ = [
    "CONTRACT",
    "Journal",
    "Ledger",
    "StaleAck",
    "Violation",
    "by_invariant",
    "check_all",
    "i1_no_job_lost",
    "i2_stale_acks_change_nothing",
    "i3_one_row_per_step",
    "i3_steps_immutable",
    "i4_budget_fails_on_crossing_step",
    "i5_settlement_consistent",
    "i6_cron_slots_once",
    "i7_unique_keys",
    "i8_children_as_declared",
    "i9_awaiters_eventually_run",
    "ledger_from_history",
    "parse_spawn_key",
    "replay",
    "stale_acks_from_history",
]
