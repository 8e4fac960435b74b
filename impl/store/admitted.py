"""§6 claims on a queue with admission (global_limit, rate, partition), mixed into `WorkerOps`: the claim
alone (`_admitted_claim`) and a group of acks with the claim of their slots (`_ack_claim_admitted`, issue 54).

Each runs in the caller's transaction under the queue's advisory lock (§6: "When the queue has global_limit,
rate, or partition, first take pg_advisory_xact_lock(hashtext('belay:' || queue)) — it serializes claimers
so admission math cannot race"). Admission arithmetic is model/admission.py itself, evaluated on counts read
under that lock, so model and implementation cannot drift in rounding.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.rows import dict_row

from impl.store.failpoints import failpoint
from impl.store.pgrows import job_from_row
from impl.store.tx import Tx as _Tx
from model import admission
from model import worker_ops as w
from model.store import EPOCH, claim_order, epoch_us

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from impl.store.queries import SchemaSQL


class AdmittedClaims:
    """Claims that take the queue's advisory lock. Mixed into impl.store.worker_store.WorkerOps."""

    if TYPE_CHECKING:  # what this mixin uses of WorkerOps
        q: SchemaSQL
        _succeed_many: Callable[[Sequence[w.Ack]], tuple[str, dict[str, Any]]]
        _ack_params: Callable[[w.Ack], tuple[str, dict[str, Any]]]
        _acked_many: Callable[[_Tx, w.AckMany, dict[int, dict]], w.AckedMany]

    def _admitted_claim(self, tx: _Tx, op: w.Claim, *, prefixed: bool = False, live: int | None = None) -> w.Claimed:
        """§6 claim on a queue with admission (global_limit, rate, partition), in `tx`: the queue's advisory
        lock, the expired leases locked and the live ones counted, the claim. With `prefixed` the caller
        did the first three under this transaction (`live`: the count it read, None without a global
        limit)."""
        opts, now = op.opts, op.now
        take = op.demand
        if live is not None and opts.global_limit is not None:
            take = admission.global_admit(take, opts.global_limit, live)
        # The admission prefix in one round trip (a pipeline: the statements still run one after
        # another, each with its own snapshot, the count's taken after the locks are held): the
        # queue's advisory lock is held for one round trip fewer per statement.
        with contextlib.nullcontext() if prefixed else tx.cur.connection.pipeline():
            if not prefixed:
                tx.cur.execute(self.q.qb("lock_queue"), {"queue": op.queue})
            if not prefixed and (opts.global_limit is not None or opts.partition is not None):
                # Lock the queue's expired running rows before counting the live ones. The advisory
                # lock serializes claims only against claims: a renewal that revived an expired lease
                # and committed after this claim's count read it would leave more live leases than
                # the limit, a claim the model refuses in commit order (the two-hour soak of seed
                # 2028: queue soak-global, limit 2, four live leases). Locked, a renewal either
                # committed before the count (which then sees it) or waits for this claim's commit.
                tx.cur.execute(self.q.qb("lock_running"), {"queue": op.queue, "now": now})
            if not prefixed and opts.global_limit is not None:
                tx.cur.execute(self.q.qb("live_running"), {"queue": op.queue, "now": now})
                row = tx.cur.fetchone()
                assert row is not None
                take = admission.global_admit(take, opts.global_limit, row["n"])
        failpoint("claim.after_admission")
        window = None
        if opts.rate is not None:
            bucket = opts.rate.bucket(op.queue)
            start = admission.window_start(epoch_us(now), opts.rate.period)
            window = EPOCH + timedelta(seconds=start)
            previous = EPOCH + timedelta(seconds=start - opts.rate.period)
            counts = {
                r["window_start"]: r["count"]
                for r in tx.all("rate_counts", {"bucket": bucket, "windows": [window, previous]})
            }
            used = admission.rate_used(epoch_us(now), opts.rate.period, counts.get(window, 0), counts.get(previous, 0))
            take = admission.rate_admit(take, opts.rate.allowed, used, opts.rate.estimate)
        if take <= 0:
            return w.Claimed(())
        params = {"queue": op.queue, "now": now, "take": take, "node": op.node, "lease_until": now + op.lease_ttl}
        if opts.partition is not None:
            params.update(key=opts.partition.key, per_key_limit=opts.per_key_limit)
            ids = [r["id"] for r in tx.all("claim_partitioned", params, field=sql.Identifier(opts.partition.field))]
            rows = tx.all("claim_update", {**params, "ids": ids}) if ids else []
        else:
            rows = tx.all("claim_plain", params)
        if window is not None and opts.rate is not None and rows:  # nothing claimed, nothing debited
            tx.cur.execute(
                self.q.q("rate_debit"),
                {
                    "bucket": opts.rate.bucket(op.queue),
                    "window": window,
                    "n": admission.debit(len(rows), opts.rate.estimate),
                },
            )
        return w.Claimed(tuple(sorted((job_from_row(r) for r in rows), key=claim_order)))

    def _ack_claim_admitted(self, tx: _Tx, op: w.AckClaim) -> w.AckedClaimed:
        """A group of acks and the claim of their slots on a queue with admission, in `tx`, as one pipeline
        (one round trip; the server still runs the statements in order, each with its own snapshot): the
        queue's advisory lock, the acks' fenced row writes, the queue's expired leases locked, the live
        ones counted — so the count sees the acks and every commit the lock waited for. Then the acks'
        after-terminal steps, then the claim. The after-terminal steps come after the row locks of the
        count: they take workflow locks, and a transaction holding a workflow lock must never wait for a
        running row (sdk-guide §6; a reclaim holds an expired row and then wants its workflow's lock).
        They change no running row (settlement releases or dooms held and ready members, `$children` wakes
        an awaiting parent), so the count is the one the model's admission reads after them."""
        claim, opts = op.claim, op.claim.opts
        acks = op.acks.acks
        succeeds = [a for a in acks if isinstance(a.outcome, w.Succeed)]
        others = [a for a in acks if not isinstance(a.outcome, w.Succeed)]
        conn = tx.cur.connection
        cursors = [conn.cursor(row_factory=dict_row) for _ in range(len(others) + (1 if succeeds else 0))]
        try:
            with conn.pipeline():
                tx.cur.execute(self.q.qb("lock_queue"), {"queue": claim.queue})
                statements = [self._succeed_many(succeeds)] if succeeds else []
                statements += [self._ack_params(a) for a in others]
                for cur, (name, params) in zip(cursors, statements, strict=True):
                    cur.execute(self.q.qb(name), params)
                if opts.global_limit is not None or opts.partition is not None:
                    tx.cur.execute(self.q.qb("lock_running"), {"queue": claim.queue, "now": claim.now})
                if opts.global_limit is not None:
                    tx.cur.execute(self.q.qb("live_running"), {"queue": claim.queue, "now": claim.now})
            live: int | None = None
            if opts.global_limit is not None:
                counted = tx.cur.fetchone()
                assert counted is not None
                live = counted["n"]
            rows = {row["id"]: row for cur in cursors for row in cur.fetchall()}
        finally:
            for cur in cursors:
                cur.close()
        acked = self._acked_many(tx, op.acks, rows)
        return w.AckedClaimed(acked, self._admitted_claim(tx, claim, prefixed=True, live=live))
