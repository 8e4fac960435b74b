"""Recovery of the candidate operations (soak/judges/refine/): from the rows one committed transaction wrote, the
model operations that could have written them, most specific first. A mixin of `Validator` (validator.py)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from model import ops
from model import store as model_store
from model import worker_ops as w
from model.envelope import decode
from model.queues import QueueOpts
from model.rows import TERMINAL, Job, Step
from soak.judges.refine.results import (
    CRONS,
    EVENTS,
    HARNESS_NODE,
    JOBS,
    LAG,
    MAX_CANDIDATES,
    QUEUES,
    RATE,
    SIGNALS,
    SKEW,
    STEPS,
    Mismatch,
    RefinementResult,
)
from soak.judges.refine.world import (
    Candidate,
    HarnessLedger,
    ObservedRetry,
    TxRows,
    World,
    _child_spec,
    _parse_at,
    _spec_of,
)
from soak.judges.timing import Freshness


def _by_ids(got: list[int], op: Any) -> tuple[Any, ...]:
    """`op`'s rows took ids `got` (id order): numbered from the first when consecutive, else given those ids (a
    sequence is shared: another session can take ids between one statement's rows — a workflow got 38563–5, 38567)."""
    return ("next_id", got[0], op) if got == list(range(got[0], got[0] + len(got))) else ("ids", got, op)


class Recovery:
    """The candidate recovery half of `Validator`; the attributes below are set by `Validator.__init__`."""

    world: World
    ledger: HarnessLedger
    result: RefinementResult
    fresh: Freshness
    _lsn: str

    # --- recovery of the candidate operations ----------------------------------------------------------

    def now_ok(self, now: datetime, at: datetime, what: str, node: str | None = None) -> None:
        """§2 clock rule: `now` within SKEW ahead of the commit and LAG behind it (the blanket bound); with
        the writer `node` known, its lag is judged against the node's own faults (soak/judges/timing/)."""
        if node is not None:
            self.fresh.judge(node, now, at, what, self._lsn)
        if now > at + SKEW:
            raise Mismatch(
                f"{what}: now {now.isoformat()} is {(now - at).total_seconds():.3f} s after the commit (> {SKEW.total_seconds():g} s skew)"
            )
        if now < at - LAG:
            raise Mismatch(
                f"{what}: now {now.isoformat()} is {(at - now).total_seconds():.1f} s before the commit (> {LAG.total_seconds():g} s)"
            )
        d = (now - at).total_seconds()
        if d > self.result.ahead_max_s:
            self.result.ahead_max_s = d
        if -d > self.result.lag_max_s:
            self.result.lag_max_s = -d

    def candidates(self, tx: TxRows) -> list[Candidate]:
        """The operation lists that could have written these rows (most specific first)."""
        R = tx.rows
        at = tx.at
        J = R.get(JOBS, {})
        S = R.get(STEPS, {})
        E = R.get(EVENTS, {})
        G = R.get(SIGNALS, {})
        head: list[tuple[str, Any]] = []  # (kind, op) applied first: config, inserts, journal, signals
        tail: list[tuple[str, Any]] = []
        choices: list[list[list[tuple[str, Any]]]] = []  # alternatives, one list chosen from each
        claimed: dict[tuple[Any, ...], list[Job]] = defaultdict(list)
        renewed: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        reclaimed: list[tuple[Job, Job]] = []
        acks: list[tuple[Job, Job]] = []
        parks: list[tuple[Job, Job]] = []
        harness_acks: list[tuple[Job, Job]] = []
        cancels: list[tuple[Job, Job]] = []
        maybe_derived_cancel: list[tuple[Job, Job]] = []
        retries: list[tuple[Job, Job]] = []
        woken: list[tuple[Job, Job]] = []
        deleted_jobs: list[Job] = []
        inserted: list[Job] = []
        for job_id, (b, a) in J.items():
            if b is None and a is not None:
                inserted.append(a)
            elif a is None and b is not None:
                deleted_jobs.append(b)
            elif b is not None and a is not None:
                if b.state in ("ready", "awaiting", "held") and a.state == "running":
                    # (held: released by this transaction's settlement, then claimed by its refill)
                    claimed[(a.leased_by, a.lease_until, a.queue)].append(a)
                elif b.state == "running" and a.state == "running" and a.attempt == b.attempt + 1:
                    # an ack's retry (or a reclaim) and a claim of the same row in one transaction (the
                    # runtime's AckClaim group commit refills the slot it freed): the ack's row between the
                    # two is not in the capture — it is the retried row, not yet leased again
                    mid = replace(a, state="ready", attempt=b.attempt, lease_until=None, leased_by=None)
                    mid = replace(mid, started_at=b.started_at)
                    grew = len(a.errors) == len(b.errors) + 1
                    if grew and isinstance(a.errors[-1], dict) and a.errors[-1].get("error") == "lease_expired":
                        reclaimed.append((b, mid))
                    else:
                        acks.append((b, mid))
                    claimed[(a.leased_by, a.lease_until, a.queue)].append(a)
                elif b.state == "running" and a.state == "running":
                    if a.cancel_requested and not b.cancel_requested:
                        cancels.append((b, a))
                    elif a.lease_until != b.lease_until or a == b:
                        renewed[(b.leased_by, a.lease_until)].append(job_id)
                    # a spend update follows a step insert (RecordStep): derived
                elif b.state == "running":
                    grew = len(a.errors) == len(b.errors) + 1
                    if b.leased_by == HARNESS_NODE:
                        harness_acks.append((b, a))
                    elif grew and isinstance(a.errors[-1], dict) and a.errors[-1].get("error") == "lease_expired":
                        reclaimed.append((b, a))
                    elif a.state == "awaiting":
                        parks.append((b, a))
                    else:
                        acks.append((b, a))
                elif b.state in ("failed", "cancelled") and a.state in ("ready", "held"):
                    retries.append((b, a))
                elif a.state == "cancelled" and b.state not in TERMINAL:
                    if b.await_scope is not None or job_id in self.ledger.cancels:
                        cancels.append((b, a))
                    else:
                        maybe_derived_cancel.append((b, a))
                elif b.state == "awaiting" and a.state == "ready":
                    woken.append((b, a))
                # held → ready (release), spend updates, no-op updates: derived from the operations
        # --- inserts: enqueue, workflows, crons, spawned children
        spawned_keys: dict[int, dict[str, list[Job]]] = defaultdict(lambda: defaultdict(list))
        plain: list[Job] = []
        wf: dict[str, list[Job]] = defaultdict(list)
        cron: list[Job] = []
        for j in sorted(inserted, key=lambda r: r.id):
            if j.unique_key and j.unique_key.startswith("$spawn:") and j.parent_id is not None:
                parts = j.unique_key.split(":")
                name = ":".join(parts[2:-1])
                spawned_keys[j.parent_id][name].append(j)
            elif j.workflow_id is not None:
                wf[j.workflow_id].append(j)
            elif j.cron_name is not None and j.cron_name in self.world.crons:
                cron.append(j)
            else:
                plain.append(j)
        for name in ("queues", "crons"):
            for key, (_b, a) in R.get(QUEUES if name == "queues" else CRONS, {}).items():
                if a is None:
                    raise Mismatch(f"belay_{name} {key!r} deleted: no model operation deletes it")
                if name == "queues":
                    self.now_ok(a.updated_at, at, "PutQueue")
                    head.append(("put_queue", ops.PutQueue(a.updated_at, a.name, a.opts)))
                else:
                    self.now_ok(a.updated_at, at, "PutCron")
                    head.append(
                        (
                            "put_cron",
                            ops.PutCron(a.updated_at, a.name, a.expression, a.worker, a.input, a.opts, a.paused),
                        )
                    )
        for j in plain:
            self.now_ok(j.inserted_at, at, f"enqueue of job {j.id}")
            head.append(("enqueue", ("next_id", j.id, ops.Enqueue(j.inserted_at, (_spec_of(j, j.inserted_at),)))))
        for wf_id, members in wf.items():
            now = members[0].inserted_at
            self.now_ok(now, at, f"workflow {wf_id} enqueue")
            ms = tuple(
                ops.WorkflowMember(
                    m.wf_name or "",
                    _spec_of(replace(m, state="ready"), now),
                    tuple(m.wf_deps or ()),
                    tuple(m.wf_ignore or ()),
                )
                for m in members
            )
            head.append(("enqueue_workflow", _by_ids([m.id for m in members], ops.EnqueueWorkflow(now, wf_id, ms))))
        if cron:
            now = cron[0].inserted_at
            self.now_ok(now, at, "cron fire")
            since = min(j.cron_slot for j in cron if j.cron_slot is not None) - timedelta(minutes=1)
            names = {j.cron_name for j in cron}
            # the slots this transaction inserted, a subset of the due plan: §8.5 "For each due minute slot
            # …, insert" — one transaction per slot, or per cron, is as legal as one for the sweep; a due
            # slot no transaction inserts is I6's ("was due but no job holds it")
            slots = frozenset((j.cron_name, j.cron_slot) for j in cron if j.cron_name and j.cron_slot is not None)
            head.append(("fire_crons", ("crons", names, cron[0].id, w.FireCrons(now, since, slots=slots))))
        # --- steps: journal writes, sleeps, spawns
        sleeps: dict[int, Step] = {}
        for (job_id, name), (b, a) in sorted(S.items(), key=lambda kv: (kv[0][0], (kv[1][1] or kv[1][0]).seq)):
            if a is None:
                continue  # deletes: prune (checked with the jobs it deletes)
            if b is not None:
                raise Mismatch(f"belay_steps {(job_id, name)!r} updated: steps are immutable (§8.2)")
            self.now_ok(a.inserted_at, at, f"step {name!r} of job {job_id}", self._holder(job_id, J))
            if name.startswith("$sleep:"):
                sleeps[job_id] = a
            elif name.startswith("$spawn:"):
                spawn_name = name[len("$spawn:") :]
                kids = {k.unique_key: k for k in spawned_keys.get(job_id, {}).get(spawn_name, [])}
                try:
                    declared = decode(a.value)
                except Exception as exc:  # noqa: BLE001
                    raise Mismatch(f"$spawn step of job {job_id}: undecodable value ({exc})") from None
                listed = w.child_id_list(declared)
                if listed is None:
                    raise Mismatch(f"$spawn step of job {job_id}: value {declared!r} is not a list of child ids")
                ids = listed
                specs = []
                for i in range(len(ids)):
                    k = model_store.spawn_key(job_id, spawn_name, i)
                    row = kids.get(k)
                    if row is None:
                        # already held: inserted by an earlier transaction — a split spawn (§8.4: "the id
                        # list is rebuilt by fetching those keys") or an earlier attempt. Found by its key,
                        # never by the id the list names; the insert skips it, so its spec is irrelevant.
                        row = self._key_holder(k)
                    if row is None:
                        raise Mismatch(f"$spawn step of job {job_id}: child {i} (key {k!r}) neither inserted nor held")
                    specs.append(_child_spec(row, a.inserted_at))
                self._no_undeclared_child(job_id, spawn_name, len(ids))
                first = min((k.id for k in kids.values()), default=self.world.next_id)
                spelled = None if listed == declared else tuple(declared)  # ids spelled as strings
                spawn = w.Spawn(a.inserted_at, job_id, spawn_name, tuple(specs), spelled)
                taken = [
                    (i, kids[k].id)
                    for i in range(len(ids))
                    if (k := model_store.spawn_key(job_id, spawn_name, i)) in kids
                ]
                if all(got == first + i for i, got in taken):
                    head.append(("spawn", ("next_id", first, spawn)))
                else:  # a concurrent insert took ids between the children's (seed 2032's two-hour soak)
                    by_index = dict(taken)  # a held child's id (-1 - i): unused
                    head.append(("spawn", ("ids", [by_index.get(i, -1 - i) for i in range(len(ids))], spawn)))
                spawned_keys.get(job_id, {}).pop(spawn_name, None)
            else:
                try:
                    value = decode(a.value)
                except Exception as exc:  # noqa: BLE001
                    raise Mismatch(f"step {name!r} of job {job_id}: undecodable value ({exc})") from None
                head.append(("record_step", w.RecordStep(a.inserted_at, job_id, name, value, a.usd_micros, a.tokens)))
        # children inserted with their keys and no `$spawn:<name>` journal in this transaction: the insert
        # half of a split spawn (§8.4 rebuilds the list from the keys; §11.8 "regardless of crashes between
        # insert and journal"), judged as SpawnChildren — the journal comes later (or never: I8 allows it)
        for parent, by_name in spawned_keys.items():
            for name, left in by_name.items():
                if not left:
                    continue
                now = left[0].inserted_at
                self.now_ok(now, at, f"spawn children of job {parent}")
                pairs = []
                for j in left:  # in id order: the order the sequence handed the ids out
                    index = (j.unique_key or "").rpartition(":")[2]
                    if not index.isdigit():
                        raise Mismatch(f"job {j.id}: spawn key {j.unique_key!r} has no child index")
                    pairs.append((int(index), _child_spec(j, now)))
                try:
                    insert = w.SpawnChildren(now, parent, name, tuple(pairs))
                except ops.InvalidInput as exc:
                    raise Mismatch(f"children of job {parent} ({name}): {exc}") from None
                head.append(("spawn_children", _by_ids([j.id for j in left], insert)))
        # --- events
        for (job_id, seq), (b, a) in sorted(E.items()):
            if a is None:
                continue
            if b is not None:
                raise Mismatch(f"belay_events {(job_id, seq)!r} updated: the event stream is append-only")
            self.now_ok(a.inserted_at, at, f"event {seq} of job {job_id}", self._holder(job_id, J))
            head.append(("emit_event", w.EmitEvent(a.inserted_at, job_id, a.payload, seq)))
        # --- signals
        children_written = [a for (_s, n), (_b, a) in G.items() if n == "$children" and a is not None]
        for (scope, name), (_b, a) in sorted(G.items()):
            if a is not None and name != "$children":
                self.now_ok(a.inserted_at, at, f"signal {scope}/{name}")
                attested = True
                if self.ledger.strict and scope.startswith("job:") and scope[4:].isdigit():
                    attested = int(scope[4:]) in self.ledger.signals
                if not attested:
                    raise Mismatch(f"signal {scope}/{name} written, but the harness recorded no signal for it")
                head.append(("deliver_signal", ops.DeliverSignal(a.inserted_at, scope, name, a.payload)))
        signal_deletes = [k for k, (b, a) in G.items() if a is None]
        # --- claims
        for (node, lease_until, queue), rows in claimed.items():
            first_claims = {r.started_at for r in rows if J[r.id][0].started_at is None}
            if len(first_claims) > 1:
                raise Mismatch(
                    f"claim by {node}: first claims started at {len(first_claims)} different times in one claim"
                )
            # the claim leaves ready_at as it found it (a wake earlier in the transaction may have set it)
            due = [r.ready_at for r in rows if r.ready_at is not None]
            if lease_until is None or node is None:
                raise Mismatch(f"claim by {node}: lease_until {lease_until} / leased_by {node} unset")
            if first_claims:
                now = next(iter(first_claims)) or at
            else:
                # `now` is not written (started_at kept): any instant the tolerance allows at which every
                # taken row is due and the lease still ahead — the commit time, moved into that interval
                lo = max([at - LAG, *due])
                hi = min(at + SKEW, lease_until - timedelta(microseconds=1))
                now = min(max(at, lo), hi)
                # With the run's lease ttl the worker's own `now` is in the row: lease_until − ttl. It
                # matters for admission — a node whose clock runs ahead sees leases expire (global
                # limit, partitions) and windows turn (rate) before the commit time does.
                if self.ledger.lease_ttl is not None:
                    stamped = lease_until - timedelta(seconds=self.ledger.lease_ttl)
                    if lo <= stamped <= hi:
                        now = stamped
            self.now_ok(now, at, f"claim of job(s) {sorted(r.id for r in rows)[:5]} by {node}", node)
            if lease_until <= now:
                raise Mismatch(
                    f"claim by {node}: lease_until {lease_until.isoformat()} not after now {now.isoformat()}"
                )
            qrow = self.world.queues.get(queue)
            try:
                qopts = QueueOpts.parse(qrow.opts) if qrow is not None else QueueOpts()
            except ops.InvalidInput:
                qopts = QueueOpts()
            claim = w.Claim(now, queue, node, len(rows), lease_until - now, qopts)
            tail.append(("claim", ("mask_claim", {r.id for r in rows}, claim)))
        # --- renewals
        for (node, lease_until), ids in renewed.items():
            if node is None or lease_until is None:
                raise Mismatch(f"renewal of {ids}: no lease holder / lease time")
            tail.append(("renew", w.Renew(at, node, tuple(sorted(ids)), lease_until)))
        # --- client cancels and retries
        for b, a in cancels:
            if self.ledger.strict and a.id not in self.ledger.cancels:
                raise Mismatch(
                    f"job {a.id} cancelled ({b.state} → {a.state}), but the harness recorded no cancel of it"
                )
            now = a.finished_at if a.state == "cancelled" and a.finished_at is not None else at
            self.now_ok(now, at, f"cancel of job {a.id}")
            tail.append(("cancel", ops.Cancel(now, a.id)))
        if maybe_derived_cancel:
            alt_cancel: list[tuple[str, Any]] = []
            for b, a in maybe_derived_cancel:
                now = a.finished_at or at
                self.now_ok(now, at, f"cancel of job {a.id}")
                if self.ledger.strict:  # not recorded (recorded cancels are taken above)
                    why = f"job {a.id} cancelled ({b.state} → {a.state}), but the harness recorded no cancel of it"
                    alt_cancel.append(("cancel", ("refuse", why)))
                else:
                    alt_cancel.append(("cancel", ops.Cancel(now, a.id)))
            choices.append([[], alt_cancel])  # doomed by settlement (derived) or a client cancel
        for b, a in retries:
            if self.ledger.strict:
                raise Mismatch(f"job {a.id} retried ({b.state} → {a.state}), but the harness retries no job")
            self.now_ok(a.ready_at or at, at, f"retry of job {a.id}")
            tail.append(("retry", ops.Retry(a.ready_at or at, a.id)))
        # --- reclaim
        if reclaimed:
            nows = {_parse_at(a.errors[-1]["at"]) for _, a in reclaimed}
            for now in sorted(nows):  # several sweeps' worth in one transaction: one Reclaim per `now`
                swept = [(b, a) for b, a in reclaimed if _parse_at(a.errors[-1]["at"]) == now]
                self.now_ok(now, at, "reclaim")
                by_attempt: dict[int, list[datetime]] = defaultdict(list)
                for b, a in sorted(swept, key=lambda ba: ba[0].id):
                    if a.state == "ready":
                        if a.ready_at is None or a.ready_at < now:
                            raise Mismatch(
                                f"reclaim retries job {a.id} at {a.ready_at}, before its now {now.isoformat()}"
                            )
                        by_attempt[b.attempt].append(a.ready_at)
                sweep = w.Reclaim(now, ObservedRetry(by_attempt), limit=len(swept))  # type: ignore[arg-type]
                tail.append(("reclaim", ("mask_reclaim", {b.id for b, _ in swept}, sweep)))
        # --- acks (one AckMany when several rows in one transaction)
        ack_ops: list[w.Ack] = []
        sleep_ops: list[tuple[str, Any]] = []
        for b, a in sorted(acks, key=lambda ba: ba[0].id):
            ack = self._ack_of(b, a, at, sleeps)
            if isinstance(ack, w.Sleep):
                sleep_ops.append(("sleep", ack))
            else:
                ack_ops.append(ack)
        for job_id in sleeps:
            if not any(isinstance(op, w.Sleep) and op.job_id == job_id for _, op in sleep_ops):
                raise Mismatch(f"$sleep step of job {job_id} journaled but the job did not go to sleep")
        if len(ack_ops) == 1:
            tail.append(("ack", ack_ops[0]))
        elif ack_ops:
            # after-terminal time: what the transaction wrote for it, else the latest ack's
            ats = [s.inserted_at for s in children_written]
            ats += [a.finished_at for b, a in maybe_derived_cancel if a.finished_at is not None]
            now = ats[0] if ats else max(x.now for x in ack_ops)
            self.now_ok(now, at, f"ack batch of jobs {[b.id for b, _a in acks][:5]}", acks[0][0].leased_by)
            tail.append(("ack_many", w.AckMany(now, tuple(ack_ops))))
        tail.extend(sleep_ops)
        for b, a in parks:
            now = at
            alts: list[list[tuple[str, Any]]] = []
            if a.await_name == "$children" and a.await_scope == f"job:{a.id}":
                alts.append([("await_children", w.AwaitChildren(now, a.id, b.attempt, a.ready_at))])
            if a.await_scope is None or a.await_name is None:
                raise Mismatch(f"job {a.id} awaiting with no await scope/name")
            alts.append([("park_await", w.ParkAwait(now, a.id, b.attempt, a.await_scope, a.await_name, a.ready_at))])
            choices.append(alts)
        for b, a in harness_acks:
            if self.ledger.strict and a.id not in self.ledger.silent_children:
                raise Mismatch(f"job {a.id} acked by {HARNESS_NODE}, but the harness recorded no such finish")
            tail.append(("harness_finish", ("harness_ack", self._ack_of(b, a, at, {}))))
        # --- awaiting → ready with no signal write: the R2 backstop
        if woken and not [k for k, (b, a) in G.items() if a is not None]:
            if all(b.await_name == "$children" for b, _ in woken):
                now = woken[0][1].ready_at or at
                self.now_ok(now, at, "reconcile")
                tail.append(("reconcile", ("mask_reconcile", {b.id for b, _ in woken}, w.Reconcile(now))))
        # --- signal deletes: await_children's clear, a client clear, or prune
        for scope, name in signal_deletes:
            if deleted_jobs:
                continue  # prune's signal ttl
            if name == "$children" and scope.startswith("job:") and any(a.id == int(scope[4:]) for _, a in parks):
                continue  # the await_children candidate clears it
            if name == "$children" and scope[4:].isdigit():
                job = self.world.jobs.get(int(scope[4:]))
                if job is not None and job.state == "running":
                    choices.append(
                        [
                            [("await_children", w.AwaitChildren(at, job.id, job.attempt))],
                            [("clear_signal", ops.ClearSignal(scope, name))],
                        ]
                    )
                    continue
            head.append(("clear_signal", ops.ClearSignal(scope, name)))
        # --- prune
        if deleted_jobs or (R.get(RATE) and any(a is None for b, a in R[RATE].values())):
            tail.append(
                (
                    "prune",
                    ("mask_prune", {j.id for j in deleted_jobs}, self._prune_of(tx, deleted_jobs, signal_deletes)),
                )
            )
        base = head + tail
        out = []
        combos: list[list[tuple[str, Any]]] = [[]]
        for alts in choices:
            combos = [c + alt for c in combos for alt in alts][:MAX_CANDIDATES]
        for extra in combos:
            seq = self._order(base + extra)
            kinds = [k for k, _ in seq]
            out.append(Candidate(" + ".join(kinds) or "no operation", [op for _, op in seq], kinds))
            if "claim" in kinds and {"ack", "ack_many", "reclaim"} & set(kinds):
                # a claim after the acks of the same transaction (a chunk refilling the slots it freed)
                late = sorted(seq, key=lambda kv: 9.5 if kv[0] == "claim" else self.ORDER.get(kv[0], 5))
                lk = [k for k, _ in late]
                out.append(Candidate(" + ".join(lk) + " (claim last)", [op for _, op in late], lk))
        return out

    ORDER: ClassVar[dict[str, int]] = {
        "put_queue": 0,
        "put_cron": 0,
        "enqueue": 1,
        "enqueue_workflow": 1,
        "fire_crons": 1,
        "spawn_children": 2,
        "spawn": 2,
        "record_step": 2,
        "emit_event": 3,
        "deliver_signal": 4,
        "clear_signal": 4,
        "claim": 5,
        "renew": 6,
        "cancel": 7,
        "retry": 7,
        "reclaim": 8,
        "ack": 9,
        "ack_many": 9,
        "sleep": 9,
        "park_await": 9,
        "await_children": 9,
        "harness_finish": 9,
        "reconcile": 10,
        "prune": 11,
    }

    def _holder(self, job_id: int, J: Mapping[int, tuple[Any, Any]]) -> str | None:
        """The node writing a running job's step or event: its lease holder (issue 51, `now` freshness)."""
        b = J[job_id][0] if job_id in J else self.world.jobs.get(job_id)
        return b.leased_by if b is not None and b.state == "running" else None

    def _order(self, seq: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return sorted(seq, key=lambda kv: self.ORDER.get(kv[0], 5))

    def _ack_of(self, b: Job, a: Job, at: datetime, sleeps: dict[int, Step]) -> Any:
        """The §7 ack (or durable sleep) that takes running row `b` to `a`."""
        grew = len(a.errors) == len(b.errors) + 1 and a.errors[: len(b.errors)] == b.errors
        if a.state == "succeeded":
            try:
                value = decode(a.result)
            except Exception as exc:  # noqa: BLE001
                raise Mismatch(f"job {a.id}: undecodable result ({exc})") from None
            now = a.finished_at or at
            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)
            return w.Ack(now, a.id, b.attempt, w.Succeed(value))
        if a.state == "cancelled":
            now = a.finished_at or at
            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)
            return w.Ack(now, a.id, b.attempt, w.CancelSelf())
        if grew and a.state in ("failed", "ready"):
            e = a.errors[-1]
            if not isinstance(e, dict) or "error" not in e or "at" not in e:
                raise Mismatch(f"job {a.id}: error entry {e!r} is not {{attempt, at, error, detail}}")
            try:
                now = _parse_at(e["at"])
            except (TypeError, ValueError) as exc:
                raise Mismatch(f"job {a.id}: error entry time {e.get('at')!r}: {exc}") from None
            self.now_ok(now, at, f"ack of job {a.id} attempt {b.attempt}", b.leased_by)
            try:
                if a.state == "failed":
                    fail = w.Fail(e["error"], e.get("detail"), None)
                else:
                    if a.ready_at is None:
                        raise Mismatch(f"job {a.id}: retried with no ready_at")
                    fail = w.Fail(e["error"], e.get("detail"), a.ready_at)
            except ops.InvalidInput as exc:
                raise Mismatch(f"job {a.id}: error entry not a valid failure: {exc}") from None
            return w.Ack(now, a.id, b.attempt, fail)
        if a.state == "ready" and not grew:
            step = sleeps.get(a.id)
            if step is not None:
                # The wake time in the SDK's own ISO-8601 spelling (decisions.md: "an ISO-8601 string"; §2:
                # "never interpret a foreign SDK's reserved values" — the spelling is not judged). Judged:
                # the value is such a string, and the job is ready at the instant it denotes ("ready_at =
                # until", decisions.md §7 table).
                try:
                    text = decode(step.value)
                    until = w.wake_time(text)
                    return w.Sleep(step.inserted_at, a.id, b.attempt, step.name[len("$sleep:") :], until, text)
                except Exception as exc:  # noqa: BLE001
                    raise Mismatch(f"job {a.id}: $sleep value is no ISO-8601 wake time ({exc})") from None
            if a.ready_at is None:
                raise Mismatch(f"job {a.id}: ready again with no ready_at")
            # snooze (or a durable sleep on its journaled time, or a park on a signal already present: the
            # same row, ready at a time with one attempt credited)
            return w.Ack(at, a.id, b.attempt, w.Snooze(a.ready_at))
        raise Mismatch(
            f"job {a.id}: running → {a.state} matches no §7 outcome (errors {len(b.errors)} → {len(a.errors)})"
        )

    def _key_holder(self, key: str) -> Job | None:
        """The row holding a spawn child's `always` key (§5.2: "dedupes forever"), if any."""
        for i in sorted(self.world.by_ukey.get(key, ())):
            j: Job | None = self.world.jobs.get(i)
            if j is not None and j.unique_mode in ("window", "always"):
                return j
        return None

    def _no_undeclared_child(self, parent: int, name: str, declared: int) -> None:
        """A `$spawn:<name>` journal of n ids while a child with key index ≥ n is already held: the
        journal does not list every child its keys hold (§8.4 "the id list is rebuilt by fetching those
        keys"; I8 "a parent has exactly the children its spawn declared")."""
        prefix = f"$spawn:{parent}:{name}:"
        for i in sorted(self.world.by_parent.get(parent, ())):
            j = self.world.jobs.get(i)
            key = j.unique_key if j is not None else None
            if key is not None and key.startswith(prefix):
                index = key[len(prefix) :]
                if index.isdigit() and int(index) >= declared:
                    raise Mismatch(
                        f"$spawn:{name} of job {parent} journals {declared} child id(s), but job {i} already holds "
                        f"key {key!r}: the list is not the one its keys rebuild (§8.4)"
                    )

    def _prune_of(self, tx: TxRows, deleted: list[Job], signal_deletes: list[tuple[str, str]]) -> w.Prune:
        now = tx.at
        retention: dict[str, int | None] = {"succeeded": None, "failed": None, "cancelled": None}
        for state in retention:
            fin = [j.finished_at for j in deleted if j.state == state and j.finished_at is not None]
            if fin:
                delta = (now - max(fin)).total_seconds()
                retention[state] = max(0, math.ceil(delta) - 1)
        ttl = None
        if signal_deletes:
            youngest = max(self.world.signals[k].inserted_at for k in signal_deletes if k in self.world.signals)
            ttl = max(0, math.ceil((now - youngest).total_seconds()) - 1)
        try:
            return w.Prune(now, retention, ttl, limit=max(1, len(deleted)))
        except ops.InvalidInput as exc:
            raise Mismatch(f"prune: {exc}") from None
