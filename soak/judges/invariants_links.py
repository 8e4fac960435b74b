"""§11 I5–I9 on the final snapshot: jobs linked to others — workflow dependencies (I5), cron slots (I6),
unique keys (I7), spawned children (I8), awaited signals (I9). Called by soak/judges/checker.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeGuard

from model import invariants as inv
from model.rows import Job
from model.state import State, in_key_order
from soak.judges.inputs import LedgerEntry, SoakLedger, StepsByJob, Timeline, UniqueAttempt
from soak.judges.verdicts import InvariantResult, _last_error, _result, _value


def _all_known(deps: list[Job | None]) -> TypeGuard[list[Job]]:
    return all(d is not None for d in deps)


# --- I5 -------------------------------------------------------------------------------------------------


def _i5(r: InvariantResult, state: State, by_id: Mapping[int, LedgerEntry]) -> None:
    r.add(inv.i5_settlement_consistent(state, retried=frozenset()))
    workflows: dict[str, dict[str, Job]] = defaultdict(dict)
    for job in state.jobs.values():
        if job.workflow_id is not None and job.wf_name is not None:
            workflows[job.workflow_id][job.wf_name] = job
    dooms = releases_ignoring = 0
    for wf, members in sorted(workflows.items()):
        for name, job in sorted(members.items()):
            if not job.wf_deps:
                continue
            r.checks += 1
            deps = [members.get(d) for d in job.wf_deps]
            if not _all_known(deps) or any(not d.terminal for d in deps):
                continue
            ignore = set(job.wf_ignore or ())
            satisfied = all(d.state == "succeeded" or d.state in ignore for d in deps)
            driver_cancelled = bool(by_id.get(job.id) and by_id[job.id].detail.get("cancel"))
            if job.attempt > 0 and not satisfied:
                bad = [f"{d.wf_name}={d.state}" for d in deps if d.state != "succeeded" and d.state not in ignore]
                r.add(
                    [
                        inv.Violation(
                            "I5",
                            job.id,
                            f"member {name!r} of {wf!r} ran (attempt {job.attempt}) although "
                            f"its deps {bad} are not satisfied (ignore {sorted(ignore)})",
                        )
                    ]
                )
            if job.state == "cancelled" and job.attempt == 0 and not driver_cancelled:
                if satisfied:
                    r.add(
                        [
                            inv.Violation(
                                "I5",
                                job.id,
                                f"member {name!r} of {wf!r} was cancelled (doomed) although "
                                "every dep is satisfied and nobody cancelled it",
                            )
                        ]
                    )
                else:
                    dooms += 1
            if satisfied and ignore & {d.state for d in deps} and job.attempt > 0:
                releases_ignoring += 1
    r.notes.append(f"{dooms} doomed member(s) and {releases_ignoring} release(s) through an ignore flag checked")
    r.scenario.update(dooms=dooms, ignore_releases=releases_ignoring)
    r.exercised = dooms > 0 and releases_ignoring > 0


# --- I6 -------------------------------------------------------------------------------------------------


def expected_cron_slots(
    history: Sequence[Mapping[str, Any]], timeline: Timeline, min_cover: float = 5.0
) -> set[tuple[str, datetime]]:
    """Every-minute slots that were due while the cron was registered, not paused, and some worker was
    alive and running with the database up for at least `min_cover` seconds of the slot's minute."""

    registered: dict[str, float] = {}
    paused: dict[str, float] = {}
    for e in history:
        if e.get("type") == "cron_registered":
            registered[e["name"]] = float(e["t"])
        elif e.get("type") == "cron_paused":
            paused[e["name"]] = float(e["t"])
    slots = set()
    for name, t0 in registered.items():
        t_end = paused.get(name, timeline.end)
        s = (int(t0) // 60 + 1) * 60
        while s + 10 <= t_end:
            if timeline.covered(s, min(s + 60, t_end)) >= min_cover:
                slots.add((name, datetime.fromtimestamp(s, UTC)))
            s += 60
    return slots


def _i6(r: InvariantResult, state: State, history: Sequence[Mapping[str, Any]], timeline: Timeline) -> None:
    slots = expected_cron_slots(history, timeline)
    r.add(inv.i6_cron_slots_once(state, slots))
    r.checks += len(slots) + sum(1 for j in state.jobs.values() if j.cron_name is not None)
    r.notes.append(f"{len(slots)} cron slot(s) were due while a worker was alive")
    r.scenario["cron_slots"] = len(slots)
    r.exercised = bool(slots)


# --- I7 -------------------------------------------------------------------------------------------------


def _i7(r: InvariantResult, state: State, ledger: SoakLedger) -> None:
    r.add(inv.i7_unique_keys(state))
    groups: dict[int, list[UniqueAttempt]] = defaultdict(list)
    ever: dict[tuple[str, str | None], list[int]] = defaultdict(list)
    for a in ledger.unique:
        groups[a.grp].append(a)
        if a.outcome == "inserted" and a.job_id is not None and a.mode in ("always", "window"):
            job = state.jobs.get(a.job_id)
            ever[(a.mode, job.unique_key if job else a.key)].append(a.job_id)
    concurrent = 0
    for grp, attempts in sorted(groups.items()):
        r.checks += 1
        concurrent += len(attempts) > 1
        inserted = [a.job_id for a in attempts if a.outcome == "inserted"]
        if attempts[0].mode == "incomplete" and len(inserted) > 1:
            r.add(
                [
                    inv.Violation(
                        "I7",
                        inserted[1],
                        f"concurrent inserts of incomplete-mode key {attempts[0].key!r} "
                        f"(group {grp}) admitted {len(inserted)} live holders: {inserted}",
                    )
                ]
            )
    for (mode, key), ids in sorted(ever.items()):
        if len(ids) > 1:
            r.add([inv.Violation("I7", ids[1], f"{mode}-mode key {key!r} was admitted {len(ids)} times: {ids}")])
    r.checks += len(ever)
    r.notes.append(f"{len(groups)} unique-key insert group(s), {concurrent} with concurrent inserts")
    r.scenario["unique_groups"] = concurrent
    r.exercised = concurrent > 0


# --- I8 -------------------------------------------------------------------------------------------------


class _Kid(NamedTuple):
    id: int
    terminal: bool
    finished_at: datetime | None


def _i8(
    r: InvariantResult, state: State, by_id: Mapping[int, LedgerEntry], steps: StepsByJob, skew: float = 0.0
) -> None:
    r.add(inv.i8_children_as_declared(state))
    # each parent's children: what is read of them below, not their rows (a long run has thousands)
    kids: dict[int, list[_Kid]] = defaultdict(list)
    for j in state.jobs.values():
        if j.parent_id is not None:
            kids[j.parent_id].append(_Kid(j.id, j.terminal, j.finished_at))
    parents = 0
    for job in in_key_order(state.jobs):
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "parent":
            continue
        spawn = steps[job.id].get(f"{inv.SPAWN_STEP}kids")
        r.checks += 1
        if spawn is None:
            if job.state == "succeeded":
                r.add([inv.Violation("I8", job.id, "succeeded without a journaled $spawn:kids step")])
            continue
        parents += 1
        declared = _value(spawn)
        want = int(job.input.get("children", 0))
        if not isinstance(declared, list) or len(declared) != want:
            r.add([inv.Violation("I8", job.id, f"spawn declared {declared!r}, the parent asked for {want} children")])
            continue
        actual = sorted(c.id for c in kids[job.id])
        if actual != sorted(declared):
            r.add([inv.Violation("I8", job.id, f"has children {actual} but its spawn declared {declared}")])
        if job.state == "succeeded":
            result = _result(job)
            if isinstance(result, Mapping) and result.get("children") != declared:
                r.add(
                    [
                        inv.Violation(
                            "I8",
                            job.id,
                            f"result lists children {result.get('children')}, the journal declares {declared}",
                        )
                    ]
                )
            # finished_at comes from the finishing node's clock: allow the run's configured clock skew
            late = [
                c.id
                for c in kids[job.id]
                if not c.terminal
                or (
                    c.finished_at and job.finished_at and c.finished_at.timestamp() > job.finished_at.timestamp() + skew
                )
            ]
            if late:
                r.add([inv.Violation("I8", job.id, f"finished before its children {late} were terminal")])
    r.notes.append(f"{parents} parent(s) with a journaled spawn checked")
    r.scenario["spawns"] = parents
    r.exercised = parents > 0


# --- I9 -------------------------------------------------------------------------------------------------


def _i9(r: InvariantResult, state: State, by_id: Mapping[int, LedgerEntry], drained: bool) -> None:
    r.add(inv.i9_awaiters_eventually_run(state, quiescent=True))
    r.checks += sum(1 for j in state.jobs.values() if j.state == "awaiting") + len(state.signals)
    ran = 0
    for job in in_key_order(state.jobs):
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "awaiter":
            continue
        signal = state.signals.get((f"job:{job.id}", job.input.get("signal")))
        r.checks += 1
        if signal is None:
            continue
        if job.state == "succeeded":
            result = _result(job)
            if isinstance(result, Mapping) and result.get("payload") != signal.payload:
                r.add(
                    [
                        inv.Violation(
                            "I9",
                            job.id,
                            f"ran with payload {result.get('payload')!r}, the delivered signal "
                            f"holds {signal.payload!r}",
                        )
                    ]
                )
            else:
                ran += 1
        elif job.state == "cancelled" and (entry.detail.get("cancel") or entry.expected == "cancelled"):
            continue  # cancelled on purpose (e.g. a cancel requested before its signal was sent)
        elif not (job.state == "failed" and _last_error(job) == "lease_expired"):
            r.add(
                [
                    inv.Violation(
                        "I9",
                        job.id,
                        f"is {job.state} although its signal {signal.name!r} was delivered at "
                        f"{signal.inserted_at.isoformat()}: the awaiter never ran to completion",
                    )
                ]
            )
    r.notes.append(f"{ran} awaiter(s) with a delivered signal ran with its payload")
    r.exercised = ran > 0
