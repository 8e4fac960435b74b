"""§11 I1–I4 on the final snapshot: the life of one job — it finishes (I1), its acks are fenced (I2), its steps
are immutable and its result lists their tokens (I3), its budget holds (I4). Called by soak/judges/checker.py.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from model import invariants as inv
from model.state import State, in_key_order
from soak.judges.duties.evidence import Evidence
from soak.judges.inputs import RESULT_TOKENS, LedgerEntry, SoakLedger, StepsByJob, Timeline, _ts
from soak.judges.verdicts import InvariantResult, _digest, _last_error, _result, _value

# --- I1 -------------------------------------------------------------------------------------------------


IDLE_S = 10.0  # the reference's idle poll ceiling is 0.5 s (§9.1): twenty of them without a claim


def _idle_end_of_drain(
    history: Sequence[Mapping[str, Any]], timeline: Timeline, ev: Evidence | None = None
) -> tuple[float, list[str]] | None:
    """(window start, nodes that ran) when the drain ended unfinished and every lease sample of its last
    IDLE_S seconds (at least 5 of them) saw no running row, with a worker running and the database up."""
    drain = next((e for e in reversed(history) if e.get("type") == "drain_end"), None)
    if drain is None or drain.get("drained"):
        return None
    t1 = float(drain["t"])
    t0 = t1 - IDLE_S
    if ev is not None:  # the run's samples on disk: IDLE_S of them, a few dozen
        samples = [e for _at, e in ev.series["lease_sample"].between(t0, t1)]
    else:
        samples = [e for e in history if e.get("type") == "lease_sample" and t0 <= float(e.get("at", e["t"])) <= t1]
    if len(samples) < 5 or any(e.get("rows") for e in samples) or timeline.db_down_during(t0, t1):
        return None
    ran = sorted(n for n in timeline.started if timeline.node_ran(n, t0, t1))
    return (t0, ran) if ran else None


I1_CHUNK = 2_000  # expected ids judged at a time (the disk table's cache holds 5,000 rows)


def _expected_ids(by_id: Mapping[int, LedgerEntry], extra: set[int]) -> Iterator[int]:
    """The ledger's job ids and `extra` (spawned children, cron jobs), each once, in ascending order — what
    `sorted(set(by_id) | extra)` gives, streamed: a disk table (a long run's ledger) iterates in key order."""
    ledger_ids = iter(by_id) if getattr(by_id, "ordered", False) else iter(sorted(by_id))
    return (job_id for job_id, _ in itertools.groupby(heapq.merge(ledger_ids, sorted(extra))))


def _i1(
    r: InvariantResult,
    state: State,
    ledger: SoakLedger,
    by_id: Mapping[int, LedgerEntry],
    steps: StepsByJob,
    timeline: Timeline,
    drained: bool,
    snapshot_t: float,
    ttl: float,
    history: Sequence[Mapping[str, Any]] = (),
    ev: Evidence | None = None,
) -> None:
    declared: set[int] = set()
    for (_, name), s in state.steps.items():
        if name.startswith(inv.SPAWN_STEP):
            ids = _value(s)
            if isinstance(ids, list):
                declared.update(i for i in ids if isinstance(i, int))
    crons = {j.id for j in state.jobs.values() if j.cron_name is not None}

    def due(t: datetime | None) -> bool:
        return t is None or t.timestamp() <= snapshot_t

    # every expected id once, ascending, in chunks: never a set of every ledger id (issue 54: with a long
    # run's ledger on disk, that set and its copies were most of what the check's peak grew by per job)
    expected = _expected_ids(by_id, declared | crons)
    stuck, pending = [], []
    seen = 0
    while chunk := list(itertools.islice(expected, I1_CHUNK)):
        seen += len(chunk)
        r.add(inv.i1_no_job_lost(state, chunk, drained=False))
        for job_id in chunk:
            job = state.jobs.get(job_id)
            if job is None or job.terminal:
                continue
            if (
                (job.state == "ready" and not due(job.ready_at))
                or (job.state == "running" and not due(job.lease_until))
                or (job.state == "awaiting" and job.ready_at is not None and not due(job.ready_at))
            ):
                pending.append(job_id)
            else:
                stuck.append(job)
    r.checks += seen
    # An unfinished drain (timed out, or cut short) left these jobs behind: their end was not observed, so
    # they are unknown, not violations — only after a drain that completed is a job stuck (issue 27).
    left = [] if drained else stuck
    stuck = stuck if drained else []
    # An unfinished drain whose last IDLE_S seconds every lease sample saw no running row at all, while a
    # worker ran and the database was up: a ready job due through that window was not claimed by anyone —
    # no overload explains it (nothing ran); the polling floor did not fire (§9). A violation, not unknown.
    idle = _idle_end_of_drain(history, timeline, ev)
    if idle is not None:
        for job in list(left):
            due_t = (job.ready_at or job.inserted_at).timestamp() if (job.ready_at or job.inserted_at) else 0.0
            if job.state == "ready" and due_t <= idle[0]:
                left.remove(job)
                r.add(
                    [
                        inv.Violation(
                            "I1",
                            job.id,
                            f"is ready and due (ready_at {job.ready_at}) yet unclaimed through the last "
                            f"{IDLE_S:.0f} s of the drain, while node(s) {', '.join(idle[1])} ran and held no lease "
                            "at all (lease samples): nothing polled for it (§9: polling is the correctness floor)",
                        )
                    ]
                )
    for job in stuck:
        r.add(
            [
                inv.Violation(
                    "I1",
                    job.id,
                    f"is {job.state} (ready_at {job.ready_at}, lease_until {job.lease_until}) "
                    "after the drain although nothing it waits for is pending: it was never run to the end",
                )
            ]
        )
    unknown = []
    if left:
        states: defaultdict[str, int] = defaultdict(int)
        for job in left:
            states[job.state] += 1
        unknown.append(
            f"the drain did not finish: {len(left)} job(s) were left non-terminal "
            f"({', '.join(f'{k} {v}' for k, v in sorted(states.items()))}; e.g. {[j.id for j in left[:5]]})"
        )
    if pending:
        unknown.append(
            f"{len(pending)} job(s) were still waiting for a future deadline or a live lease when the "
            f"drain ended (e.g. {pending[:5]})"
        )
    if unknown:
        r.why_unknown = "; ".join(unknown) + ": their end was not observed"
        r.notes.append(r.why_unknown)
    elif not drained and not stuck:
        r.notes.append("the drain did not report completion, but every expected job is terminal in the snapshot")
    # Lease renewal (§6): a `slow` attempt must not lose its lease while its node was alive, running and the
    # database up — otherwise live work is taken away and, attempts exhausted, lost.
    for (job_id, _seq), event in state.events.items():
        p = event.payload
        if not (isinstance(p, Mapping) and p.get("phase") == "start"):
            continue
        job = state.jobs.get(job_id)
        if job is None:
            continue
        t0 = event.inserted_at.timestamp()
        for e in job.errors:
            if isinstance(e, Mapping) and e.get("error") == "lease_expired" and e.get("attempt") == p.get("attempt"):
                t1 = _ts(e["at"])
                r.checks += 1
                node = p.get("node")
                # blamed only when the node held the attempt for at least half a ttl (a renewal was due)
                if (
                    node
                    and t1 - t0 >= ttl / 2
                    and timeline.node_ran(node, t0, t1)
                    and not timeline.db_down_during(t0 - 1, t1)
                ):
                    r.add(
                        [
                            inv.Violation(
                                "I1",
                                job_id,
                                (
                                    f"attempt {p.get('attempt')} lost its lease (lease_expired at {e['at']}) while node {node} "
                                    f"was alive, not stopped, and the database up for the whole {t1 - t0:.1f}s since the attempt "
                                    f"started (lease ttl {ttl}s): its leases were not renewed"
                                ),
                            )
                        ]
                    )
    r.exercised = seen > 0 and (drained or not pending) and not left
    if not ledger.entries:
        r.why_unknown = "the ledger is empty"


# --- I2 -------------------------------------------------------------------------------------------------


def _i2(r: InvariantResult, state: State, ledger: SoakLedger) -> None:
    missing_attempt = 0
    for job in in_key_order(state.jobs):
        attempts = [e.get("attempt") for e in job.errors if isinstance(e, Mapping)]
        r.checks += 1
        for a, b in itertools.pairwise(attempts):
            if not (isinstance(a, int) and isinstance(b, int) and b > a):
                r.add(
                    [
                        inv.Violation(
                            "I2",
                            job.id,
                            f"attempt {b} ended twice (errors {attempts}): an ack of an attempt "
                            "that had already ended (reclaimed) mutated the row",
                        )
                    ]
                )
                break
        if job.state != "succeeded":
            continue
        result = _result(job)
        if not (isinstance(result, Mapping) and isinstance(result.get("attempt"), int)):
            missing_attempt += 1
            continue
        if result["attempt"] != job.attempt:
            r.add(
                [
                    inv.Violation(
                        "I2",
                        job.id,
                        (
                            f"succeeded with the result of attempt {result['attempt']} while the row is at attempt {job.attempt}: "
                            "a stale attempt's ack finished the job"
                        ),
                    )
                ]
            )
        elif attempts and isinstance(attempts[-1], int) and attempts[-1] >= job.attempt:
            r.add(
                [
                    inv.Violation(
                        "I2",
                        job.id,
                        f"succeeded by attempt {job.attempt}, which had already ended with "
                        f"{job.errors[-1].get('error')!r}: a stale ack mutated the row",
                    )
                ]
            )
    pre = {(o.job_id, o.attempt): o for o in ledger.observations if o.phase == "pre_ack"}
    acks = {(o.job_id, o.attempt): o for o in ledger.observations if o.phase == "ack"}
    stale_seen = sum(1 for o in acks.values() if o.observed.get("state") == "stale")
    moved_on = 0
    for key, o in sorted(pre.items()):
        seen = o.observed
        if seen.get("state") == "running" and seen.get("attempt") == o.attempt:
            continue
        moved_on += 1
        ack = acks.get(key)
        r.checks += 1
        if ack is not None and ack.observed.get("state") != "stale":
            r.add(
                [
                    inv.Violation(
                        "I2",
                        o.job_id,
                        (
                            f"attempt {o.attempt} on node {o.node} saw the row already {seen.get('state')} at attempt "
                            f"{seen.get('attempt')} (leased by {seen.get('leased_by')}), yet its ack was applied "
                            f"(→ {ack.observed.get('state')}) instead of being stale"
                        ),
                    )
                ]
            )
    r.notes.append(
        f"{stale_seen} stale ack(s) observed by workers; {moved_on} attempt(s) came back after their job had moved on"
    )
    if missing_attempt:
        r.notes.append(
            f"{missing_attempt} succeeded job(s) carry no 'attempt' in their result (PROTOCOL.md §2): "
            "their final ack could not be attributed"
        )
    r.scenario["stale_acks"] = stale_seen + moved_on
    r.exercised = stale_seen + moved_on > 0
    if not r.exercised:
        r.why_unknown = "no stale ack happened (no attempt came back after its lease was reclaimed)"


# --- I3 -------------------------------------------------------------------------------------------------


def _i3(r: InvariantResult, state: State, history: Sequence[Mapping[str, Any]], steps: StepsByJob) -> None:
    r.add(inv.i3_one_row_per_step(state.steps.values()))
    r.add(inv.i3_steps_immutable([state]))
    r.checks += len(state.steps)
    # Immutability over time: periodic samples of (seq, md5(value)) against later samples and the end.
    first: dict[tuple[int, str], tuple[int, str]] = {}
    samples = 0
    # a sample taken after the snapshot (the driver's sampler still runs) may see steps the snapshot predates
    taken = min((float(e["t"]) for e in history if e.get("type") == "snapshot"), default=float("inf"))
    for e in history:
        if e.get("type") != "step_sample" or float(e.get("t", 0)) > taken:
            continue
        samples += 1
        for job_id, name, seq, digest in e.get("rows", ()):
            key = (int(job_id), name)
            if key in first and first[key] != (seq, digest):
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            key[0],
                            f"step {name!r} changed after it was journaled (seq/md5 {first[key]} → {(seq, digest)})",
                        )
                    ]
                )
            first.setdefault(key, (seq, digest))
    for key, (seq, digest) in first.items():
        s = state.steps.get(key)
        if s is None:
            if key[0] in state.jobs:
                r.add([inv.Violation("I3", key[0], f"step {key[1]!r} vanished while its job still exists")])
        elif (s.seq, _digest(s.value)) != (seq, digest):
            r.add([inv.Violation("I3", key[0], f"step {key[1]!r} changed after it was journaled")])
    r.checks += len(first)
    # Results consistent with the journal: every token a result lists is the journaled one, journaled
    # no later than the ack that finished the job.
    replayed = 0
    for job in in_key_order(state.jobs):
        if job.state != "succeeded":
            continue
        result = _result(job)
        if not isinstance(result, Mapping):
            continue
        if job.worker in RESULT_TOKENS and isinstance(result.get("tokens"), list):
            names = RESULT_TOKENS[job.worker](job, result)
            pairs = list(zip(names, result["tokens"], strict=False))
            if len(result["tokens"]) != len(names):
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            f"result lists {len(result['tokens'])} step values, its input declares {len(names)}",
                        )
                    ]
                )
        elif job.worker == "slow" and "token" in result:
            pairs = [("begin", result["token"])]
        else:
            continue
        job_replayed = False
        for name, tok in pairs:
            r.checks += 1
            s = steps[job.id].get(name)
            if s is None:
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            f"result names step {name!r} = {tok!r} but the journal has no such "
                            "row: the job was acked before its step was journaled",
                        )
                    ]
                )
                continue
            value = _value(s)
            stored = value.get("token") if isinstance(value, Mapping) else value
            if stored != tok:
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            f"result saw {tok!r} for step {name!r} but the journal holds "
                            f"{stored!r}: a journaled step was executed again",
                        )
                    ]
                )
            elif job.finished_at is not None and s.inserted_at > job.finished_at:
                r.add(
                    [
                        inv.Violation(
                            "I3",
                            job.id,
                            (
                                f"step {name!r} was journaled at {s.inserted_at.isoformat()}, after the job finished at "
                                f"{job.finished_at.isoformat()}: the ack did not wait for the step journal to commit"
                            ),
                        )
                    ]
                )
            if isinstance(value, Mapping) and isinstance(value.get("attempt"), int) and value["attempt"] < job.attempt:
                job_replayed = True
        replayed += job_replayed
    r.notes.append(
        f"{replayed} succeeded job(s) replayed journaled steps from an earlier attempt; "
        f"{samples} journal sample(s) compared over time"
    )
    r.scenario["replays"] = replayed
    r.exercised = replayed > 0
    if not r.exercised:
        r.why_unknown = "no job replayed a journaled step (no multi-step job was retried after journaling)"


# --- I4 -------------------------------------------------------------------------------------------------


def _i4(r: InvariantResult, state: State, by_id: Mapping[int, LedgerEntry], steps: StepsByJob) -> None:
    r.add(inv.i4_budget_fails_on_crossing_step(state))
    crossed = 0
    for job in state.jobs.values():
        r.checks += 1
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "costed":
            continue
        want = entry.detail.get("crossing")
        names = [s.name for s in sorted(steps[job.id].values(), key=lambda s: s.seq)]
        if want is not None and job.state == "failed" and _last_error(job) == "budget_exceeded":
            crossed += 1
            if names and names[-1] != want:
                r.add(
                    [
                        inv.Violation(
                            "I4",
                            job.id,
                            f"failed with budget_exceeded after step {names[-1]!r}; its costs "
                            f"cross the budget on step {want!r}",
                        )
                    ]
                )
        if want is None and job.state == "failed" and _last_error(job) == "budget_exceeded":
            r.add(
                [inv.Violation("I4", job.id, "failed with budget_exceeded although its costs never cross its budget")]
            )
    r.notes.append(f"{crossed} costed job(s) failed with budget_exceeded on their crossing step")
    r.scenario["crossings"] = crossed
    r.exercised = crossed > 0
