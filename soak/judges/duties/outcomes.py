"""The duties read from what the jobs became (soak/judges/duties/__init__.py has the table): P5 claims in
priority order, P6 inserts cron slots as their row says, P7 journals a durable sleep, P8 results carry
their attempt, P9 every job ends as its kind prescribes, P10 children deliver `$children`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from model.state import in_key_order
from soak.judges.duties.evidence import Evidence


def _claim_began(ev: Evidence, key: tuple[int, int]) -> float | None:
    """When the claim of attempt `key` began, by the claimer's clock: its first lease_until seen − ttl
    (a claim leases until its now + ttl; a renewal comes ttl/3 later, lease samples every 0.5 s). None when
    no lease sample saw the attempt."""
    if ev.attempts.node(key) is None:
        return None
    until = ev.attempts.first_until(key)
    return None if until is None else float(until) - ev.ttl


def p5_priority(r: Any, ev: Evidence, timeline: Any) -> int:
    """Returns how many batches had claims choosing between priorities (the scenario).

    Claims lock with SKIP LOCKED (§6): a due priority-0 row that another claim has locked is rightly
    passed over for a priority-5 one while that claim is in flight — a claim slowed by injected latency,
    a stall or a SIGSTOP holds its rows for seconds. So a priority-0 job that waited is a finding only
    when the claim that later took it began after the wait (its lease_until − ttl, with the clock skew
    allowed): it was free, and a claim took the priority-5 job over it (seed 2029's two-hour soak: a
    claim under 175 ms/chunk latency held two priority-0 rows from 605.2 to 608.0 while two others
    claimed around them). A claim frozen mid-transaction by a fault (SIGSTOP, a partitioned or stalled
    route, latency) can hold the rows and then abort — its rows go to a later claim — so a wait while such
    a fault began after the batch was due is not judged (seed 2029, batch 189: a node SIGSTOPped 0.4 s
    after the batch was due held two priority-0 rows until its idle-in-transaction timeout, 5 s)."""
    # the samples streamed in time order, only each batch's previous one held (issue 27: a two-hour soak's
    # priority samples, 60 rows each, were ~70 MiB grouped by batch); findings reported in batch order
    prev: dict[int, Mapping[str, Any]] = {}
    chose: set[int] = set()
    found: dict[int, str] = {}
    for _at, b in ev.series["priority_sample"].by_time():
        batch = b["batch"]
        a = prev.get(batch)
        prev[batch] = b
        if a is None:
            continue
        ta, tb = float(a["at"]), float(b["at"])
        due = float(a["due"])
        if ta < due + ev.max_skew + 0.3 or tb - ta < 0.2 or timeline.db_down_during(ta - 1, tb):
            continue
        ready_a = {i for i, p, s, att in a["rows"] if s == "ready" and att == 0}
        ready_b = {i for i, p, s, att in b["rows"] if s == "ready" and att == 0}
        prio = {i: p for i, p, s, att in a["rows"] + b["rows"]}
        running_a = {i for i, p, s, att in a["rows"] if s == "running"}
        if ready_a and running_a:
            chose.add(batch)
        r.checks += 1
        if batch in found:
            continue
        waiting_low = sorted(i for i in ready_a & ready_b if prio[i] == 0)
        ahead = sorted(i for i in running_a if prio[i] > 0)
        if waiting_low and ahead:
            # passed over while locked by a claim in flight (it began by tb): SKIP LOCKED, not a finding
            began = {i: _claim_began(ev, (i, 1)) for i in waiting_low}
            waiting_low = [i for i in waiting_low if (c := began[i]) is None or c > tb + ev.max_skew]
            if waiting_low and timeline.frozen_in_flight(due - ev.max_skew, ta, tb):
                waiting_low = []  # a claim frozen by a fault may hold them, then abort: unjudged
        if waiting_low and ahead:
            found[batch] = (
                f"P5 batch {batch}: jobs {ahead[:3]} of priority {prio[ahead[0]]} were running while jobs "
                f"{waiting_low[:3]} of priority 0, due and never claimed, stayed ready for {tb - ta:.2f}s: claims "
                "did not take the lowest priority value first"
            )
    for batch in sorted(found):
        r.add([found[batch]])
    return len(chose)


def p6_crons(r: Any, state: Any) -> int:
    n = 0
    for job in in_key_order(state.jobs):
        if job.cron_name is None:
            continue
        row = state.crons.get(job.cron_name)
        if row is None:
            continue
        n += 1
        r.checks += 1
        opts = row.opts if isinstance(row.opts, Mapping) else {}
        want_queue = opts.get("queue", "default")
        if job.queue != want_queue or job.worker != row.worker or job.input != row.input:
            r.add(
                [
                    f"P6 cron job {job.id} (slot {job.cron_slot}) is in queue {job.queue!r} kind {job.worker!r} input "
                    f"{job.input!r}; its belay_crons row {job.cron_name!r} says queue {want_queue!r} kind "
                    f"{row.worker!r} input {row.input!r}"
                ]
            )
    return n


def p7_sleeps(r: Any, state: Any, by_id: Mapping[int, Any], steps: Mapping[int, Mapping[str, Any]]) -> int:
    resumed = 0
    for job in in_key_order(state.jobs):
        entry = by_id.get(job.id)
        if entry is None or entry.kind != "sleeper":
            continue
        r.checks += 1
        resumes = job.attempt - 1 - len(job.errors)
        sleep_step = steps.get(job.id, {}).get("$sleep:nap")
        if resumes >= 1 and sleep_step is None and job.state != "cancelled":
            r.add(
                [
                    f"P7 sleeper job {job.id} resumed {resumes} time(s) (attempt {job.attempt}, {len(job.errors)} "
                    f"error(s)) but its journal has no `$sleep:nap` step: the sleep's wake time was never journaled, "
                    "so every resume sleeps again"
                ]
            )
        elif job.state == "succeeded":
            if sleep_step is None:
                r.add([f"P7 sleeper job {job.id} succeeded without a journaled `$sleep:nap` step"])
            else:
                resumed += resumes >= 1
    return resumed


def p8_attempts(r: Any, state: Any, by_id: Mapping[int, Any]) -> None:
    """Every successful soak job the driver inserted (the ledger), a cron inserted or a parent spawned."""
    from soak.judges.verdicts import _result

    for job in in_key_order(state.jobs):  # streamed: no set of every expected id (issue 27)
        if job.state != "succeeded" or job.queue != "soak":
            continue
        if job.cron_name is None and job.parent_id is None and job.id not in by_id:
            continue
        r.checks += 1
        result = _result(job)
        if not (isinstance(result, Mapping) and isinstance(result.get("attempt"), int)):
            r.add(
                [
                    f'P8 job {job.id} ({job.worker}) succeeded with result {result!r}: no "attempt" (PROTOCOL.md §2), '
                    "so its final ack cannot be attributed to an attempt"
                ]
            )


def p9_outcomes(r: Any, state: Any, ledger: Any) -> None:
    from soak.judges.verdicts import _last_error, _matches

    # A workflow's expectations assume the driver's cancel of its held member won the race with the release;
    # when it lost (the member ran first), the members' outcomes are I5's business, not a worker duty.
    lost_race = {
        e.detail.get("workflow")
        for e in ledger.entries
        if e.detail.get("cancel")
        and state.jobs.get(e.job_id) is not None
        and state.jobs[e.job_id].terminal
        and state.jobs[e.job_id].state != "cancelled"
    }
    if lost_race:
        r.notes.append(
            f"{len(lost_race)} workflow(s) whose held member ran before the driver's cancel reached it: "
            "their members' outcomes are left to I5"
        )
    for e in ledger.entries:
        job = state.jobs.get(e.job_id)
        if job is None or not job.terminal:
            continue  # I1's business
        if e.kind == "member" and e.detail.get("workflow") in lost_race:
            continue
        r.checks += 1
        if _matches(e.expected, job):
            continue
        if job.state == "failed" and _last_error(job) == "lease_expired":
            continue  # attempts used up by faults: I1/P2 judge the leases
        r.add(
            [
                f"P9 job {job.id} ({e.kind}, plan {e.detail.get('plan', '-')}) ended {job.state}"
                f"{' (' + str(_last_error(job)) + ')' if job.errors else ''}; PROTOCOL.md §3 prescribes {e.expected}"
            ]
        )


def p10_children_signal(r: Any, state: Any, ev: Evidence, timeline: Any) -> int:
    """From the lease samples: a parent parked on `$children` while all its (worker-run) children were
    terminal. The last child's terminal write wakes its parent in the same transaction (§7 step 2) and
    a park re-checks under the scope lock (§7), so a single consistent read must never see this."""
    parked: set[int] = set()
    flagged: set[int] = set()
    for e in ev.by_type["lease_sample"]:
        parked.update(e.get("parked", ()))
        at = float(e.get("at", e["t"]))
        for pid in e.get("stranded", ()):
            r.checks += 1
            if pid in flagged or timeline.db_down_during(at - 2, at + 1):
                continue
            flagged.add(pid)
            job = state.jobs.get(pid)
            kids = sorted(j.id for j in state.jobs.values() if j.parent_id == pid)
            r.add(
                [
                    f"P10 parent {pid} was seen parked on $children while all its children {kids} were terminal "
                    f"(+{at - ev.t0:.1f}s): the last child's terminal write did not wake it (count-gated signal? §11 "
                    f"R1) — it ended {job.state if job else 'missing'}, woken only by the reconciler if at all"
                ]
            )
    r.checks += len(parked)
    return len(parked)
