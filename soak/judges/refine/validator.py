"""The validator (soak/judges/refine/__init__.py has the method): each committed transaction, in commit order,
explained by a candidate operation of model/ applied with the model's own handlers to the state so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from itertools import islice
from typing import Any

from model import ops
from model import store as model_store
from model import worker_ops as w
from model.rows import TERMINAL, Job
from model.state import State, Tables
from soak.judges.refine.feed import Decoded, RowDecoder
from soak.judges.refine.recovery import Recovery
from soak.judges.refine.results import (
    ATTR,
    CLAIM_SETTLE,
    EVENTS,
    FAR,
    JOBS,
    LAG,
    MAX_FINDINGS,
    NOW_SLACK,
    RATE,
    SIGNALS,
    STEPS,
    TABLES,
    Finding,
    Mismatch,
    RefinementResult,
)
from soak.judges.refine.world import (
    Candidate,
    HarnessLedger,
    TxRows,
    World,
    _brief,
    _claims,
    _diff_columns,
    _rows_equal,
    _short,
)
from soak.judges.replay import CONVERT
from soak.judges.timing import ClaimOrder, Freshness
from soak.record.capture import Transaction
from soak.record.pgoutput import lsn_str
from soak.record.spill import HOT, SpillDict

KEY_OF = {table: conv[1] for table, conv in CONVERT.items()}
# faults of a node's route (soak/judges/timing/nodes.py names): a claim in flight through one is held up
ROUTE_FAULTS = frozenset({"partition/stall", "latency", "cut"})


class Validator(Recovery):
    def __init__(
        self,
        initial: State | None,
        ledger: HarnessLedger,
        taint: set[int] | None = None,
        keep_going: bool = True,
        hot: int = HOT,
    ) -> None:
        self.world = World(initial, hot=hot)
        self.rowdec = RowDecoder(hot=hot)  # decoding here (a history not decoded ahead, feed.py)
        self.ledger = ledger
        self.taint: set[int] = set(taint or ())
        self.result = RefinementResult("valid")
        self.keep_going = keep_going
        self._late_claims: dict[str, int] = {}  # P11: node → rows claimed after its SIGTERM
        self._late_first: dict[str, tuple[float, int]] = {}
        self._late_excused = 0  # P11: rows claimed after a SIGTERM through a fault of the node's route
        self.fresh = Freshness(ledger.faults)  # issue 51: `now` freshness per node
        # issue 51: claim order (duty P5); a claim staler than LAG is unexplained (now_ok), never observed there
        self.order = ClaimOrder(ledger.faults, claim_lag_max=LAG.total_seconds())
        self._lsn = ""
        self._last_at: datetime | None = None

    # --- decoding ----------------------------------------------------------------------------------

    def rows_of(self, tx: Transaction | Decoded) -> TxRows:
        """The transaction's net row changes against the rows held (decoded here unless `tx` comes decoded:
        feed.py, which may decode in a second process)."""
        return self.rows_from(tx if isinstance(tx, Decoded) else self.rowdec.decode(tx))

    def rows_from(self, d: Decoded) -> TxRows:
        out = TxRows(d.lsn, d.at, d.xid, {})
        pending: dict[tuple[str, Any], Any] = {}  # the row as this transaction left it so far
        meta = False
        for item in d.items:
            what = item[0]
            if what == "gap":
                out.gap.append(item[1])
                continue
            if what == "meta":
                if item[1] is not None:
                    self.world.version = item[1].get("version", self.world.version)
                    self.world.major = item[1].get("contract_major", self.world.major)
                meta = True
                continue
            _, table, kind, new, old, stale = item
            key = KEY_OF[table](new if new is not None else old)
            rk = (table, key)
            table_rows = out.rows.setdefault(table, {})
            current = pending[rk] if rk in pending else self.world.get(table, key)
            if kind == "insert":
                if current is not None:
                    out.gap.append(f"{table} {key!r} inserted but already held")
            elif current is None:
                # (`old` is here: a row the stream never showed before is stale by definition, feed.py)
                out.gap.append(f"{table} {key!r} {kind}d but not held")
                current = old
                if key not in table_rows:
                    table_rows[key] = (old, None)
            elif stale and old != current:
                out.gap.append(
                    f"{table} {key!r}: the old row differs from the held one in {_diff_columns(current, old)}"
                )
                current = old
                if key in table_rows:
                    table_rows[key] = (old, table_rows[key][1])
            if key not in table_rows:
                table_rows[key] = (current if kind != "insert" else None, None)
            table_rows[key] = (table_rows[key][0], new)
            pending[rk] = new
        # a row inserted and deleted in one transaction, or updated back to itself, still counts as written
        out.meta_only = meta and not any(out.rows.values())
        return out

    # --- applying a candidate ------------------------------------------------------------------------------

    def _apply(self, t: Tables, op: Any) -> None:
        if isinstance(op, tuple):
            tag = op[0]
            if tag == "next_id":
                _, first, inner = op
                t.next_id = first
                model_store.HANDLERS[type(inner)](t, inner)
                return
            if tag == "ids":  # the ids the sequence gave the rows, one per row in order
                _, supply, inner = op
                t.id_supply = iter(supply)
                try:
                    model_store.HANDLERS[type(inner)](t, inner)
                finally:
                    t.id_supply = None
                return
            if tag == "crons":
                _, names, first, inner = op
                t.next_id = first
                t.crons = {n: c for n, c in t.crons.items() if n in names}
                model_store.HANDLERS[type(inner)](t, inner)
                return
            if tag == "refuse":
                raise Mismatch(op[1])
            if tag == "harness_ack":
                # the lost-wakeup scenario's ack: the model's fenced row write, without its after-terminal steps
                inner = op[1]
                res = model_store._ack_row(t, inner)
                if not isinstance(res, w.Acked):
                    raise Mismatch(f"harness ack of job {inner.job_id}: {res}")
                return
            if tag.startswith("mask_"):
                _, ids, inner = op
                self._masked(t, tag[5:], ids, inner)
                return
            raise AssertionError(tag)
        model_store.HANDLERS[type(op)](t, op)

    def _masked(self, t: Tables, what: str, ids: set[int], op: Any) -> None:
        """Apply `op` with the rows a SKIP LOCKED (or limited) statement did not take hidden from it."""
        hidden: dict[int, tuple[Job, Job]] = {}
        for i, j in list(t.jobs.items()):
            if i in ids:
                continue
            m = None
            if what == "claim" and j.queue == op.queue and model_store.claimable(j, op.now):
                m = replace(j, ready_at=FAR)
            elif what == "reclaim" and j.state == "running" and j.lease_until is not None and j.lease_until <= op.now:
                m = replace(j, lease_until=FAR)
            elif what == "prune" and j.state in TERMINAL:
                m = replace(j, finished_at=FAR)
            elif what == "reconcile" and j.state == "awaiting" and j.await_name == "$children":
                m = replace(j, await_name="$masked")
            if m is not None:
                hidden[i] = (j, m)
                t.jobs[i] = m
        if what == "claim":  # each taken row must be claimable under the model's own predicate
            for i in ids:
                taken = t.jobs.get(i)
                if taken is None or not model_store.claimable(taken, op.now):
                    raise Mismatch(
                        f"claim of job {i}: not claimable at {op.now.isoformat()} "
                        f"(state {taken.state if taken else None}, "
                        f"ready_at {taken.ready_at.isoformat() if taken and taken.ready_at else None})"
                    )
        model_store.HANDLERS[type(op)](t, op)
        for i, (orig, m) in hidden.items():
            if t.jobs.get(i) is m:
                t.jobs[i] = orig

    def simulate(self, tx: TxRows, cand: Candidate) -> str | None:
        """None when the model, applied from the state before, writes exactly the transaction's rows;
        else the first difference."""
        R = tx.rows
        job_ids = set(R.get(JOBS, {}))
        for table in (STEPS, EVENTS):
            job_ids |= {k[0] for k in R.get(table, {})}
        signal_keys = set(R.get(SIGNALS, {}))
        buckets = {k[0] for k in R.get(RATE, {})}
        for op in cand.ops:
            inner = op[-1] if isinstance(op, tuple) else op
            if isinstance(inner, (ops.DeliverSignal, w.ParkAwait)):
                signal_keys.add((inner.scope, inner.name))
            elif isinstance(inner, w.Claim):
                # the queue's live leases: model.store._claim reads running rows only through `_live`, for a
                # global_limit or a partition (a running row is never `claimable`); without either the
                # claim reads none of them, and leaving them out of the sub-state saves copying and
                # comparing a few dozen rows per claim (issue 54 target 5)
                if inner.opts.global_limit is not None or inner.opts.partition is not None:
                    job_ids |= self.world.running.get(inner.queue, set())
                if inner.opts.rate is not None:
                    buckets.add(inner.opts.rate.bucket(inner.queue))
            elif isinstance(inner, (ops.Enqueue, w.Spawn, ops.EnqueueWorkflow)):
                specs = (
                    inner.jobs
                    if isinstance(inner, ops.Enqueue)
                    else [m.job for m in inner.members]
                    if isinstance(inner, ops.EnqueueWorkflow)
                    else []
                )
                for s in specs:
                    if s.unique_key is not None:
                        for k in self.world.by_ukey.keys() if s.unique_mode == "window" else (s.unique_key,):
                            if k == s.unique_key or k.startswith(s.unique_key + "@"):
                                job_ids |= self.world.by_ukey.get(k, set())
                    if s.cron_name is not None:
                        job_ids |= self.world.by_cron.get(s.cron_name, set())
                if isinstance(inner, ops.EnqueueWorkflow):
                    job_ids |= self.world.by_wf.get(inner.workflow_id, set())
                if isinstance(inner, w.Spawn):
                    for i in range(len(inner.children)):
                        job_ids |= self.world.by_ukey.get(model_store.spawn_key(inner.job_id, inner.name, i), set())
            elif isinstance(inner, w.SpawnChildren):
                job_ids.add(inner.job_id)  # the parent and its steps (a journaled spawn is memoized)
                for i, _spec in inner.children:
                    job_ids |= self.world.by_ukey.get(model_store.spawn_key(inner.job_id, inner.name, i), set())
            elif isinstance(inner, w.FireCrons):
                for n in op[1]:
                    job_ids |= self.world.by_cron.get(n, set())
        t = self.world.substate(job_ids, signal_keys, buckets)
        before = {table: dict(getattr(t, ATTR[table])) for table in TABLES}
        try:
            for op in cand.ops:
                self._apply(t, op)
        except Mismatch:
            raise
        except (ops.InvalidInput, OverflowError, ValueError, TypeError, KeyError, AssertionError) as exc:
            raise Mismatch(f"the model refuses the operation: {type(exc).__name__}: {exc}") from None
        for table in TABLES:
            model_rows = getattr(t, ATTR[table])
            was = before[table]
            written = R.get(table, {})
            if not written and not model_rows and not was:
                continue
            keys = set(written)
            for k, v in model_rows.items():
                if was.get(k) is not v:
                    keys.add(k)
            keys |= was.keys() - model_rows.keys()
            for k in sorted(keys, key=repr) if len(keys) > 1 else keys:  # (the first difference named: by key)
                expected = written[k][1] if k in written else was.get(k)
                got = model_rows.get(k)
                if _rows_equal(expected, got):
                    continue
                if got is None:
                    verb = "writes" if k in written else "leaves"
                    return f"{table} {k!r}: the transaction {verb} {_brief(expected)}, the model deletes it / never writes it"
                if expected is None:
                    return f"{table} {k!r}: the model writes {_brief(got)}, the transaction {'deletes it' if k in written else 'does not'}"
                col = _diff_columns(expected, got)[0]
                return (
                    f"{table} {k!r}.{col}: transaction {_short(getattr(expected, col))}, model {_short(getattr(got, col))}"
                    + ("" if k in written else " (a row the transaction did not touch)")
                )
        return None

    # --- one transaction -----------------------------------------------------------------------------------

    def step(self, tx: Transaction | Decoded) -> None:
        r = self.result
        r.transactions += 1
        rows = self.rows_of(tx)
        self._lsn, self._last_at = lsn_str(rows.lsn), rows.at
        if rows.gap:
            r.capture_gaps += len(rows.gap)
            for k in rows.rows.get(JOBS, {}):
                self.taint.add(k)
            for table in (STEPS, EVENTS):
                for k in rows.rows.get(table, {}):
                    self.taint.add(k[0])
            for key, (b, _a) in rows.rows.get(JOBS, {}).items():  # resync to the server's old rows
                if b is not None and self.world.jobs.get(key) != b:
                    self.world.set_job(key, b)
        if not any(rows.rows.values()):
            r.empty += 1
            return
        tried: list[str] = []
        explained: Candidate | None = None
        try:
            cands = self.candidates(rows)
        except Mismatch as exc:
            cands = []
            tried.append(f"(recovery) {exc}")
        for cand in cands:
            try:
                why = self.simulate(rows, cand)
            except Mismatch as exc:
                why = str(exc)
            if why is None:
                explained = cand
                break
            tried.append(f"{cand.label}: {why}")
        if explained is not None:
            r.validated += 1
            for k in explained.kinds:
                r.by_kind[k] += 1
            for claim in _claims(explained):
                if self.ledger.terms:
                    self._claim_after_term(rows, claim)
                if claim.opts.needs_admission_lock:
                    r.admission_claims[claim.queue] += 1
        else:
            r.unexplained += 1
            involved = set(rows.rows.get(JOBS, {})) | {k[0] for t in (STEPS, EVENTS) for k in rows.rows.get(t, {})}
            tainted = bool(involved & self.taint) or bool(rows.gap)
            if not tainted:
                r.unexplained_hard += 1
            if len(r.findings) < MAX_FINDINGS:
                r.findings.append(
                    Finding(
                        "unexplained",
                        rows.lsn,
                        rows.at,
                        f"transaction xid {rows.xid} ({sum(len(v) for v in rows.rows.values())} rows) explained by "
                        f"no operation of the model" + (" — rows with a capture gap" if tainted else ""),
                        rows.describe(),
                        tried,
                        tainted,
                    )
                )
        # issue 51: claim order, judged on the rows before this transaction (soak/judges/timing/)
        self.order.observe(
            rows.rows.get(JOBS, {}),
            rows.at,
            self._lsn,
            [(c.node, c.queue, c.now, c.opts.needs_admission_lock) for c in _claims(explained)]
            if explained is not None
            else (),
        )
        # the transaction's rows become the state (on a match they equal the model's)
        for table, changed in rows.rows.items():
            for key, (_b, a) in changed.items():
                self.world.put(table, key, a)
        self.world.spill()

    def close(self) -> None:
        """Remove the scratch files of the spilled maps."""
        self.world.close()
        self.rowdec.close()

    def _claim_after_term(self, tx: TxRows, claim: w.Claim) -> None:
        """P11: a claim by a node after its own SIGTERM. Both clocks must say so: the commit (the server's
        clock, the harness's machine) more than CLAIM_SETTLE after the signal — a claim in flight at the
        signal has committed by then unless the database stalled — and the claim's own `now` (its lease
        less its ttl) more than NOW_SLACK after it, beyond any clock offset the harness gives a node: a claim
        built before the signal and held up by a stall is not one made after it."""
        t = self.ledger.terms.get(claim.node)
        if t is None:
            return
        at, now = tx.at.timestamp(), claim.now.timestamp()
        if at > t + CLAIM_SETTLE and now > t + NOW_SLACK:
            # A claim decided before the signal may read its clock only once its connection and BEGIN are
            # through: the contract fixes no instant for `now` inside the claim (Node worker, seed 64: a
            # pool connect and BEGIN under 0.16 s injected latency put `now` 1.0 s after the SIGTERM). A
            # fault of the node's route between the signal and that `now` excuses the claim; a healthy
            # route does not (soak/PROTOCOL.md P11).
            # (the fault lasted until CLAIM_SETTLE before that `now` or later: once the route lets a claim
            # through, it reads its clock — a claim long after the fault healed gets no excuse)
            faults = self.ledger.faults
            t_now = now - (faults.offset.get(claim.node, 0.0) if faults is not None else 0.0)
            held = faults.overlapping(claim.node, t, max(t, t_now)) if faults is not None else []
            if any(w[2] in ROUTE_FAULTS and w[1] >= t_now - CLAIM_SETTLE for w in held):
                self._late_excused += claim.demand
                return
            self._late_claims[claim.node] = self._late_claims.get(claim.node, 0) + claim.demand
            self._late_first.setdefault(claim.node, (at - t, tx.lsn))

    def finish_duties(self) -> None:
        r = self.result
        # issue 51: the judges of order and time (soak/judges/timing/)
        self.order.finish(self._last_at)
        r.stale_now = self.fresh.lines()
        r.claim_order = [] if r.capture_gaps else self.order.lines()  # a gap may hide the lock holder
        r.claimed_expired = self.order.claimed_expired
        lags = sorted(self.fresh.lags)
        r.timing = {
            "now_judged": self.fresh.judged,
            "now_stale": self.fresh.count,
            "now_fault_free_lag_max_s": round(self.fresh.free_lag_max, 3),
            "now_lags_under_half_s": self.fresh.small,
            "now_fault_free_lags_over_half_s": len(lags),
            "now_excused_lag_max_s": round(self.fresh.excused_lag_max, 3),
            "now_fault_free_lag_p99_s": lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
            "claims_order_judged": self.order.judged,
            "claims_with_choice": self.order.choices,
            "claims_admission_not_judged": self.order.skipped_admission,
            "claims_by_the_harness_not_judged": self.order.skipped_harness,
            "passed_over_pairs": self.order.inversions,
            "passed_over_written_concurrently": self.order.excused_written,
            "passed_over_around_a_fault": self.order.excused_fault,
            "passed_over_proven_rows": self.order.proven_rows,
            "passed_over_again_rows": self.order.repeat_rows,
            "claims_over_capacity": len(self.order.over_capacity),
            "passed_over_untraced_rows": self.order.untraced_rows,
            "untraced_transactions_needed": self.order.aborts_needed,
            "claim_hold_s": round(self.order.hold, 3),
            "claims_after_term_route_fault_rows": self._late_excused,
            "fault_events": self.fresh.faults.events,
        }
        r.drains_judged = 0 if r.capture_gaps else len(self.ledger.terms)  # a gap may hide a claim
        for node, n in sorted(self._late_claims.items()):
            after, lsn = self._late_first[node]
            r.claims_after_term.append(
                f"P11 node {node} committed claims (up to {n} row(s)) after its own SIGTERM: the first "
                f"{after:.1f} s after the signal (LSN {lsn_str(lsn)}) — on SIGTERM producers stop claiming first "
                "(operations guide, PROTOCOL §1)"
            )

    def compare(self, final: State) -> list[str]:
        """Streamed both ways (no set of every key), in chunks of CHUNK keys looked up together: each row held
        against the snapshot's, then each snapshot row the validation does not hold."""
        w = self.world

        def by_job(d: SpillDict) -> Iterable[tuple[Any, Any]]:
            return (((j, n), row) for j, by in d.items() for n, row in by.items())

        def rows_of(theirs: Any, keys: list[Any]) -> Mapping[Any, Any]:
            many = getattr(theirs, "get_many", None)  # a snapshot on disk (DiskTable): one query per chunk
            return many(keys) if many is not None else {k: theirs[k] for k in keys if k in theirs}

        def held(attr: str, keys: list[Any]) -> set[Any]:
            mine = getattr(w, attr)
            if attr in ("steps", "events"):  # (job id, name/seq) keys: the job's map of them
                by = _peek(mine, {k[0] for k in keys})
                return {k for k in keys if k[1] in by.get(k[0], ())}
            return set(_peek(mine, keys, values=False))

        mine: dict[str, Iterable[tuple[Any, Any]]] = {
            "jobs": w.jobs.items(),
            "steps": by_job(w.steps),
            "events": by_job(w.events),
            "signals": w.signals.items(),
            "rate": w.rate.items(),
            "queues": w.queues.items(),
            "crons": w.crons.items(),
        }
        diff = []
        for attr, have in mine.items():
            theirs = getattr(final, attr)
            found = 0  # keys held on both sides
            for chunk in _chunks(have):
                got = rows_of(theirs, [k for k, _ in chunk])
                found += len(got)
                diff += [f"{attr} {k!r}" for k, row in chunk if not _rows_equal(row, got.get(k))]
            if found == len(theirs):
                continue  # every snapshot key is one of those found (keys are unique): none missing here
            for keys in _chunks(iter(theirs)):
                present = held(attr, keys)
                diff += [f"{attr} {k!r}" for k in keys if k not in present]
        return sorted(diff)


CHUNK = 500  # keys compared together at the end of a validation (one disk lookup per chunk and side)


def _chunks(items: Iterable[Any]) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, CHUNK)):
        yield chunk


def _peek(d: Any, keys: Iterable[Any], values: bool = True) -> Mapping[Any, Any]:
    """The entries of `keys` that `d` holds, a spilled map's without faulting them in (`values=False`: only
    which keys, each mapped to None)."""
    many = getattr(d, "peek_many", None)
    if many is not None:
        found: Mapping[Any, Any] = many(keys, values=values)
        return found
    return {k: (d[k] if values else None) for k in keys if k in d}
