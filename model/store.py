"""The executable specification of the Belay wire contract (§4–§9): a pure, deterministic store.

    transition(state, op) -> (state', result)       ModelStore().apply(op) -> result

State (model/state.py): jobs, steps, events, signals, rate windows, queues, crons, meta, and the
bigserial counter. No I/O, no clock, no randomness: every operation carries `now` and every other
input. Each handler reads as the contract does: guards first, then the transition.

Operations and their sections:
  client (model/ops.py)      Enqueue §5.1–5.2 · EnqueueWorkflow §8.3 · DeliverSignal §8.1 · Steer ·
                             ClearSignal · Cancel §8.6 · Retry §8.6 · PutQueue · PutCron · reads
  worker (model/worker_ops)  Claim §6 · Renew §6 · Reclaim §6 · Ack/AckMany §7 · ParkAwait §7 · Sleep §9 ·
                             ReadStep/Preflight/RecordStep §8.2 · EmitEvent · Spawn §8.4 ·
                             AwaitChildren §8.4 · Reconcile §8.4 · FireCrons §8.5 · Prune §8.7
Shared machinery: `_insert` (§5.1's multi-row insert with ON CONFLICT DO NOTHING semantics over the
three unique indexes), `_deliver` (§8.1), `_park` (§7's park rule), `_after_terminal` (§7: settle,
then `$children` to parents, unconditionally).

Transactions are atomic here, so the lock order of the Postgres store is invisible; the race
explorer, not this module, models interleavings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from model import admission, ops
from model import worker_ops as w
from model.cron import cron_job, cron_plan
from model.envelope import decode, encode, encode_step_value
from model.jsonb import arrow_text
from model.queues import QueueOpts
from model.rows import INCOMPLETE, TERMINAL, CronRow, Event, Job, QueueRow, RateWindow, Signal, Step
from model.settle import Member, settle
from model.state import State, Tables
from model.workflow import check_graph

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PARKABLE = ("ready", "awaiting", "held", "paused")  # cancel makes these terminal at once (§8.6)


# ---------------------------------------------------------------------------------------------------
# §5.1 insert with the three unique indexes


def _conflicts(t: Tables, row: Job) -> bool:
    """Would a unique index (§3) reject this row? Both are live rows (the new one is ready/held)."""
    for other in t.jobs.values():
        if row.cron_name is not None and (other.cron_name, other.cron_slot) == (row.cron_name, row.cron_slot):
            return True
        if row.unique_key is None or other.unique_key != row.unique_key:
            continue
        if row.unique_mode == "incomplete" and other.unique_mode == "incomplete" and other.state in INCOMPLETE:
            return True
        if row.unique_mode in ("window", "always") and other.unique_mode in ("window", "always"):
            return True
    return False


def _same_index(job: Job, mode: str) -> bool:
    """Is `job` covered by the unique index a row of `mode` is checked against?"""
    if mode == "incomplete":
        return job.unique_mode == "incomplete" and job.state in INCOMPLETE
    return job.unique_mode in ("window", "always")


def _unique_holder(t: Tables, key: str, mode: str) -> int | None:
    """§5.2: the newest row holding `key` in the index a `mode` row conflicts with
    (SELECT id ... WHERE unique_key = $1 [and that index's predicate] ORDER BY id DESC LIMIT 1)."""
    return max((j.id for j in t.jobs.values() if j.unique_key == key and _same_index(j, mode)), default=None)


def _duplicate(t: Tables, row: Job) -> ops.Duplicate:
    if row.cron_name is not None:
        holder = next(
            (j.id for j in t.jobs.values() if (j.cron_name, j.cron_slot) == (row.cron_name, row.cron_slot)), None
        )
        if holder is not None:
            return ops.Duplicate(holder, "cron")
    # JobSpec defaults a keyed row's mode to "incomplete" (§5.2)
    holder = _unique_holder(t, row.unique_key, row.unique_mode or "incomplete") if row.unique_key is not None else None
    return ops.Duplicate(holder, "unique" if row.unique_key is not None else "cron")


def _new_row(job_id: int, spec: ops.JobSpec, now: datetime, state: str = "ready", **extra: Any) -> Job:
    """§5.1: attempt 0, errors [], spent 0, cancel_requested false, ready_at = now or scheduled."""
    key = spec.unique_key
    if spec.unique_mode == "window":
        assert key is not None and spec.unique_window is not None  # JobSpec requires both for window mode
        key = ops.window_key(key, now, spec.unique_window)
    fields = dict(
        id=job_id,
        queue=spec.queue,
        worker=spec.worker,
        input=spec.input,
        meta=dict(spec.meta),
        state=state,
        priority=spec.priority,
        attempt=0,
        max_attempts=spec.max_attempts,
        ready_at=spec.scheduled_at or now,
        inserted_at=now,
        started_at=None,
        finished_at=None,
        lease_until=None,
        leased_by=None,
        errors=[],
        result=None,
        cancel_requested=False,
        unique_key=key,
        unique_mode=spec.unique_mode,
        cron_name=spec.cron_name,
        cron_slot=spec.cron_slot,
        workflow_id=None,
        wf_name=None,
        wf_deps=None,
        wf_ignore=None,
        parent_id=spec.parent_id,
        await_scope=None,
        await_name=None,
        budget_usd_micros=spec.budget_usd_micros,
        budget_tokens=spec.budget_tokens,
        spent_usd_micros=0,
        spent_tokens=0,
    )
    fields.update(extra)
    return Job(**fields)


def _insert(t: Tables, rows: Sequence[Callable[..., Job]]) -> list[ops.Inserted | ops.Duplicate]:
    """One id per row from the sequence (skipped rows consume theirs); the statement inserts row by
    row, then duplicates are reported against what the whole statement left behind."""
    ids: Sequence[int]
    if t.id_supply is not None:  # ids a real sequence handed out (soak/judges/refine/)
        ids = [next(t.id_supply) for _ in rows]
        t.next_id = max([t.next_id, *(i + 1 for i in ids)])
    else:
        ids = range(t.next_id, t.next_id + len(rows))
        t.next_id += len(rows)
    skipped: dict[int, Job] = {}
    for job_id, make in zip(ids, rows, strict=True):
        row = make(job_id)
        if _conflicts(t, row):
            skipped[job_id] = row
        else:
            t.jobs[job_id] = row
    return [_duplicate(t, skipped[i]) if i in skipped else ops.Inserted(i) for i in ids]


def _holder(outcome: ops.Inserted | ops.Duplicate) -> int:
    """The row's id, or its holder's: in the model a skipped row's holder is always in the same snapshot."""
    assert outcome.id is not None
    return outcome.id


def _enqueue(t: Tables, op: ops.Enqueue) -> ops.Enqueued:
    return ops.Enqueued(tuple(_insert(t, [lambda i, s=s: _new_row(i, s, op.now) for s in op.jobs])))


def _enqueue_workflow(t: Tables, op: ops.EnqueueWorkflow) -> ops.WorkflowEnqueued:
    existing = [j.wf_name for j in t.jobs.values() if j.workflow_id == op.workflow_id and j.wf_name is not None]
    check_graph(op.workflow_id, op.members, existing)
    rows = [
        lambda i, m=m: _new_row(
            i,
            m.job,
            op.now,
            "held" if m.deps else "ready",
            workflow_id=op.workflow_id,
            wf_name=m.name,
            wf_deps=tuple(m.deps),
            wf_ignore=tuple(m.ignore),
        )
        for m in op.members
    ]
    outcomes = _insert(t, rows)
    released, doomed = _settle(t, op.workflow_id, op.now)
    _notify_parents(t, op.now, [(j, t.jobs[j].parent_id) for j in doomed])
    return ops.WorkflowEnqueued(
        op.workflow_id,
        tuple((m.name, _holder(o)) for m, o in zip(op.members, outcomes, strict=True)),
        tuple(sorted(released)),
        tuple(sorted(doomed)),
    )


# ---------------------------------------------------------------------------------------------------
# §8.3 settlement and §7's after-terminal steps


def _settle(t: Tables, workflow_id: str, now: datetime) -> tuple[list[int], list[int]]:
    """Apply the settlement fixpoint: releases → ready, dooms → cancelled + finished_at."""
    members = [(j.wf_name, j) for j in t.jobs.values() if j.workflow_id == workflow_id and j.wf_name is not None]
    verdict = settle(Member(name, j.state, j.wf_deps or (), j.wf_ignore or ()) for name, j in members)
    by_name = {name: j.id for name, j in members}
    released = sorted(by_name[n] for n in verdict.released)
    doomed = sorted(by_name[n] for n in verdict.doomed)
    for job_id in released:
        t.update(job_id, state="ready")
    for job_id in doomed:
        t.update(job_id, state="cancelled", finished_at=now)
    return released, doomed


def _after_terminal(t: Tables, now: datetime, terminal: Iterable[int]) -> None:
    """§7: settle each touched workflow, then `$children` to each parent — never count-gated (R1)."""
    terminal = list(terminal)
    children = [(j, t.jobs[j].parent_id) for j in terminal]
    for workflow_id in sorted({wf for j in terminal if (wf := t.jobs[j].workflow_id)}):
        _, doomed = _settle(t, workflow_id, now)
        children.extend((j, t.jobs[j].parent_id) for j in doomed)
    _notify_parents(t, now, children)


def _notify_parents(t: Tables, now: datetime, children: Iterable[tuple[int, int | None]]) -> None:
    by_parent: dict[int, list[int]] = {}
    for child, parent in children:
        if parent is not None:
            by_parent.setdefault(parent, []).append(child)
    for parent in sorted(by_parent):
        _deliver(t, now, f"job:{parent}", "$children", {"children": sorted(by_parent[parent])})


# ---------------------------------------------------------------------------------------------------
# §8.1 signals and §7's park rule


def _deliver(t: Tables, now: datetime, scope: str, name: str, payload: Any) -> list[int]:
    """Upsert the signal, then wake every job parked on (scope, name)."""
    t.signals[(scope, name)] = Signal(scope, name, payload, now)
    woken = sorted(
        j.id for j in t.jobs.values() if j.state == "awaiting" and (j.await_scope, j.await_name) == (scope, name)
    )
    for job_id in woken:
        t.update(job_id, state="ready", ready_at=now, await_scope=None, await_name=None)
    return woken


# --- a wait spends no attempt (one rule for the model, the Postgres store, the SDKs and the HTTP API) ---

PARK_ATTEMPT_CREDIT = 1  # what a park outcome adds to max_attempts: the resume's claim spends exactly one


def max_attempts_after_park(max_attempts: int) -> int:
    """A wait is not a failure: every park outcome — await a signal (also when §7's rule parks it as
    ready at once because the signal is already there), durable sleep, await children — raises
    max_attempts by PARK_ATTEMPT_CREDIT, as a snooze does, so the claim that resumes the job leaves
    its retry budget (max_attempts − attempt) as it was before the wait. A job that parks any number
    of times keeps every retry for crashes and raised errors. At the integer column's ceiling the
    budget stays there (a wait is never refused; 2^31−1 attempts is no budget anyway).

    The Postgres store applies the same arithmetic in SQL (impl/store/sql: park_awaiting, park_ready,
    sleep_until), bound to these constants; foreign SDKs apply it in their park UPDATE."""
    return min(max_attempts + PARK_ATTEMPT_CREDIT, ops.INT4_MAX)


def _park(t: Tables, now: datetime, job_id: int, scope: str, name: str, deadline: datetime | None) -> w.Parked:
    """§7: a signal row already present parks the job as ready instead of awaiting. Either way the
    park spends no attempt (`max_attempts_after_park`)."""
    budget = max_attempts_after_park(t.jobs[job_id].max_attempts)
    if (scope, name) in t.signals:
        t.update(
            job_id,
            state="ready",
            ready_at=now,
            await_scope=None,
            await_name=None,
            lease_until=None,
            leased_by=None,
            max_attempts=budget,
        )
        return w.Parked(job_id, "ready")
    t.update(
        job_id,
        state="awaiting",
        await_scope=scope,
        await_name=name,
        ready_at=deadline,
        lease_until=None,
        leased_by=None,
        max_attempts=budget,
    )
    return w.Parked(job_id, "awaiting")


def _running(t: Tables, job_id: int, attempt: int) -> Job | None:
    """The §7 fence: the row only if it is running the claimed attempt."""
    job = t.jobs.get(job_id)
    return job if job is not None and job.state == "running" and job.attempt == attempt else None


def _deliver_signal(t: Tables, op: ops.DeliverSignal) -> ops.Signalled:
    return ops.Signalled(tuple(_deliver(t, op.now, op.scope, op.name, op.payload)))


def _steer(t: Tables, op: ops.Steer) -> ops.Signalled | ops.NotFound:
    if op.job_id not in t.jobs:
        return ops.NotFound(op.job_id)
    return ops.Signalled(tuple(_deliver(t, op.now, f"job:{op.job_id}", "$steer", op.payload)))


def _clear_signal(t: Tables, op: ops.ClearSignal) -> ops.Cleared:
    return ops.Cleared(t.signals.pop((op.scope, op.name), None) is not None)


def _park_await(t: Tables, op: w.ParkAwait) -> w.Parked | w.Stale:
    if _running(t, op.job_id, op.attempt) is None:
        return w.Stale(op.job_id, op.attempt)
    return _park(t, op.now, op.job_id, op.scope, op.name, op.deadline)


# ---------------------------------------------------------------------------------------------------
# §8.6 cancel and retry


def _cancel(t: Tables, op: ops.Cancel) -> ops.CancelResult:
    job = t.jobs.get(op.job_id)
    if job is None:
        return ops.NotFound(op.job_id)
    if job.state in TERMINAL:
        return ops.NotCancellable(op.job_id, job.state)
    if job.state == "running":
        t.update(op.job_id, cancel_requested=True)
        return ops.CancelRequested(op.job_id)
    t.update(
        op.job_id,
        state="cancelled",
        finished_at=op.now,
        lease_until=None,
        leased_by=None,
        await_scope=None,
        await_name=None,
    )
    _after_terminal(t, op.now, [op.job_id])
    return ops.Cancelled(op.job_id)


def _retry(t: Tables, op: ops.Retry) -> ops.RetryResult:
    job = t.jobs.get(op.job_id)
    if job is None:
        return ops.NotFound(op.job_id)
    if job.state not in ("failed", "cancelled"):
        return ops.NotRetryable(op.job_id, job.state)
    if (
        job.unique_mode == "incomplete"
        and job.unique_key is not None
        and any(
            o.id != job.id
            and o.unique_key == job.unique_key
            and o.unique_mode == "incomplete"
            and o.state in INCOMPLETE
            for o in t.jobs.values()
        )
    ):
        return ops.RetryBlocked(op.job_id, _unique_holder(t, job.unique_key, "incomplete"))
    if job.wf_deps:
        names = {j.wf_name for j in t.jobs.values() if j.workflow_id == job.workflow_id}
        missing = tuple(d for d in job.wf_deps if d not in names)
        if missing:
            return ops.DepsGone(op.job_id, missing)
    # §8.6: dep-bearing members are re-held and settled; the operator's retry clears cancel_requested.
    t.update(
        op.job_id,
        state="held" if job.wf_deps else "ready",
        ready_at=op.now,
        cancel_requested=False,
        max_attempts=max(job.max_attempts, job.attempt + 1),
        lease_until=None,
        leased_by=None,
        finished_at=None,
    )
    if job.workflow_id is not None:
        _, doomed = _settle(t, job.workflow_id, op.now)
        _notify_parents(t, op.now, [(j, t.jobs[j].parent_id) for j in doomed])
    return ops.Retried(op.job_id, t.jobs[op.job_id].state)


# ---------------------------------------------------------------------------------------------------
# §6 claims and leases


def claimable(job: Job, now: datetime) -> bool:
    """§4/§6 predicate C: ready and due (NULL counts as due), or awaiting with its deadline due."""
    if job.state == "ready":
        return job.ready_at is None or job.ready_at <= now
    return job.state == "awaiting" and job.ready_at is not None and job.ready_at <= now


def claim_order(job: Job) -> tuple[Any, ...]:
    """ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC."""
    return (job.priority, job.ready_at is not None, job.ready_at or EPOCH, job.id)


def epoch_us(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1)


def _live(job: Job, queue: str, now: datetime) -> bool:
    return job.queue == queue and job.state == "running" and job.lease_until is not None and job.lease_until > now


def _partition_key(job: Job, opts: QueueOpts) -> str:
    assert opts.partition is not None  # only called for a partitioned queue
    document = job.input if opts.partition.field == "input" else job.meta
    return arrow_text(document, opts.partition.key) or ""


def _claim(t: Tables, op: w.Claim) -> w.Claimed:
    opts, now = op.opts, op.now
    take = op.demand
    if opts.global_limit is not None:
        live = sum(1 for j in t.jobs.values() if _live(j, op.queue, now))
        take = admission.global_admit(take, opts.global_limit, live)
    window = None
    if opts.rate is not None:
        bucket = opts.rate.bucket(op.queue)
        start = admission.window_start(epoch_us(now), opts.rate.period)
        window = (bucket, EPOCH + timedelta(seconds=start))
        previous = (bucket, EPOCH + timedelta(seconds=start - opts.rate.period))
        used = admission.rate_used(
            epoch_us(now),
            opts.rate.period,
            t.rate[window].count if window in t.rate else 0,
            t.rate[previous].count if previous in t.rate else 0,
        )
        take = admission.rate_admit(take, opts.rate.allowed, used, opts.rate.estimate)
    candidates = sorted((j for j in t.jobs.values() if j.queue == op.queue and claimable(j, now)), key=claim_order)
    if opts.partition is not None:
        running: dict[str, int] = {}
        for j in t.jobs.values():
            if _live(j, op.queue, now):
                key = _partition_key(j, opts)
                running[key] = running.get(key, 0) + 1
        chosen = admission.partition_take(
            [(_partition_key(j, opts), j) for j in candidates], running, opts.per_key_limit, take
        )
    else:
        chosen = candidates[:take]
    claimed = tuple(
        t.update(
            j.id,
            state="running",
            attempt=j.attempt + 1,
            lease_until=now + op.lease_ttl,
            leased_by=op.node,
            started_at=j.started_at or now,
        )
        for j in chosen
    )
    if window is not None and claimed:
        assert opts.rate is not None  # a window exists only for a rate-limited queue
        debit = admission.debit(len(claimed), opts.rate.estimate)
        current = t.rate.get(window)
        t.rate[window] = RateWindow(window[0], window[1], (current.count if current else 0) + debit)
    return w.Claimed(claimed)


def _renew(t: Tables, op: w.Renew) -> w.Renewed:
    kept = sorted(
        {i for i in op.job_ids if i in t.jobs and t.jobs[i].state == "running" and t.jobs[i].leased_by == op.node}
    )
    for job_id in kept:
        # A renewal only ever extends: one computed before a stall (its `now` older than the lease it
        # lands on, e.g. a claim of the job's next attempt by the same node) must not shorten the lease.
        current = t.jobs[job_id].lease_until
        t.update(job_id, lease_until=op.lease_until if current is None else max(current, op.lease_until))
    return w.Renewed(tuple(kept), tuple(sorted(set(op.job_ids) - set(kept))))


def _reclaim(t: Tables, op: w.Reclaim) -> w.Reclaimed:
    expired = sorted(
        (j for j in t.jobs.values() if j.state == "running" and j.lease_until is not None and j.lease_until <= op.now),
        key=lambda j: j.id,
    )[: op.limit]
    retried, failed = [], []
    for job in expired:
        errors = [*job.errors, w.error_entry(job.attempt, op.now, "lease_expired", None)]
        if job.attempt < job.max_attempts:
            t.update(
                job.id,
                state="ready",
                ready_at=op.backoff.retry_at(op.now, job.attempt),
                errors=errors,
                lease_until=None,
                leased_by=None,
            )
            retried.append(job.id)
        else:
            t.update(job.id, state="failed", finished_at=op.now, errors=errors, lease_until=None, leased_by=None)
            failed.append(job.id)
    _after_terminal(t, op.now, failed)
    return w.Reclaimed(tuple(retried), tuple(failed))


# ---------------------------------------------------------------------------------------------------
# §7 acks


def _ack(t: Tables, op: w.Ack) -> w.Acked | w.Stale:
    result = _ack_row(t, op)
    if isinstance(result, w.Acked) and result.state in TERMINAL:
        _after_terminal(t, op.now, [op.job_id])
    return result


def _ack_many(t: Tables, op: w.AckMany) -> w.AckedMany:
    results = tuple(_ack_row(t, a) for a in op.acks)
    _after_terminal(t, op.now, [r.job_id for r in results if isinstance(r, w.Acked) and r.state in TERMINAL])
    return w.AckedMany(results)


def _ack_claim(t: Tables, op: w.AckClaim) -> w.AckedClaimed:
    acked = _ack_many(t, op.acks)
    return w.AckedClaimed(acked, _claim(t, op.claim))


def _ack_row(t: Tables, op: w.Ack) -> w.Acked | w.Stale:
    """The fenced row write of one ack (the after-terminal steps are the caller's)."""
    job = _running(t, op.job_id, op.attempt)
    if job is None:
        return w.Stale(op.job_id, op.attempt)
    lease = dict(lease_until=None, leased_by=None)
    outcome = op.outcome
    if isinstance(outcome, w.Succeed):
        job = t.update(job.id, state="succeeded", result=encode(outcome.value), finished_at=op.now, **lease)
    elif isinstance(outcome, w.Fail):
        errors = [*job.errors, w.error_entry(job.attempt, op.now, outcome.error, outcome.detail)]
        if outcome.retry_at is not None and job.attempt < job.max_attempts:
            job = t.update(job.id, state="ready", ready_at=outcome.retry_at, errors=errors, **lease)
        else:
            job = t.update(job.id, state="failed", finished_at=op.now, errors=errors, **lease)
    elif isinstance(outcome, w.CancelSelf):
        job = t.update(job.id, state="cancelled", finished_at=op.now, **lease)
    else:  # Snooze: spends no attempt
        if job.max_attempts + 1 > ops.INT4_MAX:
            raise OverflowError(f"job {job.id}: max_attempts {job.max_attempts} + 1 overflows the integer column")
        job = t.update(job.id, state="ready", ready_at=outcome.until, max_attempts=job.max_attempts + 1, **lease)
    return w.Acked(job.id, job.state)


def _next_step_seq(t: Tables, job_id: int) -> int:
    return max((s.seq for (j, _), s in t.steps.items() if j == job_id), default=0) + 1


def _journal(t: Tables, now: datetime, job_id: int, name: str, value: bytes, usd: int = 0, tokens: int = 0) -> bool:
    """INSERT INTO belay_steps ... ON CONFLICT (job_id, name) DO NOTHING; True when inserted."""
    if (job_id, name) in t.steps:
        return False
    t.steps[(job_id, name)] = Step(job_id, _next_step_seq(t, job_id), name, value, usd, tokens, now)
    return True


def _sleep(t: Tables, op: w.Sleep) -> w.Slept | w.Stale:
    if _running(t, op.job_id, op.attempt) is None:
        return w.Stale(op.job_id, op.attempt)
    name = f"$sleep:{op.name}"
    _journal(t, op.now, op.job_id, name, encode(op.spelled if op.spelled is not None else op.until.isoformat()))
    until = w.wake_time(decode(t.steps[(op.job_id, name)].value))  # the journaled instant, any ISO-8601 spelling
    t.update(
        op.job_id,
        state="ready",
        ready_at=until,
        lease_until=None,
        leased_by=None,
        max_attempts=max_attempts_after_park(t.jobs[op.job_id].max_attempts),
    )
    return w.Slept(op.job_id, until)


# ---------------------------------------------------------------------------------------------------
# §8.2 steps and budgets, events


def over_budget(spent_usd: int, spent_tokens: int, budget_usd: int | None, budget_tokens: int | None) -> bool:
    """§8.2: durable spend exceeds a budget column (strictly; a null budget is no cap)."""
    return (budget_usd is not None and spent_usd > budget_usd) or (
        budget_tokens is not None and spent_tokens > budget_tokens
    )


def _over_budget(job: Job) -> bool:
    return over_budget(job.spent_usd_micros, job.spent_tokens, job.budget_usd_micros, job.budget_tokens)


def _read_step(t: Tables, op: w.ReadStep) -> w.StepHit | w.StepMiss:
    step = t.steps.get((op.job_id, op.name))
    return w.StepHit(step.value) if step is not None else w.StepMiss()


def _preflight(t: Tables, op: w.Preflight) -> w.BudgetOk | w.OverBudget | w.JobGone:
    job = t.jobs.get(op.job_id)
    if job is None:
        return w.JobGone(op.job_id)
    if _over_budget(job):
        return w.OverBudget(job.spent_usd_micros, job.spent_tokens, job.cancel_requested)
    return w.BudgetOk(job.cancel_requested)


def _record_step(t: Tables, op: w.RecordStep) -> w.Recorded | w.JobGone:
    job = t.jobs.get(op.job_id)
    if job is None:
        return w.JobGone(op.job_id)
    inserted = _journal(t, op.now, op.job_id, op.name, encode_step_value(op.value), op.usd_micros, op.tokens)
    if inserted:  # spend follows the journal: a duplicate execution's costs are not recorded twice
        if max(job.spent_usd_micros + op.usd_micros, job.spent_tokens + op.tokens) > ops.INT8_MAX:
            raise OverflowError(f"job {op.job_id}: spend overflows the bigint columns")
        job = t.update(
            op.job_id, spent_usd_micros=job.spent_usd_micros + op.usd_micros, spent_tokens=job.spent_tokens + op.tokens
        )
    value = t.steps[(op.job_id, op.name)].value
    return w.Recorded(inserted, value, job.spent_usd_micros, job.spent_tokens, _over_budget(job))


def _emit(t: Tables, op: w.EmitEvent) -> w.Emitted | w.JobGone:
    if op.job_id not in t.jobs:
        return w.JobGone(op.job_id)
    if op.once:  # a retried emit whose earlier try committed: its event, not a second one
        mine = [
            s
            for (j, s), e in t.events.items()
            if j == op.job_id and e.inserted_at == op.now and e.payload == op.payload
        ]
        if mine:
            return w.Emitted(min(mine))
    last = max((s for (j, s) in t.events if j == op.job_id), default=None)
    seq = (0 if last is None else last) + 1
    if op.seq is not None:  # the SDK's own numbering: append-only, so above every earlier event's
        if last is not None and op.seq <= last:
            raise ops.InvalidInput(f"event seq {op.seq} of job {op.job_id} is not above the stream's last, {last}")
        seq = op.seq
    t.events[(op.job_id, seq)] = Event(op.job_id, seq, op.payload, op.now)
    return w.Emitted(seq)


# ---------------------------------------------------------------------------------------------------
# §8.4 children


def spawn_key(parent_id: int, name: str, index: int) -> str:
    return f"$spawn:{parent_id}:{name}:{index}"


def _spawn(t: Tables, op: w.Spawn) -> w.Spawned | w.JobGone:
    if op.job_id not in t.jobs:
        return w.JobGone(op.job_id)
    step = t.steps.get((op.job_id, f"$spawn:{op.name}"))
    if step is not None:
        return w.Spawned(tuple(decode(step.value)), True)
    keys = [spawn_key(op.job_id, op.name, i) for i in range(len(op.children))]
    rows = [
        lambda i, c=c, k=k: _new_row(i, replace(c, unique_key=k, unique_mode="always", parent_id=op.job_id), op.now)
        for c, k in zip(op.children, keys, strict=True)
    ]
    _insert(t, rows)
    ids = [_unique_holder(t, k, "always") for k in keys]  # rebuilt from the keys, never from the insert's ids
    assert None not in ids  # each key was just inserted, or was already held
    value: list[Any] = list(ids)
    if op.spelled is not None and w.child_id_list(op.spelled) == ids:
        value = list(op.spelled)
    _journal(t, op.now, op.job_id, f"$spawn:{op.name}", encode(value))
    return w.Spawned(tuple(i for i in ids if i is not None), False)


def _spawn_children(t: Tables, op: w.SpawnChildren) -> w.Spawned | w.JobGone:
    """§8.4's insert half without the journal (an SDK may journal in a later transaction)."""
    if op.job_id not in t.jobs:
        return w.JobGone(op.job_id)
    step = t.steps.get((op.job_id, f"$spawn:{op.name}"))
    if step is not None:  # memoized: the journaled spawn re-runs nothing
        return w.Spawned(tuple(decode(step.value)), True)
    keys = [spawn_key(op.job_id, op.name, i) for i, _ in op.children]
    rows = [
        lambda i, c=c, k=k: _new_row(i, replace(c, unique_key=k, unique_mode="always", parent_id=op.job_id), op.now)
        for (_, c), k in zip(op.children, keys, strict=True)
    ]
    _insert(t, rows)
    ids = [_unique_holder(t, k, "always") for k in keys]
    return w.Spawned(tuple(i for i in ids if i is not None), False)


def _children_terminal(t: Tables, parent_id: int) -> tuple[bool, list[int]]:
    children = [j for j in t.jobs.values() if j.parent_id == parent_id]
    return all(j.state in TERMINAL for j in children), sorted(j.id for j in children)


def _await_children(t: Tables, op: w.AwaitChildren) -> w.ChildrenDone | w.Parked | w.Stale:
    if _running(t, op.job_id, op.attempt) is None:
        return w.Stale(op.job_id, op.attempt)
    done, ids = _children_terminal(t, op.job_id)
    if done:
        return w.ChildrenDone(tuple(ids))
    scope = f"job:{op.job_id}"
    t.signals.pop((scope, "$children"), None)  # the stale signal from earlier completions
    done, ids = _children_terminal(t, op.job_id)  # re-verify once more
    if done:
        return w.ChildrenDone(tuple(ids))
    return _park(t, op.now, op.job_id, scope, "$children", op.deadline)


def _reconcile(t: Tables, op: w.Reconcile) -> w.Reconciled:
    """R2 backstop: a parent awaiting `$children` whose children all exist and are terminal runs."""
    woken = []
    for job in sorted(t.jobs.values(), key=lambda j: j.id):
        if job.state != "awaiting" or job.await_name != "$children" or job.await_scope != f"job:{job.id}":
            continue
        done, ids = _children_terminal(t, job.id)
        if done and ids:
            t.update(job.id, state="ready", ready_at=op.now, await_scope=None, await_name=None)
            woken.append(job.id)
    return w.Reconciled(tuple(woken))


# ---------------------------------------------------------------------------------------------------
# §8.5 cron and §8.7 retention


def _fire_crons(t: Tables, op: w.FireCrons) -> w.CronsFired:
    plan = cron_plan(op.static, t.crons.values(), op.since, op.now, op.queues)
    if op.slots is not None:
        plan = [(c, slot) for c, slot in plan if (c.name, slot) in op.slots]
    specs = [cron_job(c, slot) for c, slot in plan]
    outcomes = _insert(t, [lambda i, s=s: _new_row(i, s, op.now) for s in specs]) if specs else []
    return w.CronsFired(
        tuple(
            w.Fired(c.name, slot, _holder(o), isinstance(o, ops.Inserted))
            for (c, slot), o in zip(plan, outcomes, strict=True)
        )
    )


def _prune(t: Tables, op: w.Prune) -> w.Pruned:
    live_workflows = {j.workflow_id for j in t.jobs.values() if j.workflow_id and j.state not in TERMINAL}

    def expired(job: Job) -> bool:
        """Past its state's retention — and not a member of a workflow that is still settling: a held
        dependent must still find its deps (a missing dep could never be satisfied)."""
        keep = op.retention.get(job.state)
        return (
            job.state in TERMINAL
            and keep is not None
            and job.finished_at is not None
            and job.finished_at < op.now - timedelta(seconds=keep)
            and job.workflow_id not in live_workflows
        )

    doomed = sorted(j.id for j in t.jobs.values() if expired(j))[: op.limit]
    for job_id in doomed:
        del t.jobs[job_id]
    gone = set(doomed)
    for step_key in [k for k in t.steps if k[0] in gone]:
        del t.steps[step_key]
    for event_key in [k for k in t.events if k[0] in gone]:
        del t.events[event_key]
    signals = 0
    if op.signal_ttl is not None:
        old = [k for k, s in t.signals.items() if s.inserted_at < op.now - timedelta(seconds=op.signal_ttl)]
        for signal_key in old:
            del t.signals[signal_key]
        signals = len(old)
    old_rate = [k for k, r in t.rate.items() if r.window_start < op.now - timedelta(days=1)]
    for rate_key in old_rate:
        del t.rate[rate_key]
    return w.Pruned(tuple(doomed), signals, len(old_rate))


# ---------------------------------------------------------------------------------------------------
# runtime CRUD and reads


def _put_queue(t: Tables, op: ops.PutQueue) -> ops.QueuePut:
    t.queues[op.name] = QueueRow(op.name, dict(op.opts), op.now)
    return ops.QueuePut(op.name)


def _put_cron(t: Tables, op: ops.PutCron) -> ops.CronPut:
    t.crons[op.name] = CronRow(op.name, op.expression, op.worker, op.input, dict(op.opts), op.paused, op.now)
    return ops.CronPut(op.name)


def _check_compat(t: Tables, op: ops.CheckCompat) -> ops.Compatible:
    return ops.check_versions(t.version, t.contract_major, known_major=op.known_major, min_version=op.min_version)


def _read_job(t: Tables, op: ops.ReadJob) -> Job | ops.NotFound:
    return t.jobs.get(op.job_id) or ops.NotFound(op.job_id)


def _read_workflow(t: Tables, op: ops.ReadWorkflow) -> tuple[Job, ...]:
    return tuple(sorted((j for j in t.jobs.values() if j.workflow_id == op.workflow_id), key=lambda j: j.id))


def _read_steps(t: Tables, op: ops.ReadSteps) -> tuple[Step, ...]:
    return tuple(sorted((s for (j, _), s in t.steps.items() if j == op.job_id), key=lambda s: s.seq))


def _read_events(t: Tables, op: ops.ReadEvents) -> tuple[Event, ...]:
    return tuple(sorted((e for (j, _), e in t.events.items() if j == op.job_id), key=lambda e: e.seq))


def _read_signals(t: Tables, op: ops.ReadSignals) -> tuple[Signal, ...]:
    return tuple(
        sorted((s for (scope, _), s in t.signals.items() if scope in op.scopes), key=lambda s: (s.scope, s.name))
    )


HANDLERS: dict[type, Callable[[Tables, Any], Any]] = {
    ops.CheckCompat: _check_compat,
    ops.Enqueue: _enqueue,
    ops.EnqueueWorkflow: _enqueue_workflow,
    ops.DeliverSignal: _deliver_signal,
    ops.Steer: _steer,
    ops.ClearSignal: _clear_signal,
    ops.Cancel: _cancel,
    ops.Retry: _retry,
    ops.PutQueue: _put_queue,
    ops.PutCron: _put_cron,
    ops.ReadJob: _read_job,
    ops.ReadWorkflow: _read_workflow,
    ops.ReadSteps: _read_steps,
    ops.ReadEvents: _read_events,
    ops.ReadSignals: _read_signals,
    w.Claim: _claim,
    w.Renew: _renew,
    w.Reclaim: _reclaim,
    w.Ack: _ack,
    w.AckMany: _ack_many,
    w.AckClaim: _ack_claim,
    w.ParkAwait: _park_await,
    w.Sleep: _sleep,
    w.ReadStep: _read_step,
    w.Preflight: _preflight,
    w.RecordStep: _record_step,
    w.EmitEvent: _emit,
    w.Spawn: _spawn,
    w.SpawnChildren: _spawn_children,
    w.AwaitChildren: _await_children,
    w.Reconcile: _reconcile,
    w.FireCrons: _fire_crons,
    w.Prune: _prune,
}


def transition(state: State, op: Any) -> tuple[State, Any]:
    """Apply one operation: the new state and the result. Invalid input raises and changes nothing."""
    handler = HANDLERS.get(type(op))
    if handler is None:
        raise TypeError(f"the model does not implement {type(op).__name__}")
    tables = Tables.of(state)
    result = handler(tables, op)
    return tables.freeze(), result


class ModelStore:
    """The model behind the same `apply(op)` as `impl.store.PgStore`."""

    supports_transactional_enqueue = False  # it has no caller transactions to join: it says so loudly

    def __init__(self, state: State | None = None) -> None:
        self.state = state or State()
        self.history: list[tuple[Any, Any]] = []  # (op, result), for history-based invariants

    def apply(self, op: Any, conn: Any = None) -> Any:
        if conn is not None:
            raise ops.InvalidInput("the model store cannot join a caller's transaction (no transactional enqueue)")
        self.state, result = transition(self.state, op)
        self.history.append((op, result))
        return result
