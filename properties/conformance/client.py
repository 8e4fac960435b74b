"""Client conformance (contract §10 checklist): compatibility, enqueue and uniqueness (§5), workflow
enqueue (§8.3), reads, signals and steering (§8.1), cancel and retry (§8.6), input validation and
the transactional-enqueue capability."""

from __future__ import annotations

from datetime import timedelta

from model import ops
from model import worker_ops as w
from model.ops import Duplicate, Inserted, InvalidInput
from model.queues import QueueOpts
from model.rows import Signal
from properties.conformance.core import NotApplicable, case, require
from properties.conformance.support import (
    MIN,
    S,
    ack,
    cancel,
    check,
    claim,
    claim_job,
    enqueue,
    expect,
    expect_raises,
    fail,
    fields,
    finish,
    gone,
    insert,
    member,
    park,
    read,
    signal,
    signals,
    spec,
    start,
    state,
    succeed,
    wf_states,
    workflow,
)

# ---------------------------------------------------------------------------------------------
# §1 compatibility


@case("§1", "the schema-version check accepts contract major 1 at migration 3 or newer")
def _(store, now):
    result = store.apply(ops.CheckCompat())
    check(isinstance(result, ops.Compatible), f"CheckCompat() returned {result!r}, not Compatible")
    expect(result.contract_major, 1, "belay_meta.contract_major")
    check(result.version >= 3, f"belay_meta.version must be at least 3, got {result.version}")


@case("§1", "the schema-version check refuses a newer contract major and an older migration")
def _(store, now):
    expect_raises(
        ops.IncompatibleSchema,
        lambda: store.apply(ops.CheckCompat(known_major=0)),
        "an SDK knowing only contract major 0 must refuse a major-1 database",
    )
    expect_raises(
        ops.IncompatibleSchema,
        lambda: store.apply(ops.CheckCompat(min_version=10**6)),
        "an SDK needing migration 1000000 must refuse an older database",
    )


# ---------------------------------------------------------------------------------------------
# §5.1 insert


@case("§5.1", "a single enqueue inserts a ready row with the contract's defaults")
def _(store, now):
    job_id = insert(store, now, "send_email", "mail", input={"to": "a@example.com"}, meta={"trace": "t1"}, priority=3)
    job = read(store, job_id)
    expect(
        fields(
            job,
            "queue",
            "worker",
            "input",
            "meta",
            "state",
            "priority",
            "attempt",
            "max_attempts",
            "ready_at",
            "inserted_at",
            "started_at",
            "finished_at",
            "lease_until",
            "leased_by",
            "errors",
            "result",
            "cancel_requested",
            "spent_usd_micros",
            "spent_tokens",
            "workflow_id",
            "parent_id",
            "await_scope",
            "await_name",
            "unique_key",
            "cron_name",
        ),
        dict(
            queue="mail",
            worker="send_email",
            input={"to": "a@example.com"},
            meta={"trace": "t1"},
            state="ready",
            priority=3,
            attempt=0,
            max_attempts=ops.DEFAULT_MAX_ATTEMPTS,
            ready_at=now,
            inserted_at=now,
            started_at=None,
            finished_at=None,
            lease_until=None,
            leased_by=None,
            errors=[],
            result=None,
            cancel_requested=False,
            spent_usd_micros=0,
            spent_tokens=0,
            workflow_id=None,
            parent_id=None,
            await_scope=None,
            await_name=None,
            unique_key=None,
            cron_name=None,
        ),
        "a fresh row (§5.1: attempt 0, errors [], spent 0, cancel_requested false, ready_at = now)",
    )


@case("§5.1", "a batch enqueue reports one outcome per job in order with ascending ids")
def _(store, now):
    result = enqueue(store, now, spec("a"), spec("b"), spec("c"))
    check(all(isinstance(o, Inserted) for o in result.outcomes), f"every row is new: {result!r}")
    ids = [o.id for o in result.outcomes]
    expect(ids, sorted(ids), "ids follow input order")
    expect(len(set(ids)), 3, "three distinct ids")
    expect([read(store, i).worker for i in ids], ["a", "b", "c"], "each outcome names its own row")


@case("§5.1", "a scheduled job is ready at its scheduled time and not before")
def _(store, now):
    later = now + timedelta(hours=1)
    job_id = insert(store, now, scheduled_at=later, budget_usd_micros=7, budget_tokens=8)
    expect(
        fields(read(store, job_id), "state", "ready_at", "inserted_at", "budget_usd_micros", "budget_tokens"),
        dict(state="ready", ready_at=later, inserted_at=now, budget_usd_micros=7, budget_tokens=8),
        "a scheduled job is ready with a future ready_at (no staging state)",
    )


@case("§5.1", "ids are consumed by skipped rows")
def _(store, now):
    first = insert(store, now, unique_key="k")
    result = enqueue(store, now, spec(unique_key="k"), spec("other"))
    expect(
        result.outcomes,
        (Duplicate(first, "unique"), Inserted(first + 2)),
        "the duplicate consumed id first+1 from the sequence, so the next row gets first+2",
    )


# ---------------------------------------------------------------------------------------------
# §5.2 uniqueness


@case("§5.2", "an incomplete-mode key admits one live holder and reports it as the duplicate")
def _(store, now):
    holder = insert(store, now, unique_key="report")
    expect(read(store, holder).unique_mode, "incomplete", "a key without a mode defaults to incomplete")
    again = enqueue(store, now + S, spec(unique_key="report"))
    expect(again.outcomes, (Duplicate(holder, "unique"),), "a second live holder is refused")
    claim_job(store, now + S, holder)
    again = enqueue(store, now + 2 * S, spec(unique_key="report"))
    expect(again.outcomes, (Duplicate(holder, "unique"),), "a running holder is still live")


@case("§5.2", "an incomplete-mode key is free again once its holder is terminal")
def _(store, now):
    holder = insert(store, now, unique_key="report")
    fail(store, now + S, holder)
    (outcome,) = enqueue(store, now + 2 * S, spec(unique_key="report")).outcomes
    check(isinstance(outcome, Inserted), f"a failed holder no longer holds the key; got {outcome!r}")


@case("§5.2", "a window-mode key embeds its bucket and dedupes within it regardless of outcome")
def _(store, now):
    holder = insert(store, now, unique_key="daily", unique_mode="window", unique_window=3600)
    bucket = ops.window_bucket(now, 3600)
    expect(read(store, holder).unique_key, f"daily@{bucket}", "the stored key is <key>@<floor(epoch/window)>")
    succeed(store, now + S, holder)
    same = enqueue(store, now + 30 * MIN, spec(unique_key="daily", unique_mode="window", unique_window=3600))
    expect(same.outcomes, (Duplicate(holder, "unique"),), "a succeeded holder still dedupes its window")
    nxt = enqueue(store, now + 60 * MIN, spec(unique_key="daily", unique_mode="window", unique_window=3600))
    check(isinstance(nxt.outcomes[0], Inserted), f"the next window's bucket is free; got {nxt.outcomes!r}")
    expect(read(store, nxt.outcomes[0].id).unique_key, f"daily@{bucket + 1}", "the next bucket's key")


@case("§5.2", "an always-mode key dedupes forever, even after its holder failed")
def _(store, now):
    holder = insert(store, now, unique_key="once", unique_mode="always")
    fail(store, now + S, holder)
    again = enqueue(store, now + timedelta(days=30), spec(unique_key="once", unique_mode="always"))
    expect(again.outcomes, (Duplicate(holder, "unique"),), "always-mode keys are never reused")


@case("§5.2", "a key repeated inside one batch is reported against the row inserted earlier")
def _(store, now):
    result = enqueue(store, now, spec(unique_key="k"), spec(unique_key="k"), spec(unique_key="j"))
    first = result.outcomes[0]
    check(isinstance(first, Inserted), f"the first row is inserted; got {result.outcomes!r}")
    expect(
        result.outcomes,
        (first, Duplicate(first.id, "unique"), Inserted(first.id + 2)),
        "one INSERT ... ON CONFLICT DO NOTHING: the repeat is skipped and names the first row",
    )


@case("§8.5", "a cron slot is inserted once and a second insert reports the slot's owner")
def _(store, now):
    slot = now.replace(second=0, microsecond=0)
    owner = insert(store, now, "tick", cron_name="tick", cron_slot=slot)
    again = enqueue(store, now + S, spec("tick", cron_name="tick", cron_slot=slot))
    expect(again.outcomes, (Duplicate(owner, "cron"),), "the (cron_name, cron_slot) index dedupes the slot")
    nxt = enqueue(store, now + S, spec("tick", cron_name="tick", cron_slot=slot + MIN))
    check(isinstance(nxt.outcomes[0], Inserted), f"the next slot is its own row; got {nxt.outcomes!r}")


# ---------------------------------------------------------------------------------------------
# §8.3 workflow enqueue


@case("§8.3", "a workflow enqueue holds dep-bearing members and readies its roots")
def _(store, now):
    result = store.apply(
        ops.EnqueueWorkflow(
            now, "wf", (member("fetch"), member("parse", "fetch"), member("sum", "fetch", "parse", ignore=("failed",)))
        )
    )
    check(isinstance(result, ops.WorkflowEnqueued), f"EnqueueWorkflow returned {result!r}")
    expect([n for n, _ in result.ids], ["fetch", "parse", "sum"], "ids are reported in member order")
    expect((result.released, result.doomed), ((), ()), "nothing settles at insert with no terminal dep")
    expect(wf_states(store, "wf"), {"fetch": "ready", "parse": "held", "sum": "held"}, "member states")
    job = read(store, dict(result.ids)["sum"])
    expect(
        fields(job, "workflow_id", "wf_name", "wf_deps", "wf_ignore"),
        dict(workflow_id="wf", wf_name="sum", wf_deps=("fetch", "parse"), wf_ignore=("failed",)),
        "workflow columns of a member",
    )
    expect(
        [j.id for j in store.apply(ops.ReadWorkflow("wf"))],
        sorted(i for _, i in result.ids),
        "ReadWorkflow returns the members in id order",
    )
    expect(tuple(store.apply(ops.ReadWorkflow("nope"))), (), "an unknown workflow reads empty")


@case("§8.3", "a workflow with a dependency cycle is refused and nothing is inserted")
def _(store, now):
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.EnqueueWorkflow(now, "wf", (member("a", "c"), member("b", "a"), member("c", "b")))),
        "a cycle a -> b -> c -> a must be refused",
    )
    expect(tuple(store.apply(ops.ReadWorkflow("wf"))), (), "a refused workflow inserts no member")


@case("§8.3", "a workflow dep naming no member is refused and nothing is inserted")
def _(store, now):
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.EnqueueWorkflow(now, "wf", (member("a"), member("b", "a", "ghost")))),
        "a dangling dep must be refused",
    )
    expect(tuple(store.apply(ops.ReadWorkflow("wf"))), (), "a refused workflow inserts no member")


@case("§8.3", "a member name already stored is refused and the rest of the call is not inserted")
def _(store, now):
    workflow(store, now, "wf", member("a"))
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.EnqueueWorkflow(now, "wf", (member("b", "a"), member("a")))),
        "a second member named 'a' must be refused",
    )
    expect(wf_states(store, "wf"), {"a": "ready"}, "only the earlier member exists")


@case("§8.3", "settlement runs at insert: a member on a failed dep is doomed and a tolerant one released")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"))
    fail(store, now + S, ids["a"])
    result = store.apply(
        ops.EnqueueWorkflow(
            now + 2 * S, "wf", (member("b", "a"), member("c", "a", ignore=("failed",)), member("d", "b"))
        )
    )
    later = dict(result.ids)
    expect(
        (result.released, result.doomed),
        ((later["c"],), tuple(sorted((later["b"], later["d"])))),
        "released and doomed ids reported by the enqueue (doom cascades to d)",
    )
    expect(
        wf_states(store, "wf"),
        {"a": "failed", "b": "cancelled", "c": "ready", "d": "cancelled"},
        "states after settlement at insert",
    )
    expect(read(store, later["b"]).finished_at, now + 2 * S, "a doomed member is finished at the settling now")


@case("§8.3", "a member whose deps already succeeded is released at insert")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"))
    succeed(store, now + S, ids["a"])
    result = store.apply(ops.EnqueueWorkflow(now + 2 * S, "wf", (member("b", "a"),)))
    expect(result.released, (dict(result.ids)["b"],), "released ids")
    expect(
        fields(read(store, dict(result.ids)["b"]), "state", "ready_at"),
        dict(state="ready", ready_at=now + 2 * S),
        "the released member is ready from its insert time",
    )


# ---------------------------------------------------------------------------------------------
# reads


@case("§10", "reading an unknown job reports NotFound and its steps and events read empty")
def _(store, now):
    job_id = insert(store, now)
    expect(store.apply(ops.ReadJob(job_id + 1000)), ops.NotFound(job_id + 1000), "ReadJob of a missing id")
    expect(tuple(store.apply(ops.ReadSteps(job_id + 1000))), (), "ReadSteps of a missing id")
    expect(tuple(store.apply(ops.ReadEvents(job_id))), (), "ReadEvents of a job without events")
    expect(tuple(store.apply(ops.ReadSteps(job_id))), (), "ReadSteps of a job without steps")


# ---------------------------------------------------------------------------------------------
# §8.1 signals, steering


@case("§8.1", "a signal keeps the latest payload and persists until cleared")
def _(store, now):
    expect(
        store.apply(ops.DeliverSignal(now, "orders", "paid", {"n": 1})),
        ops.Signalled(()),
        "a signal nobody awaits wakes nobody",
    )
    store.apply(ops.DeliverSignal(now + S, "orders", "paid", {"n": 2}))
    expect(signals(store, "orders"), (Signal("orders", "paid", {"n": 2}, now + S),), "upsert-latest")
    expect(store.apply(ops.ClearSignal("orders", "paid")), ops.Cleared(True), "clearing an existing signal")
    expect(signals(store, "orders"), (), "a cleared signal is gone")
    expect(store.apply(ops.ClearSignal("orders", "paid")), ops.Cleared(False), "clearing a missing signal")


@case("§8.1", "reading signals returns only the requested scopes, ordered by scope and name")
def _(store, now):
    for scope, name in [
        ("s2", "b"),
        ("s1", "z"),
        ("s1", "a"),
        ("s3", "x"),
        ("s1", "B"),
        ("s1", "$steer"),
        ("s1", "_x"),
        ("S2", "a"),
    ]:
        store.apply(ops.DeliverSignal(now, scope, name, [scope, name]))
    # Code-point (bytewise UTF-8) order, as the model sorts: '$' < 'B' < '_' < 'a'. A server whose
    # default collation is not C would order these differently.
    expect(
        [(s.scope, s.name) for s in signals(store, "s2", "s1", "S2")],
        [("S2", "a"), ("s1", "$steer"), ("s1", "B"), ("s1", "_x"), ("s1", "a"), ("s1", "z"), ("s2", "b")],
        "ReadSignals(scope = ANY($scopes)) ordered by scope, name in code-point order",
    )
    expect(signals(store, "s3")[0].payload, ["s3", "x"], "each row carries its payload")


@case("§8.1", "a delivered signal wakes every job awaiting it and no other")
def _(store, now):
    a = park(store, now, start(store, now, queue="qa"), "orders", "paid", now + timedelta(hours=1))
    b = park(store, now, start(store, now, queue="qb"), "orders", "paid")
    c = park(store, now, start(store, now, queue="qc"), "orders", "refunded")
    result = store.apply(ops.DeliverSignal(now + S, "orders", "paid", {"amount": 3}))
    expect(result, ops.Signalled(tuple(sorted((a.id, b.id)))), "the awaiters of (orders, paid) are woken")
    for job_id in (a.id, b.id):
        expect(
            fields(read(store, job_id), "state", "ready_at", "await_scope", "await_name"),
            dict(state="ready", ready_at=now + S, await_scope=None, await_name=None),
            f"woken job {job_id}",
        )
    expect(state(store, c.id), "awaiting", "a job awaiting another name stays parked")
    check(signal(store, "orders", "paid") is not None, "the signal persists after waking its awaiters")


@case("§8.1", "steering delivers $steer to the job's scope and wakes a job awaiting it")
def _(store, now):
    other = park(store, now, start(store, now), "elsewhere", "$steer")
    target = insert(store, now, queue="steered")
    running = claim_job(store, now, target)
    park(store, now, running, f"job:{target}", "$steer")
    result = store.apply(ops.Steer(now + S, target, {"hint": "shorter"}))
    expect(result, ops.Signalled((target,)), "the steered job awaiting $steer wakes")
    expect(
        signals(store, f"job:{target}"),
        (Signal(f"job:{target}", "$steer", {"hint": "shorter"}, now + S),),
        "the $steer signal row",
    )
    expect(state(store, other.id), "awaiting", "a job awaiting $steer in another scope is not touched")
    expect(
        store.apply(ops.Steer(now, target + 1000, {})),
        ops.NotFound(target + 1000),
        "steering an unknown job reports NotFound",
    )
    expect(signals(store, f"job:{target + 1000}"), (), "steering an unknown job writes no signal")


# ---------------------------------------------------------------------------------------------
# §8.6 cancel


@case("§8.6", "cancelling a ready job makes it cancelled and finished now")
def _(store, now):
    job_id = insert(store, now)
    expect(store.apply(ops.Cancel(now + S, job_id)), ops.Cancelled(job_id), "Cancel of a ready job")
    expect(
        fields(read(store, job_id), "state", "finished_at"),
        dict(state="cancelled", finished_at=now + S),
        "the cancelled row",
    )
    expect(claim(store, now + 2 * S), (), "a cancelled job is never claimed")


@case("§8.6", "cancelling an awaiting job makes it cancelled and clears its await fields")
def _(store, now):
    job = park(store, now, start(store, now), "orders", "paid", now + MIN)
    expect(store.apply(ops.Cancel(now + S, job.id)), ops.Cancelled(job.id), "Cancel of an awaiting job")
    expect(
        fields(read(store, job.id), "state", "finished_at", "await_scope", "await_name"),
        dict(state="cancelled", finished_at=now + S, await_scope=None, await_name=None),
        "the cancelled row",
    )
    expect(
        store.apply(ops.DeliverSignal(now + 2 * S, "orders", "paid")),
        ops.Signalled(()),
        "a cancelled job is not woken by its signal",
    )


@case("§8.6", "cancelling a held member cancels it and dooms its dependents")
def _(store, now):
    ids = workflow(
        store, now, "wf", member("a"), member("b", "a"), member("c", "b"), member("d", "b", ignore=("cancelled",))
    )
    expect(store.apply(ops.Cancel(now + S, ids["b"])), ops.Cancelled(ids["b"]), "Cancel of a held member")
    expect(
        wf_states(store, "wf"),
        {"a": "ready", "b": "cancelled", "c": "cancelled", "d": "ready"},
        "settlement after the cancel: c doomed, d tolerates the cancellation",
    )
    expect(read(store, ids["c"]).finished_at, now + S, "the doomed member's finished_at")


@case("§8.6", "cancelling a running job only requests cancellation")
def _(store, now):
    job = start(store, now)
    expect(store.apply(ops.Cancel(now + S, job.id)), ops.CancelRequested(job.id), "Cancel of a running job")
    after = read(store, job.id)
    expect(
        fields(after, "state", "cancel_requested", "attempt", "lease_until", "leased_by", "finished_at"),
        dict(
            state="running",
            cancel_requested=True,
            attempt=1,
            lease_until=job.lease_until,
            leased_by=job.leased_by,
            finished_at=None,
        ),
        "the running row keeps its lease, flag set",
    )
    expect(
        store.apply(w.Preflight(job.id)),
        w.BudgetOk(cancel_requested=True),
        "the step-boundary read reports the cancel request",
    )


@case("§8.6", "cancelling a terminal job reports NotCancellable and changes nothing")
def _(store, now):
    job_id = insert(store, now)
    done = succeed(store, now + S, job_id, {"ok": True})
    expect(
        store.apply(ops.Cancel(now + 2 * S, job_id)),
        ops.NotCancellable(job_id, "succeeded"),
        "Cancel of a succeeded job",
    )
    expect(read(store, job_id), done, "the succeeded row is unchanged")
    expect(store.apply(ops.Cancel(now, job_id + 1000)), ops.NotFound(job_id + 1000), "Cancel of an unknown job")


# ---------------------------------------------------------------------------------------------
# §8.6 retry


@case("§8.6", "retrying a failed job readies it now with max_attempts raised and finish cleared")
def _(store, now):
    job_id = insert(store, now, max_attempts=1)
    failed = finish(store, now + S, job_id, w.Fail("boom", retry_at=now + MIN), "failed")
    expect(store.apply(ops.Retry(now + 2 * S, job_id)), ops.Retried(job_id, "ready"), "Retry of a failed job")
    after = read(store, job_id)
    expect(
        fields(
            after, "state", "ready_at", "attempt", "max_attempts", "finished_at", "lease_until", "leased_by", "errors"
        ),
        dict(
            state="ready",
            ready_at=now + 2 * S,
            attempt=1,
            max_attempts=2,
            finished_at=None,
            lease_until=None,
            leased_by=None,
            errors=failed.errors,
        ),
        "max_attempts = GREATEST(max_attempts, attempt+1); errors are history and stay",
    )
    running = claim_job(store, now + 3 * S, job_id)
    expect(running.attempt, 2, "the retried job runs its next attempt")


@case("§8.6", "retrying clears cancel_requested, which survived the cooperative cancel")
def _(store, now):
    job = start(store, now)
    store.apply(ops.Cancel(now + S, job.id))
    expect(ack(store, now + 2 * S, job, w.CancelSelf()), w.Acked(job.id, "cancelled"), "the cooperative cancel")
    expect(read(store, job.id).cancel_requested, True, "a terminal transition never clears cancel_requested")
    expect(store.apply(ops.Retry(now + 3 * S, job.id)), ops.Retried(job.id, "ready"), "Retry of the cancelled job")
    expect(read(store, job.id).cancel_requested, False, "the operator's retry clears cancel_requested (§8.6)")


@case("§8.6", "retrying a member whose dep is still failed re-holds it and settlement re-dooms it")
def _(store, now):
    ids = workflow(store, now, "wf", member("a"), member("b", "a"))
    fail(store, now + S, ids["a"])
    expect(wf_states(store, "wf"), {"a": "failed", "b": "cancelled"}, "setup: b doomed by a's failure")
    expect(
        store.apply(ops.Retry(now + 2 * S, ids["b"])),
        ops.Retried(ids["b"], "cancelled"),
        "retrying b alone must not let it run beside its failed dep",
    )
    expect(
        fields(read(store, ids["b"]), "state", "finished_at"),
        dict(state="cancelled", finished_at=now + 2 * S),
        "re-doomed at the retry's now",
    )


@case("§8.6", "retrying a member whose dep succeeded releases it, and one whose dep is live holds it")
def _(store, now):
    ids = workflow(
        store, now, "wf", member("a", queue="qa"), member("b", "a"), member("c", queue="qc"), member("d", "c")
    )
    cancel(store, now + S, ids["b"])
    cancel(store, now + S, ids["d"])
    succeed(store, now + 2 * S, ids["a"])
    expect(store.apply(ops.Retry(now + 3 * S, ids["b"])), ops.Retried(ids["b"], "ready"), "dep succeeded → ready")
    expect(store.apply(ops.Retry(now + 3 * S, ids["d"])), ops.Retried(ids["d"], "held"), "dep still ready → held")
    expect(
        fields(read(store, ids["d"]), "state", "finished_at", "cancel_requested"),
        dict(state="held", finished_at=None, cancel_requested=False),
        "the re-held member",
    )
    succeed(store, now + 4 * S, ids["c"])
    expect(state(store, ids["d"]), "ready", "the re-held member releases when its dep succeeds")


@case("§8.6", "retrying a job whose incomplete key has a new live holder is blocked")
def _(store, now):
    old = insert(store, now, unique_key="k")
    failed = fail(store, now + S, old)
    new = insert(store, now + 2 * S, unique_key="k")
    expect(
        store.apply(ops.Retry(now + 3 * S, old)),
        ops.RetryBlocked(old, new),
        "a retry would make a second live holder of the key",
    )
    expect(read(store, old), failed, "the blocked retry changes nothing")


@case("§8.6", "retrying a job that is not failed or cancelled reports NotRetryable and changes nothing")
def _(store, now):
    ready = insert(store, now, queue="q1")
    done_id = insert(store, now, queue="q2")
    done = succeed(store, now + S, done_id)
    before = read(store, ready)
    expect(store.apply(ops.Retry(now + 2 * S, ready)), ops.NotRetryable(ready, "ready"), "Retry of a ready job")
    expect(
        store.apply(ops.Retry(now + 2 * S, done_id)), ops.NotRetryable(done_id, "succeeded"), "Retry of a succeeded job"
    )
    expect((read(store, ready), read(store, done_id)), (before, done), "nothing changed")
    expect(store.apply(ops.Retry(now, done_id + 1000)), ops.NotFound(done_id + 1000), "Retry of an unknown job")


@case("§8.6", "a blocked retry and a duplicate both name the live holder of the key")
def _(store, now):
    older = insert(store, now, queue="q1", unique_key="k")
    fail(store, now + S, older)
    newer = insert(store, now + 2 * S, queue="q2", unique_key="k")
    fail(store, now + 3 * S, newer)
    expect(
        store.apply(ops.Retry(now + 4 * S, older)),
        ops.Retried(older, "ready"),
        "setup: the older row is retried while the newer one is terminal, so it becomes the live holder",
    )
    expect(
        store.apply(ops.Retry(now + 5 * S, newer)),
        ops.RetryBlocked(newer, older),
        "RetryBlocked.holder_id must be the live holder (the revived older row), not the newest row with the key",
    )
    expect(
        enqueue(store, now + 6 * S, spec(unique_key="k")).outcomes[0],
        Duplicate(older, "unique"),
        "a duplicate names the live holder too: the newest row in the index its mode conflicts with",
    )


# ---------------------------------------------------------------------------------------------
# input validation and the transactional-enqueue capability


_BAD_INPUT = {
    "an empty queue name": lambda now: ops.JobSpec("", "w"),
    "a negative priority": lambda now: ops.JobSpec("q", "w", priority=-1),
    "a priority above 32767": lambda now: ops.JobSpec("q", "w", priority=32768),
    "max_attempts 0": lambda now: ops.JobSpec("q", "w", max_attempts=0),
    "NaN in input": lambda now: ops.JobSpec("q", "w", input={"x": float("nan")}),
    "a NUL in input": lambda now: ops.JobSpec("q", "w", input={"x": "a\x00b"}),
    "a naive scheduled_at": lambda now: ops.JobSpec("q", "w", scheduled_at=now.replace(tzinfo=None)),
    "window mode without a window": lambda now: ops.JobSpec("q", "w", unique_key="k", unique_mode="window"),
    "a window without window mode": lambda now: ops.JobSpec("q", "w", unique_key="k", unique_window=60),
    "an unknown unique mode": lambda now: ops.JobSpec("q", "w", unique_key="k", unique_mode="sometimes"),
    "a cron name without a slot": lambda now: ops.JobSpec("q", "w", cron_name="c"),
    "a cron slot inside a minute": lambda now: ops.JobSpec("q", "w", cron_name="c", cron_slot=now + S),
    "an empty enqueue": lambda now: ops.Enqueue(now, ()),
    "a naive now": lambda now: ops.Enqueue(now.replace(tzinfo=None), (ops.JobSpec("q", "w"),)),
    "a member depending on itself": lambda now: member("a", "a"),
    "a member with a unique key": lambda now: ops.WorkflowMember("a", ops.JobSpec("q", "w", unique_key="k")),
    "a workflow naming a member twice": lambda now: ops.EnqueueWorkflow(now, "wf", (member("a"), member("a"))),
    "an empty signal scope": lambda now: ops.DeliverSignal(now, "", "n"),
    "job id 0": lambda now: ops.Cancel(now, 0),
    "a reserved step name": lambda now: w.RecordStep(now, 1, "$sleep:x", 1),
    "a step value over 1 MiB": lambda now: w.RecordStep(now, 1, "big", "x" * (1024 * 1024 + 1)),
    "negative step cost": lambda now: w.RecordStep(now, 1, "s", 1, usd_micros=-1),
    "an ack of attempt 0": lambda now: w.Ack(now, 1, 0, w.Succeed()),
    "a negative claim demand": lambda now: w.Claim(now, "q", "n", -1),
    "a zero lease ttl": lambda now: w.Claim(now, "q", "n", 1, timedelta(0)),
    "an unknown queue option": lambda now: QueueOpts.parse({"global_limt": 2}),
    "retention for a live state": lambda now: w.Prune(now, {"ready": 1}),
    "a spawned child with its own key": lambda now: w.Spawn(now, 1, "s", (ops.JobSpec("q", "w", unique_key="k"),)),
}


@case("§10", "bad input is refused with InvalidInput before any store sees it")
def _(store, now):
    job_id = insert(store, now)
    before = read(store, job_id)
    for what, build in _BAD_INPUT.items():
        expect_raises(InvalidInput, lambda build=build: build(now), f"{what} must be refused with InvalidInput")
    expect(read(store, job_id), before, "the store is unchanged")
    expect(enqueue(store, now, spec()).outcomes, (Inserted(job_id + 1),), "no id was consumed by refused input")


@case("§5.1", "a caller connection is refused for anything but an enqueue")
def _(store, now):
    job_id = insert(store, now)
    before = read(store, job_id)
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.DeliverSignal(now, "s", "n"), conn=object()),
        "a signal cannot join a caller's transaction",
    )
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.Cancel(now, job_id), conn=object()),
        "a cancel cannot join a caller's transaction",
    )
    expect((signals(store, "s"), read(store, job_id)), ((), before), "the refused operations changed nothing")


@case("§5.1", "a store without transactional enqueue refuses a caller connection loudly")
def _(store, now):
    if getattr(store, "supports_transactional_enqueue", False):
        raise NotApplicable("the store supports transactional enqueue")
    first = insert(store, now)
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.Enqueue(now, (spec(),)), conn=object()),
        "an enqueue given a caller connection it cannot join must raise, never run outside it",
    )
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.EnqueueWorkflow(now, "wf", (member("a"),)), conn=object()),
        "a workflow enqueue likewise",
    )
    expect(tuple(store.apply(ops.ReadWorkflow("wf"))), (), "nothing was inserted")
    expect(enqueue(store, now, spec()).outcomes, (Inserted(first + 1),), "nothing was inserted (no id consumed)")


@case("§5.1", "transactional enqueue commits and rolls back with the caller's transaction")
def _(store, now):
    require(store, "supports_transactional_enqueue")
    require(store, "caller_connection")
    with store.caller_connection() as conn:
        (kept,) = store.apply(ops.Enqueue(now, (spec("kept"),)), conn=conn).ids
        check(gone(store, kept), "a job enqueued in an open caller transaction must not be visible to others yet")
        conn.commit()
    expect(read(store, kept).worker, "kept", "the job is visible once the caller commits")
    with store.caller_connection() as conn:
        (dropped,) = store.apply(ops.Enqueue(now, (spec("dropped"),)), conn=conn).ids
        conn.rollback()
    check(gone(store, dropped), "a job enqueued in a rolled-back caller transaction must not exist")


@case("§2", "JSON columns read back as JSON: non-string keys become strings and tuples become lists")
def _(store, now):
    job_id = insert(store, now, input={1: "one", "pair": (1, 2)}, meta={2: None})
    expect(
        fields(read(store, job_id), "input", "meta"),
        dict(input={"1": "one", "pair": [1, 2]}, meta={"2": None}),
        "input and meta are jsonb (§2): a Python int key or tuple is stored as its JSON",
    )
    store.apply(ops.DeliverSignal(now, "s", "n", (1, {3: "x"})))
    expect(signals(store, "s")[0].payload, [1, {"3": "x"}], "signal payloads are jsonb too")


@case("§2", "a JSON value holding a lone surrogate is refused with InvalidInput")
def _(store, now):
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.Enqueue(now, (spec(input={"x": "\ud800"}),))),
        "jsonb cannot hold an unpaired UTF-16 surrogate: the input must be refused as bad input",
    )
    expect_raises(
        InvalidInput, lambda: store.apply(ops.DeliverSignal(now, "s", "n", ["\udfff"])), "a signal payload likewise"
    )
    expect(signals(store, "s"), (), "nothing was written")


@case("§10", "a name holding a lone surrogate is refused with InvalidInput")
def _(store, now):
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.Enqueue(now, (spec(queue="q\ud800"),))),
        "a queue name that is not encodable as UTF-8 text must be refused as bad input",
    )
    expect_raises(
        InvalidInput, lambda: store.apply(ops.DeliverSignal(now, "scope\ud800", "n")), "a signal scope likewise"
    )


@case("§10", "max_attempts beyond the integer column is refused with InvalidInput")
def _(store, now):
    first = insert(store, now)
    expect_raises(
        InvalidInput,
        lambda: store.apply(ops.Enqueue(now, (spec(max_attempts=2**31),))),
        "belay_jobs.max_attempts is an integer (at most 2147483647): larger is bad input",
    )
    check(gone(store, first + 1), "nothing was inserted")
