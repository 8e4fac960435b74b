"""The peers' bugs as named regressions (issue 13): real bugs of other PostgreSQL job queues, each replayed
against Belay on a real database with the failpoints / forced-schedule harness (impl/store/failpoints.py,
tests/test_forced_interleavings.py) — §6 leases and reclaim, §7 fenced acks, §8.5 cron slots.

Every test runs twice: on Belay (`PgStore`), where it must pass, and on a test-local broken variant that
has the peer's bug, marked `xfail(strict=True)` — so every CI run shows the test failing on the bug (an
unexpected pass of the broken variant fails the suite). The same bugs are also catalogued mutants of
impl/ (properties/mutants/catalogue.py, `peer_*`), killed by this file.

    river_1302            rescuer read → worker completes → rescuer overwrites the completed row
    oban_lifeline         rescue by elapsed time re-runs a job that is still executing
    procrastinate_1518    liveness per worker id: a lost worker's job stays "doing" forever
    pg_boss_592           unschedule + schedule: one cron slot fires twice
    pg_boss_613           two schedules of one queue due in the same minute collapse into one job
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from impl.store import PgStore
from impl.store.failpoints import Pause, failpoint
from model import ops
from model import worker_ops as w
from model.cron import cron_job, cron_plan
from model.rows import CronRow
from tests.test_forced_interleavings import NOW, Client, blocked_or_parked, reached

TTL = timedelta(seconds=10)


def _enqueue(url: str, n: int = 1, queue: str = "q") -> list[int]:
    with PgStore(url, pool_size=1, notify=False) as s:
        out = s.apply(ops.Enqueue(NOW, tuple(ops.JobSpec(queue, "k", {"i": i}) for i in range(n))))
    return list(out.ids)


def _row(url: str, job_id: int) -> dict:
    with psycopg.connect(url) as c:
        r = c.execute(
            "SELECT state, attempt, leased_by, errors, result IS NOT NULL FROM belay_jobs WHERE id = %s", (job_id,)
        ).fetchone()
    return {"state": r[0], "attempt": r[1], "leased_by": r[2], "errors": r[3], "has_result": r[4]}


def _variants(broken: type[PgStore]) -> list:
    return [
        pytest.param(PgStore, id="belay"),
        pytest.param(
            broken,
            id="broken_like_the_peer",
            marks=pytest.mark.xfail(
                strict=True,
                raises=AssertionError,
                reason=("the broken variant has the peer's bug; the test must catch it"),
            ),
        ),
    ]


# --- River #1302 --------------------------------------------------------------------------------------


class RescuerWithoutGuard(PgStore):
    """River's JobRescuer before the fix: read the stuck jobs, then later update them by id alone."""

    def _reclaim(self, op: w.Reclaim, conn) -> w.Reclaimed:
        with self.transaction(op.now) as tx:
            rows = tx.cur.execute(
                "SELECT id, attempt FROM belay_jobs WHERE state = 'running' AND lease_until <= %s ORDER BY id",
                (op.now,),
            ).fetchall()
        failpoint("reclaim.after_read")
        with self.transaction(op.now) as tx:
            for row in rows:
                entry = Jsonb([w.error_entry(row["attempt"], op.now, "lease_expired", None)])
                tx.cur.execute(
                    "UPDATE belay_jobs SET state = 'ready', ready_at = %s, errors = errors || %s, "
                    "lease_until = NULL, leased_by = NULL WHERE id = %s",
                    (op.now, entry, row["id"]),
                )
        return w.Reclaimed(tuple(r["id"] for r in rows), ())


@pytest.mark.parametrize("sweeper_store", _variants(RescuerWithoutGuard))
def test_river_1302_a_reclaim_never_overwrites_a_job_completed_after_the_sweeper_read_it(db_url, sweeper_store):
    """River #1302 (riverqueue/river, fixed by PR #1373): JobRescuer selected `running` jobs past their
    rescue horizon, built the rescue from that snapshot and later ran JobRescueMany, whose UPDATE checked
    only the id. A worker that completed the job in between had its `completed` row moved back to
    `retryable` (or discarded): a finished job ran again.

    Belay is immune because its sweeper reads expired leases `FOR UPDATE SKIP LOCKED` and updates them in
    the same transaction (§6): from the read on it holds the row lock, so the owner's fenced ack waits and
    then finds the row no longer `running` at its attempt — a stale ack, dropped. The schedule: the owner's
    lease has expired; the sweeper stops right after its read (failpoint `reclaim.after_read`); the owner
    acks; the sweeper goes on. Whatever the order, the ack's answer and the final row must agree."""
    [job_id] = _enqueue(db_url)
    owner = Client(db_url, "owner")
    sweeper = Client(db_url, "sweeper", sweeper_store)
    try:
        [job] = owner.store.apply(w.Claim(NOW, "q", "n1", 1, TTL)).jobs
        later = NOW + TTL + timedelta(seconds=5)
        with Pause("reclaim.after_read", thread="sweeper") as paused, psycopg.connect(db_url, autocommit=True) as obs:
            sweeper.start(lambda s: s.apply(w.Reclaim(later)))
            reached(paused, sweeper)
            owner.start(lambda s: s.apply(w.Ack(later, job_id, job.attempt, w.Succeed({"done": True}))))
            blocked_or_parked(obs, owner)
            paused.release()
            acked, reclaimed = owner.join(), sweeper.join()
        row = _row(db_url, job_id)
        assert job_id in reclaimed.retried
        if isinstance(acked, w.Acked):
            assert row["state"] == "succeeded", f"the ack was accepted, then the sweeper rewrote the row: {row}"
        else:
            assert isinstance(acked, w.Stale) and row["state"] == "ready" and not row["has_result"], (acked, row)
    finally:
        owner.close()
        sweeper.close()


# --- Oban Lifeline --------------------------------------------------------------------------------------


class LifelineByElapsedTime(PgStore):
    """Oban.Plugins.Lifeline: rescue `executing` jobs once `rescue_after` has passed since they were
    attempted, whether or not their node is alive (here: rescue_after = the lease ttl)."""

    def _reclaim(self, op: w.Reclaim, conn) -> w.Reclaimed:
        with self.transaction(op.now) as tx:
            rows = tx.cur.execute(
                "UPDATE belay_jobs SET state = 'ready', ready_at = %(now)s, lease_until = NULL, leased_by = NULL "
                "WHERE state = 'running' AND started_at <= %(horizon)s RETURNING id",
                {"now": op.now, "horizon": op.now - TTL},
            ).fetchall()
        return w.Reclaimed(tuple(r["id"] for r in rows), ())


@pytest.mark.parametrize("store_class", _variants(LifelineByElapsedTime))
def test_oban_lifeline_a_job_still_executing_and_renewing_is_never_rescued(db_url, store_class):
    """Oban's Lifeline plugin (oban-bg/oban; see hexpm/hexpm#1825, OpenFn/lightning#4708) moves
    `executing` jobs back to `available` on elapsed time alone — its docs warn it "may transition jobs
    that are genuinely executing and cause duplicate execution": hexpm's nightly stats job (9–47 min)
    ran two or three times a night with rescue_after = 6 min.

    Belay is immune because a job is rescued only when its lease expired (§6), and a live node renews its
    leases every ttl/3: elapsed time means nothing while renewals arrive. (And if a node truly stalls, the
    rescue bumps the attempt and the zombie's late ack is fenced — stale — so two executions never both
    complete.) Schedule: claim at t, renew at t+5 s, sweep at t+12 s (> one ttl after the claim), ack at
    t+13 s: the sweep must take nothing and the original attempt's ack must win."""
    [job_id] = _enqueue(db_url)
    with store_class(db_url, pool_size=2, notify=False) as s:
        [job] = s.apply(w.Claim(NOW, "q", "n1", 1, TTL)).jobs
        renewed = s.apply(w.Renew(NOW + timedelta(seconds=5), "n1", (job_id,), NOW + timedelta(seconds=15)))
        assert renewed.kept == (job_id,)
        swept = s.apply(w.Reclaim(NOW + timedelta(seconds=12)))
        assert job_id not in swept.retried + swept.failed, "a job whose lease was renewed was rescued"
        acked = s.apply(w.Ack(NOW + timedelta(seconds=13), job_id, job.attempt, w.Succeed({"ok": 1})))
    assert isinstance(acked, w.Acked)
    assert _row(db_url, job_id)["state"] == "succeeded"


# --- procrastinate #1518 ----------------------------------------------------------------------------------


class HeartbeatPerWorkerId(PgStore):
    """procrastinate's liveness: a worker's heartbeat keeps *every* `doing` job of its worker id alive."""

    def _renew(self, op: w.Renew, conn) -> w.Renewed:
        with self.transaction(op.now) as tx:
            tx.cur.execute(
                "UPDATE belay_jobs SET lease_until = %s WHERE state = 'running' AND leased_by = %s",
                (op.lease_until, op.node),
            )
        return w.Renewed(tuple(sorted(op.job_ids)), ())


@pytest.mark.parametrize("store_class", _variants(HeartbeatPerWorkerId))
def test_procrastinate_1518_a_lost_workers_job_is_reclaimed_even_when_a_restart_reuses_its_node_id(db_url, store_class):
    """procrastinate #1518 (procrastinate-org/procrastinate, open): jobs stay `doing` forever after a
    worker is lost. Stalled jobs are found through the worker's heartbeat row: (1) once the dead worker's
    row is pruned, the LEFT JOIN finds nothing and the job is invisible to retry logic; (2) a Kubernetes
    pod restarted under the same name re-registers the same worker id and its fresh heartbeat keeps the
    dead process's jobs looking alive.

    Belay is immune because liveness is per job, not per worker: the lease lives on the job row and a node
    renews only the ids it is running (§6 `renew_leases`: id = ANY(ids) AND leased_by = node); there is no
    worker registry to prune. Schedule: node `pod-1` claims job A and dies; a new process with the same
    id `pod-1` claims B and keeps renewing it; sweeps run past A's lease. A must be reclaimed and
    completed by someone; B must stay with its live owner."""
    a, b = _enqueue(db_url, 2)
    with store_class(db_url, pool_size=2, notify=False) as s:
        [ja] = s.apply(w.Claim(NOW, "q", "pod-1", 1, TTL)).jobs  # incarnation 1, then it dies
        [jb] = s.apply(w.Claim(NOW + timedelta(seconds=2), "q", "pod-1", 1, TTL)).jobs  # incarnation 2
        assert (ja.id, jb.id) == (a, b)
        for t in range(4, 40, 3):  # incarnation 2 renews its own job every 3 s; sweepers pass every 3 s
            s.apply(w.Renew(NOW + timedelta(seconds=t), "pod-1", (b,), NOW + timedelta(seconds=t) + TTL))
            s.apply(w.Reclaim(NOW + timedelta(seconds=t + 1), backoff=w.Backoff()))
        row_a, row_b = _row(db_url, a), _row(db_url, b)
    assert row_a["state"] != "running", f"job {a} of the lost process is stuck running: {row_a}"
    assert any(e.get("error") == "lease_expired" for e in row_a["errors"])
    assert row_b["state"] == "running" and row_b["leased_by"] == "pod-1"


# --- pg-boss #592 and #613 ---------------------------------------------------------------------------------


class SlotKeyPerRegistration(PgStore):
    """pg-boss #592's shape: the exactly-once guard of a slot is tied to the schedule's registration, so
    an unschedule + schedule (a new registration) lets the same slot fire again."""

    def _fire_crons(self, op: w.FireCrons, conn) -> w.CronsFired:
        with self.transaction(op.now) as tx:
            rows = [CronRow(**r) for r in tx.all("cron_rows")]
            version = {r.name: int(r.updated_at.timestamp() * 1e6) for r in rows}
            plan = cron_plan(op.static, rows, op.since, op.now)
            specs = [replace(cron_job(c, slot), cron_name=f"{c.name}#{version[c.name]}") for c, slot in plan]
            outcomes = self._insert(tx, [self._row(spec, op.now) for spec in specs])
            return w.CronsFired(
                tuple(
                    w.Fired(c.name, slot, o.id, isinstance(o, ops.Inserted))
                    for (c, slot), o in zip(plan, outcomes, strict=True)
                )
            )


class SlotKeyPerQueue(PgStore):
    """pg-boss #613's shape: the slot's dedup key is the queue name (singletonKey: name), not the schedule."""

    def _fire_crons(self, op: w.FireCrons, conn) -> w.CronsFired:
        with self.transaction(op.now) as tx:
            rows = [CronRow(**r) for r in tx.all("cron_rows")]
            plan = cron_plan(op.static, rows, op.since, op.now)
            specs = [replace(cron_job(c, slot), cron_name=c.queue) for c, slot in plan]
            outcomes = self._insert(tx, [self._row(spec, op.now) for spec in specs])
            return w.CronsFired(
                tuple(
                    w.Fired(c.name, slot, o.id, isinstance(o, ops.Inserted))
                    for (c, slot), o in zip(plan, outcomes, strict=True)
                )
            )


def _cron_jobs(url: str) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute(
            "SELECT cron_name, cron_slot, worker FROM belay_jobs WHERE cron_slot IS NOT NULL "
            "ORDER BY cron_slot, cron_name"
        ).fetchall()


@pytest.mark.parametrize("store_class", _variants(SlotKeyPerRegistration))
def test_pg_boss_592_unschedule_then_schedule_never_fires_a_slot_twice(db_url, store_class):
    """pg-boss #592 (timgit/pg-boss): with a main process calling `unschedule` then `schedule` while a
    worker process runs, the scheduled job's handler ran twice for one cron time.

    Belay is immune because a slot's exactly-once guard is the (cron_name, cron_slot) unique index on the
    job rows themselves (§8.5), independent of the belay_crons registration row: deleting and re-creating
    the schedule changes the row, never the key. Schedule: node A fires the 12:01 slot; the cron is
    unscheduled (row deleted) and scheduled again (PutCron); node B, whose `since` still precedes 12:01,
    fires (12:00, 12:01:30]. There must be exactly one job for 12:01."""
    with store_class(db_url, pool_size=2, notify=False) as s:
        s.apply(ops.PutCron(NOW, "nightly", "* * * * *", "report", {}, {"queue": "q"}))
        a = s.apply(w.FireCrons(NOW + timedelta(seconds=65), NOW + timedelta(seconds=30)))
        assert [f.inserted for f in a.fired] == [True]
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("DELETE FROM belay_crons WHERE name = 'nightly'")  # unschedule
        s.apply(ops.PutCron(NOW + timedelta(seconds=70), "nightly", "* * * * *", "report", {}, {"queue": "q"}))
        s.apply(w.FireCrons(NOW + timedelta(seconds=90), NOW))  # node B: an older `since`
    slots = [r[1] for r in _cron_jobs(db_url)]
    assert len(slots) == len(set(slots)) == 1, f"cron slots fired: {_cron_jobs(db_url)}"


@pytest.mark.parametrize("store_class", _variants(SlotKeyPerQueue))
def test_pg_boss_613_two_schedules_of_one_queue_due_in_the_same_minute_each_get_their_job(db_url, store_class):
    """pg-boss #613 (timgit/pg-boss, v11.0.8): queues gained several schedules (a `key` per schedule), but
    cron() built each job with singletonKey = the queue name, so two schedules of one queue due at the
    same time collided in the job table's `ON CONFLICT DO NOTHING`: one job for two schedules.

    Belay is immune because a cron job's unique key is (cron_name, cron_slot), the schedule's own name
    and the minute (§8.5), never the queue or the job kind. Schedule: two crons `billing-eu` and
    `billing-us` on queue q, same kind, both every minute; one firing covers 12:01. Two jobs, one each."""
    with store_class(db_url, pool_size=2, notify=False) as s:
        for name in ("billing-eu", "billing-us"):
            s.apply(ops.PutCron(NOW, name, "* * * * *", "bill", {}, {"queue": "q"}))
        s.apply(w.FireCrons(NOW + timedelta(seconds=65), NOW + timedelta(seconds=30)))
    fired = _cron_jobs(db_url)
    assert sorted(r[0] for r in fired) == ["billing-eu", "billing-us"], f"jobs: {fired}"
