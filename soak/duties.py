"""Worker duties (P1 … P17): what PROTOCOL.md and contract §§5–9 ask of a worker beyond the §11 invariants.

Pure, like soak/checker.py: every rule reads the post-drain snapshot, the ledger (with the workers'
observations) and the harness history (faults, driver actions, lease samples). Each duty ends `valid`
only when it held AND the scenarios that could expose its violation occurred (soak/coverage.py decides
the latter); `invalid` names the job or node and what went wrong.

| duty | source | rule |
|---|---|---|
| P1 | PROTOCOL §1 | a worker never exits by itself (database loss included) except the exits a kind asks for, which it records as an `exit` observation first; a worker that cannot stay up ends the run |
| P2 | §6 | leases are renewed: no attempt loses its lease while its node is alive, not stopped, not cut off and the database up (also when another node's clock runs ahead) |
| P3 | §8.6, §7 | a cancel requested while a job runs is honoured at its next boundary, a park included: the job ends cancelled |
| P4 | PROTOCOL §1, operations "Shutdown" | on SIGTERM a worker drains: exits 0 within the grace (≤ 15 s) and the jobs it was running end by their own acks, not by lease expiry, and are not handed back (an ack to ready — a retry, a snooze, a release — that ends the attempt without the job's own work) |
| P5 | §6 | claims take claimable jobs in priority order (priority ASC, ready_at, id): across priorities from the priority samples, within a priority from the committed claims (soak/commits/timing.py) |
| P6 | §8.5 | cron slots are inserted as their `belay_crons` row says: queue (opts), kind, input |
| P7 | §8 (`$sleep:`) | a durable sleep journals its wake time (`$sleep:<name>`) before parking and does not sleep again on resume |
| P8 | PROTOCOL §2 | every successful result carries the attempt that produced it |
| P9 | PROTOCOL §3 | every soak job ends as its kind prescribes (the ledger's expected outcome), cancels of parked jobs included |
| P10 | §7 step 2, §8.4 (R1) | every terminal write of a child delivers `$children` to its parent, unconditionally |
| P11 | operations "Shutdown", PROTOCOL §1 | on SIGTERM producers stop claiming first: no attempt is claimed by a node after its own SIGTERM |
| P12 | §8.5 | a cron slot is inserted only once due (its whole UTC minute reached, by the inserting node's clock) and never after its row was paused |
| P13 | §8.6 | a cancel requested while a job runs stops it at the next step boundary: at most one step is journaled after the request |
| P14 | §6 | leases are renewed each ttl/3: per node, no renewal interval (from the lease samples) above ttl/3 + one sample interval + the node's own faults by another ttl/3, nor two above it |
| P15 | §7 outcome table, decisions.md | a wait spends no attempt: every park raises max_attempts by one |
| P16 | §6, §7 | attempts are bounded: no job's attempt exceeds its max_attempts (a reclaim on the last attempt fails the job) |
| P17 | §6, PROTOCOL §1 | expired leases are reclaimed: a sweeper runs at least every 2 s, so no row stays running with its lease expired (counted from when it became running) for more than 5 s while some node runs free of its own faults |
| P18 | §6 admission | claims apply the queue's `belay_queues` options: never more live leases than `global_limit` on `soak-global` (lease samples), and every claim on an admission queue admitted as the model admits it — global limit, rate window (trace validation) |
| P19 | §8.2 | the attempt whose step's returned spend crossed a budget acks a failure `budget_exceeded` (no retry, no success, no snooze), unless it never acked (crash, kill, lost lease) |
| P20 | PROTOCOL §3.8 | the evidence a kind promises exists: every `slow` attempt that journaled `begin` or wrote `pre_ack` emitted its `start` event first |

The time duties (P4's grace, P11, P12, P13, P14) compare the harness's clock (the fault log's `t`, lease
samples' `at`, the driver's cancel times) with the timestamps the rows carry (a worker's `now`:
`inserted_at`, `lease_until`), allowing for the node's own declared clock offset (`BELAY_CLOCK_OFFSET`).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from model.state import in_key_order
from soak.commits.spill import TimeSeries, _Scratch

DUTIES: dict[str, str] = {
    "P1": "PROTOCOL §1: stays up — never exits by itself (database loss included) except the exits a kind asks for",
    "P2": "§6: renews its leases (every ttl/3): no lease lost while its node is alive, running and connected",
    "P3": "§8.6: a cancel requested while a job runs is honoured at the next boundary, a park included",
    "P4": "PROTOCOL §1: on SIGTERM, drains — exit 0 within the grace, running jobs finished, not abandoned "
    "to lease expiry nor handed back",
    "P5": "§6: claims in priority order (priority ASC, ready_at ASC NULLS FIRST, id ASC)",
    "P6": "§8.5: cron slots inserted as the belay_crons row says (queue, kind, input)",
    "P7": "§8 $sleep: a durable sleep journals its wake time before parking and does not sleep again",
    "P8": "PROTOCOL §2: every successful result carries the attempt that produced it",
    "P9": "PROTOCOL §3: every soak job ends as its kind prescribes (cancels of parked jobs included)",
    "P10": "§7/§8.4 R1: every terminal write of a child delivers $children to its parent, unconditionally",
    "P11": "operations Shutdown, PROTOCOL §1: on SIGTERM a node stops claiming — no attempt claimed after its own SIGTERM",
    "P12": "§8.5: a cron slot is inserted only when due (its minute reached) and not after its row is paused",
    "P13": "§8.6: a cancel requested while a job runs stops it at the next step boundary (≤ 1 step journaled after)",
    "P14": "§6: leases renewed each ttl/3 — per node, no two renewal intervals above ttl/3 + 0.5 s + its own faults",
    "P15": "§7 (decisions.md outcome table): a wait spends no attempt — every park raises max_attempts by one",
    "P18": "§6 admission: claims apply the queue's belay_queues options (global_limit, rate) — no more live "
    "leases than global_limit, rate windows as the model admits",
    "P17": "§6, PROTOCOL §1: expired leases are reclaimed — a sweeper at least every 2 s, no lease left expired",
    "P16": "§6/§7: attempts are bounded — no attempt beyond max_attempts (reclaim on the last attempt fails the job)",
    "P19": "§8.2: a step whose returned spend crosses a budget fails the job budget_exceeded in the same attempt's "
    "ack — not a retry, a success or a snooze",
    "P20": "PROTOCOL §3.8: the evidence a kind promises exists — every `slow` attempt that ran emitted its `start` "
    "event before its `begin` step",
}
TERMINAL = ("succeeded", "failed", "cancelled")
SKEW_SLACK = 1.0  # seconds of clock disagreement tolerated when comparing a worker's timestamps with the harness's
DRAIN_LIMIT = 15.0  # PROTOCOL §1: grace ≤ 15 s
GRACE_MIN = 10.0  # PROTOCOL §1: grace ≥ 10 s
CLAIM_SETTLE = 1.5  # a claim in flight at SIGTERM has committed this long after it (else: claimed after SIGTERM)
STAMP_SLACK = 0.05  # rounding between a worker's timestamps and the harness clock (same machine)
PARKING_KINDS = ("awaiter", "parent", "sleeper")  # the soak kinds that park (P15)
SAMPLE_EVERY = 0.5  # s: the harness's lease-sample interval (soak/scenarios.py sample_every)
SAMPLE_HIDES = 0.9  # × ttl/3: a gap between two lease samples this long may hide a renewal (P14)


SAMPLE_TYPES = ("lease_sample", "priority_sample")  # two a second for the whole run: kept on disk


class Samples:
    """The lease samples in time order as (at, {(job, attempt): (node, lease_until, kind)}) — each one
    consistent read of every running row — streamed from the run's TimeSeries (issue 27: a long run's
    samples are never all in memory)."""

    def __init__(self, series: TimeSeries) -> None:
        self.series = series

    @staticmethod
    def _rows(e: Mapping[str, Any]) -> dict[tuple[int, int], tuple[str, float | None, str]]:
        return {(int(j), int(a)): (n, u, k) for j, a, n, u, k in e.get("rows", ())}

    def __iter__(self) -> Iterator[tuple[float, dict[tuple[int, int], tuple[str, float | None, str]]]]:
        for at, e in self.series.by_time():
            yield at, self._rows(e)

    def __len__(self) -> int:
        return len(self.series)

    def first_at_or_after(self, t: float) -> tuple[float, dict[tuple[int, int], tuple[str, float | None, str]]] | None:
        found = self.series.first_at_or_after(t)
        return None if found is None else (found[0], self._rows(found[1]))


Key = tuple[int, int]  # (job id, attempt)


class AttemptFacts(_Scratch):
    """What the lease samples say of each attempt they saw running — its node and kind, when it was first
    and last seen, its first and latest lease_until, whether a renewal was seen — in a SQLite scratch
    table (issue 27: a two-hour soak sees ~80,000 attempts; five dicts of them were a growing part of the
    check). Built by `sample()` in time order: only the attempts of the latest sample stay in memory (an
    attempt is seen while it runs, then never again; one that comes back is read back from disk)."""

    def __init__(self, directory: str | None = None) -> None:
        db = self._open("belay-attempts-", 2048, directory)
        db.execute(
            "CREATE TABLE att (job INTEGER NOT NULL, attempt INTEGER NOT NULL, node TEXT, kind TEXT, "
            "first_at REAL NOT NULL, last_at REAL NOT NULL, first_until REAL, last_until REAL, "
            "renewed INTEGER NOT NULL, PRIMARY KEY (job, attempt)) WITHOUT ROWID"
        )
        db.execute("BEGIN")
        self._live: dict[Key, list[Any]] = {}  # the attempts of the latest sample, being updated

    def _conn(self) -> Any:
        if self._db is None:
            raise ValueError("the attempt facts are closed")
        return self._db

    def _row(self, key: Key) -> list[Any] | None:
        live = self._live.get(key)
        if live is not None:
            return live
        row = (
            self._conn()
            .execute(
                "SELECT node, kind, first_at, last_at, first_until, last_until, renewed FROM att WHERE job = ? AND attempt = ?",
                key,
            )
            .fetchone()
        )
        return None if row is None else list(row)

    def sample(self, at: float, rows: Iterable[tuple[Key, str | None, float | None, str]]) -> list[Key]:
        """One lease sample's rows ((job, attempt), node, lease_until, kind); returns the attempts seen for
        the first time."""
        new: list[Key] = []
        seen: dict[Key, list[Any]] = {}
        for key, node, until, kind in rows:
            rec = self._live.pop(key, None) or self._row(key)
            if rec is None:
                rec = [node, kind, at, at, until, until, 0]
                new.append(key)
            else:
                if node:
                    rec[0] = node
                rec[1], rec[3] = kind, at
                if until is not None:
                    if rec[5] is not None and until > rec[5] + 0.05:
                        rec[6] = 1
                    rec[5] = until
            seen[key] = rec
        self._store(self._live)  # attempts that left the samples
        self._live = seen
        return new

    def _store(self, recs: Mapping[Key, list[Any]]) -> None:
        if recs:
            self._conn().executemany(
                "INSERT OR REPLACE INTO att VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(*k, *r) for k, r in recs.items()]
            )

    def finish(self) -> None:
        self._store(self._live)
        self._live = {}
        db = self._conn()
        db.execute("CREATE INDEX att_node ON att (node, first_at)")
        db.execute("COMMIT")

    def _field(self, key: Key, i: int) -> Any:
        rec = self._row(key)
        return None if rec is None else rec[i]

    def node(self, key: Key) -> str | None:
        return self._field(key, 0)

    def first_at(self, key: Key) -> float | None:
        return self._field(key, 2)

    def first_until(self, key: Key) -> float | None:
        return self._field(key, 4)

    def last_until(self, key: Key) -> float | None:
        return self._field(key, 5)

    def of_node(self, node: str) -> Iterator[tuple[float, Key, float | None, str]]:
        """(first seen, (job, attempt), first lease_until, kind) of the node's attempts, by first seen."""
        cur = self._conn().execute(
            "SELECT first_at, job, attempt, first_until, kind FROM att WHERE node = ? ORDER BY first_at, job, attempt",
            (node,),
        )
        while rows := cur.fetchmany(1000):
            for at, job, attempt, until, kind in rows:
                yield at, (job, attempt), until, kind

    def renewed(self) -> int:
        return self._conn().execute("SELECT count(*) FROM att WHERE renewed = 1").fetchone()[0]

    def longer_than(self, seconds: float) -> list[Key]:
        rows = self._conn().execute(
            "SELECT job, attempt FROM att WHERE last_at - first_at > ? ORDER BY job, attempt", (seconds,)
        )
        return [(j, a) for j, a in rows]

    def __len__(self) -> int:
        return self._conn().execute("SELECT count(*) FROM att").fetchone()[0] + len(self._live)


class Evidence:
    """What the history says, indexed once for the duties and the coverage table. The lease and priority
    samples (`SAMPLE_TYPES`: most of a long run's history) go to disk-backed series; `samples` gives
    further sample events (a stream read from history.jsonl) when `history` leaves them out."""

    def __init__(
        self, history: Sequence[Mapping[str, Any]], ttl: float, samples: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self.ttl = ttl
        self.by_type: dict[str, Any] = defaultdict(list)
        self.series = {t: TimeSeries() for t in SAMPLE_TYPES}
        t0 = float("inf")
        for e in itertools.chain(history, samples):
            t0 = min(t0, float(e["t"]))
            kind = e.get("type")
            if kind in self.series:
                self.series[kind].append(float(e.get("at", e["t"])), e)
            else:
                self.by_type[kind].append(e)
        for kind, series in self.series.items():
            self.by_type[kind] = series  # iterated as recorded, like the other types' lists
        self.t0 = t0 if t0 != float("inf") else 0.0
        # per (job, attempt) seen running: node, kind, first and last seen, first and latest lease_until,
        # renewed — on disk but for the latest sample's attempts (AttemptFacts)
        self.attempts = AttemptFacts()
        self.skewed_nodes = {
            e["node"]: float(e["clock_skew"]) for e in self.by_type["worker_start"] if e.get("clock_skew")
        }
        self.skew_seen: dict[str, float] = {}
        # every lease sample in time order: (at, {(job, attempt): (node, lease_until, kind)}) — a sample
        # lists every running row of one consistent read (soak/scenarios.py)
        self.samples = Samples(self.series["lease_sample"])
        for at, e in self.series["lease_sample"].by_time():
            rows = [((int(j), int(a)), node, until, kind) for j, a, node, until, kind in e.get("rows", ())]
            self.attempts.sample(at, rows)
            for _key, node, until, _kind in rows:
                if until is not None and node in self.skewed_nodes and (ahead := until - at - ttl) > 0.1:
                    self.skew_seen[node] = max(self.skew_seen.get(node, 0.0), ahead)
        self.attempts.finish()
        self.max_skew = max([0.0, *self.skewed_nodes.values()])

    def close(self) -> None:
        for series in self.series.values():
            series.close()
        self.attempts.close()

    def long_attempts(self) -> list[tuple[int, int]]:
        """Attempts seen holding their lease for longer than the ttl (they needed a renewal)."""
        return self.attempts.longer_than(self.ttl)


def _errors_for(job: Any, attempt: int, error: str) -> list[Mapping[str, Any]]:
    return [e for e in job.errors if isinstance(e, Mapping) and e.get("attempt") == attempt and e.get("error") == error]


def _ts(value: Any) -> float:
    from datetime import datetime

    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value)).timestamp()


# --- the duties -----------------------------------------------------------------------------------------------


def p1_stays_up(r: Any, ledger: Any, ev: Evidence, timeline: Any) -> None:
    deliberate = {o.node for o in ledger.observations if o.phase == "exit"}
    for e in ev.by_type["worker_unstable"]:
        r.add([f"P1 {e['message']}"])
    exits = ev.by_type["worker_exit"]
    r.checks += len(exits) + len(ev.by_type["worker_start"])
    for e in exits:
        if e["node"] in deliberate:
            continue
        t = float(e["t"])
        near = [d for d in timeline.db_down if d[0] - 1 <= t <= (d[1] if d[1] != float("inf") else t) + 60]
        why = (
            f" {t - near[-1][0]:.1f}s after a PostgreSQL crash (restart took {(near[-1][1] - near[-1][0]):.2f}s)"
            if near
            else ""
        )
        r.add(
            [
                f"P1 node {e['node']} exited by itself (status {e.get('code')}){why} without an `exit` observation: "
                "a worker must survive database loss and exit only when a kind asks (PROTOCOL.md §1)"
            ]
        )
    r.notes.append(f"{len(exits)} self-exit(s), {len(deliberate)} recorded as deliberate by a kind")


def p2_renews_leases(r: Any, state: Any, ev: Evidence, timeline: Any) -> None:
    ttl = ev.ttl
    for job in in_key_order(state.jobs):
        for e in job.errors:
            if not (isinstance(e, Mapping) and e.get("error") == "lease_expired"):
                continue
            attempt = e.get("attempt")
            node = ev.attempts.node((job.id, attempt))
            if node is None:
                continue
            r.checks += 1
            t1 = _ts(e["at"])
            first_seen = ev.attempts.first_at((job.id, attempt)) or t1
            if first_seen > t1 - ttl / 2:
                continue  # held for less than half a ttl when it expired: no renewal was due yet
            # issue 51: judged per node, each fault excusing only its own duration. The lease's last renewal
            # set it to expire at `until` (the holder's clock, its offset taken off); a node that renews
            # each ttl/3 renews within any stretch of [until − ttl, until] longer than ttl/3 + one sample
            # interval + FAULT_RECOVER that is free of its own faults (`_own_faults`) — the lease then
            # outlives `until`. The stretch ends at the reclaim if that came first (a reclaimer whose clock
            # runs ahead, less the largest offset) and at the node's death.
            last = ev.attempts.last_until((job.id, attempt))
            offset = ev.skewed_nodes.get(node, 0.0)
            expiry = (float(last) - offset) if last is not None else t1
            end = min(expiry, t1 - ev.max_skew, timeline.ended.get(node, float("inf")))
            begin = max(expiry - ttl, timeline.started.get(node, float("inf")))
            faults = [w for w in _own_faults(timeline, node, _machine_stalls(ev)) if w[0] <= end and w[1] >= begin]
            stretches = _free_stretches(faults, begin, end)
            whole = not faults and end >= expiry  # the whole ttl free: no renewal at all
            free = max((n for n, _after in stretches), default=0.0)
            # a renewal begun in a stretch must commit in it (one call, CALL_S), after the sample granularity;
            # after a fault the first call may also wait out a retry backoff (RETRY_BACKOFF_S)
            if whole or any(
                n > ttl / 3 + SAMPLE_EVERY + CALL_S + (RETRY_BACKOFF_S if after else 0.0) for n, after in stretches
            ):
                skew = f" (node clocks ahead by up to {ev.max_skew:.2f}s)" if ev.max_skew else ""
                r.add(
                    [
                        f"P2 job {job.id}: attempt {attempt} on node {node} lost its lease (lease_expired at {e['at']}) "
                        f"although {node} was alive, not stopped, connected and the database up for {free:.1f}s of "
                        f"the ttl before its lease ran out{skew}: it did not renew its lease in time (§6: every "
                        f"ttl/3, {ttl / 3:.1f}s)"
                    ]
                )
    skewed = sorted(ev.skewed_nodes)  # one name per incarnation: a long run has hundreds — name a few
    named = ", ".join(skewed[:5]) + (f" … ({len(skewed)} incarnations)" if len(skewed) > 5 else "")
    r.notes.append(
        f"{ev.attempts.renewed()} renewal(s) seen in lease samples; {len(ev.long_attempts())} attempt(s) held "
        f"a lease longer than the ttl; clock-skewed nodes {named or '-'} "
        f"(ahead by up to {max(ev.skew_seen.values(), default=0):.2f}s as seen in their leases)"
    )


def p3_cancel_at_park(r: Any, state: Any, ev: Evidence) -> None:
    signals = defaultdict(list)
    for e in ev.by_type["signal"]:
        signals[e["job_id"]].append(float(e["t"]))
    for e in ev.by_type["cancel"]:
        if e.get("plan") != "cancel_at_park" or e.get("result") != "CancelRequested":
            continue
        job = state.jobs.get(e["job_id"])
        if job is None:
            continue
        tc = float(e["t"])
        if any(t < tc for t in signals[job.id]):
            continue  # the signal was there before the request: the job may have legitimately finished first
        r.checks += 1
        if job.terminal and job.state != "cancelled":
            r.add(
                [
                    f"P3 job {job.id} ({job.worker}): a cancel was requested at +{tc - ev.t0:.1f}s while it ran, before its "
                    f"await; it then {'parked and ' if job.attempt > 1 else ''}ended {job.state} (attempt {job.attempt}) "
                    "instead of cancelled: a park/resume is a step boundary that must honour the pending request"
                ]
            )


def p4_drains(r: Any, state: Any, ev: Evidence, timeline: Any, ledger: Any = None) -> None:
    drained = {e["node"]: e for e in ev.by_type["worker_drained"]}
    exits = [o for o in (ledger.observations if ledger is not None else ()) if o.phase == "exit"]
    for e in ev.by_type["worker_drain_term"]:
        node, t = e["node"], float(e["t"])
        r.checks += 1
        d = drained.get(node)
        if d is None:
            continue
        end = t + float(d.get("seconds") or DRAIN_LIMIT)
        asked = [o for o in exits if o.node == node and t - 2 <= _ts(o.at) <= end + 2]
        late = d.get("seconds") is not None and d["seconds"] > DRAIN_LIMIT + 2
        if asked and d.get("code") != 0 and not late:  # a kind asked the draining worker to die: not a drain
            r.notes.append(f"node {node} exited during its drain because a kind asked it to (exit observation)")
            continue
        if d.get("timeout") or d.get("seconds") is None or d["seconds"] > DRAIN_LIMIT + 2:
            r.add(
                [
                    f"P4 node {node} did not exit within {DRAIN_LIMIT:.0f}s of SIGTERM "
                    f"({'still running after ' + str(d.get('timeout')) + 's' if d.get('timeout') else d.get('seconds')})"
                ]
            )
        elif d.get("code") != 0:
            r.add([f"P4 node {node} exited with status {d.get('code')} after SIGTERM (PROTOCOL §1: drain, exit 0)"])
        handed_back(r, state, node, e)
        # A PostgreSQL crash within a ttl before the SIGTERM (or during the drain) can have committed a claim
        # whose response never reached the node (its connection died with the server): the node never knew
        # that job, so a lease it lets expire is the crash's doing, not the drain's.
        if timeline.db_down_during(t - ev.ttl, end + 1):
            continue
        # issue 13: a partition or stall of this node's route within a ttl before SIGTERM or during the
        # drain can expire a lease the node could not renew — that is the network's doing, not the drain's.
        if timeline.cut_during(node, t - ev.ttl, end + 1):
            continue
        # Every attempt this node held around its SIGTERM: the ones the nemesis saw running at the signal and
        # the ones lease samples attribute to it (claimed later, or missed by the nemesis's read).
        if any(a <= t and b >= t - ev.ttl - 2 for a, b in timeline.stopped.get(node, ())):
            continue  # SIGSTOPped shortly before: its leases may have lapsed while it was frozen (P2's business)
        held = {(int(j), int(a)): k for j, a, k in e.get("running", ())}
        listed = set(held)
        for _at, key, _until, kind in ev.attempts.of_node(node):
            held.setdefault(key, kind if kind is not None else "?")
        lived = d.get("seconds")
        for (job_id, attempt), kind in sorted(held.items()):
            job = state.jobs.get(job_id)
            if job is None:
                continue
            # Only a lease that expired after the SIGTERM is the drain's: one gone before it was lost earlier.
            expired = [x for x in _errors_for(job, attempt, "lease_expired") if x.get("at") and _ts(x["at"]) >= t - 1]
            if (job_id, attempt) in listed:
                r.checks += 1
            if not expired or ((u := ev.attempts.last_until((job_id, attempt))) is not None and u < t):
                continue  # no lease expiry, or the lease had already lapsed before the SIGTERM
            if isinstance(lived, int | float) and lived < GRACE_MIN - 0.5:
                r.add(
                    [
                        f"P4 job {job_id} ({kind}) attempt {attempt} was running on {node}, which exited "
                        f"{lived}s after its SIGTERM and left the job to lease expiry: the grace must be at "
                        f"least {GRACE_MIN:.0f}s (PROTOCOL §1: running jobs get the grace to finish)"
                    ]
                )
            elif (job_id, attempt) in listed and kind != "slow":
                r.add(
                    [
                        f"P4 job {job_id} ({kind}) attempt {attempt} was running on {node} when it got SIGTERM; the "
                        f"worker exited after {lived}s without finishing it (its lease expired): SIGTERM "
                        "must let running jobs finish within the grace"
                    ]
                )


KIND_ERRORS: dict[str, tuple[str, ...]] = {  # errors a soak kind's own code ends an attempt with (PROTOCOL §3)
    "steps": ("Planned",),  # raise_after on attempt 1
    "flaky": ("Planned",),  # until_attempt
    "member": ("Fail",),
}


def handed_back(r: Any, state: Any, node: str, term: Mapping[str, Any]) -> None:
    """P4's second rule: jobs the node was running at its SIGTERM are finished, not handed back.

    Operations guide "Shutdown": "Running jobs get the shutdown grace to finish; whatever survives is left
    to lease expiry"; PROTOCOL §1: "on SIGTERM: stop claiming, let running jobs finish within a grace
    period". A worker that acks its running jobs back to ready (a retry, a snooze, a release) breaks both.

    Evidence (the final rows; each attempt the nemesis listed running on the node at the signal): the
    attempt ended without ending the job — a later attempt ran it (`attempt` > the listed one) — and not
      * by lease expiry (a `lease_expired` entry for it: a job that outlived the grace, or a crash; the
        first rule judges those), nor
      * by an error its kind raises by itself (`KIND_ERRORS`, PROTOCOL §3: a planned failure is the
        job's own work), nor
      * by a park — not told apart from a snooze or a release in the final row, so the parking kinds
        (`PARKING_KINDS`) are not judged here (a committed history would show the ack's outcome).
    Whatever else ended the attempt — no entry at all (a snooze or a release: §7 appends no error) or
    another error (a retry the worker made up) — handed the job back. A `slow` job (whose `nap` may
    outlast the grace) is judged too: it may be left to lease expiry, not handed back."""
    for job_id, attempt, kind in term.get("running") or ():
        job = state.jobs.get(int(job_id))
        attempt = int(attempt)
        if job is None or job.attempt <= attempt or kind in PARKING_KINDS:
            continue
        entries = [e for e in job.errors if isinstance(e, Mapping) and e.get("attempt") == attempt]
        errors = [e.get("error") for e in entries]
        if "lease_expired" in errors or any(x in KIND_ERRORS.get(str(kind), ()) for x in errors):
            continue
        how = f"an error entry {errors[-1]!r} (a retry)" if errors else "no error entry (a snooze or a release)"
        r.add(
            [
                f"P4 job {job.id} ({kind}) attempt {attempt} was running on {node} when it got SIGTERM; that "
                f"attempt ended with {how} and attempt {attempt + 1} ran the job again: the worker handed it "
                'back instead of letting it finish within the grace (operations guide "Shutdown": running '
                "jobs get the shutdown grace to finish; whatever survives is left to lease expiry)"
            ]
        )


def _crossing(job: Any, steps: Sequence[Any]) -> Any:
    """The job's crossing step: the first (in seq order) after which a cumulative spend exceeds (strictly)
    a non-NULL budget column, as I4 defines it; None when the costs never cross."""
    usd = tokens = 0
    for s in sorted(steps, key=lambda x: x.seq):
        usd += s.usd_micros
        tokens += s.tokens
        if (job.budget_usd_micros is not None and usd > job.budget_usd_micros) or (
            job.budget_tokens is not None and tokens > job.budget_tokens
        ):
            return s
    return None


def p19_crossing_fails(r: Any, state: Any, steps: Mapping[int, Mapping[str, Any]]) -> int:
    """Contract §8.2: "If a returned spent exceeds its budget column, the SDK MUST fail the job with error
    budget_exceeded" — the attempt that journaled the crossing step fails the job in its own ack.

    Evidence, from the final rows: the crossing step (`_crossing`) names the attempt that ran it (its value's
    `attempt`, PROTOCOL §3.3); that attempt must be the job's last, ended `failed` with its entry
    `budget_exceeded`. Excuse: the attempt never acked — a `lease_expired` entry for it (a crash or kill right
    after the step, `crash_at_crossing`, or a lost lease); the next attempt's pre-flight then fails the job,
    which is I4's rule. Anything else is a finding naming the job and attempt: a later attempt after an
    entry of the crossing attempt (a retry), after none (a snooze or release), a success, or another error.
    This reads the final rows only, with or without a committed history: every way the crossing attempt can
    end shows in them (an error entry, a later attempt, the terminal state); the history would add only which
    ack it was (a snooze, a park or a release all read "no error entry, a later attempt"), not a case the
    rows miss. A job not terminal at the snapshot is not judged (I1's). Returns the crossing attempts judged
    (those that acked): the scenario."""
    from model.envelope import decode

    judged = 0
    for job in in_key_order(state.jobs):
        if job.budget_usd_micros is None and job.budget_tokens is None:
            continue
        step = _crossing(job, list(steps.get(job.id, {}).values()))
        if step is None:
            continue
        try:
            value = decode(bytes(step.value))
        except Exception:  # noqa: BLE001 - a foreign value: its attempt is unknown
            value = None
        attempt = value.get("attempt") if isinstance(value, Mapping) else None
        if not isinstance(attempt, int):
            r.notes.append(f"job {job.id}: crossing step {step.name!r} names no attempt; not judged")
            continue
        r.checks += 1
        entries = [e for e in job.errors if isinstance(e, Mapping) and e.get("attempt") == attempt]
        errors = [e.get("error") for e in entries]
        if "lease_expired" in errors:
            continue  # never acked: the next attempt's pre-flight fails it (I4)
        if job.state not in TERMINAL:
            continue  # not finished at the snapshot (an unfinished drain): I1's business
        judged += 1
        if job.attempt == attempt and job.state == "failed" and errors[-1:] == ["budget_exceeded"]:
            continue
        if job.attempt > attempt:
            how = f"acked {errors[-1]!r} as a retry" if errors else "ended without an error entry (a snooze or release)"
            what = f"{how}; attempt {job.attempt} ran next (the job ended {job.state})"
        else:
            what = f"ended the job {job.state}" + (f" with error {errors[-1]!r}" if errors else "")
        r.add(
            [
                f"P19 job {job.id} ({job.worker}) attempt {attempt} journaled step {step.name!r}, whose returned "
                f"spend crossed its budget, and {what}: the same attempt must fail the job with error "
                "budget_exceeded (§8.2: no retry)"
            ]
        )
    return judged


def p20_evidence(r: Any, state: Any, ledger: Any, steps: Mapping[int, Mapping[str, Any]]) -> int:
    """P20 (issue 51): the evidence a kind's protocol promises, checked to exist.

    PROTOCOL §3.8: a `slow` attempt "1. emit[s] an event (`belay_events`) `{"phase": "start", "attempt": a,
    "node": BELAY_NODE}`; 2. step `begin`" … "4. … insert a `pre_ack` observation". The checker's
    lease-renewal rule (I1), I4's duplicate-execution count and the zombie scenarios read which node ran an
    attempt from that event: a worker that skips it makes those judges vacuous (nothing to judge reads as
    nothing wrong). So every `slow` attempt the database shows ran — its `begin` step's value names the
    attempt, or a `pre_ack` observation names it — must have its `start` event. Events are never pruned
    during a run (PROTOCOL §1) and the event comes first, so a crash cannot explain a missing one. Returns
    the attempts judged (the scenario)."""
    started: set[tuple[int, Any]] = set()
    for (job_id, _seq), event in state.events.items():
        p = event.payload
        if isinstance(p, Mapping) and p.get("phase") == "start":
            started.add((job_id, p.get("attempt")))
    ran: dict[tuple[int, int], str] = {}
    for job in in_key_order(state.jobs):
        if job.worker != "slow":
            continue
        begin = steps.get(job.id, {}).get("begin")
        attempt = _step_attempt(begin) if begin is not None else None
        if attempt is not None:
            ran[(job.id, attempt)] = "journaled step 'begin'"
    slow = {job.id for job in state.jobs.values() if job.worker == "slow"}
    for o in ledger.observations:
        if o.phase == "pre_ack" and o.job_id in slow:
            ran.setdefault((o.job_id, o.attempt), "wrote a pre_ack observation")
    missing = sorted(key for key in ran if key not in started)
    r.checks += len(ran)
    if missing:
        r.add(
            [
                f"P20 job {job_id} (slow) attempt {attempt} {ran[(job_id, attempt)]} but emitted no start event "
                "(PROTOCOL §3.8 step 1: the event the lease-renewal and duplicate-execution judges read)"
                for job_id, attempt in missing
            ]
        )
    return len(ran)


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
    from soak.verdicts import _result

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
    from soak.verdicts import _last_error, _matches

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


# --- the time and attempt duties (issue 30) ------------------------------------------------------------------


def _drain_end(ev: Evidence, node: str, t: float) -> float:
    d = next((x for x in ev.by_type["worker_drained"] if x["node"] == node and float(x["t"]) >= t), None)
    if d is None or d.get("seconds") is None:
        return t + DRAIN_LIMIT + 5
    return t + float(d["seconds"])


def p11_no_claims_after_term(r: Any, state: Any, ev: Evidence, timeline: Any) -> int:
    """Claims by a node after its own SIGTERM (operations guide "producers stop claiming first").

    Evidence: two lease samples s0 < s1, s0 taken at least CLAIM_SETTLE after the SIGTERM (a claim in flight
    at the signal has committed by then); an attempt leased by the node that s1 shows and s0 does not was
    claimed after s0 (an attempt's row stays running under the same node until it ends; a new claim is a new
    attempt number). As a second guard its first lease_until seen, less the ttl and the node's declared clock
    offset, must lie after the SIGTERM (the claim's own `now`). Returns the drains that had such samples."""
    judged = 0
    for e in ev.by_type["worker_drain_term"]:
        node, t = e["node"], float(e["t"])
        end = _drain_end(ev, node, t)
        # A network cut can hold a claim's COMMIT in the proxy past the SIGTERM: not judged. A database crash
        # needs no excuse: it aborts the claims in flight, and a claim retried afterwards with the `now` it
        # was built with (before the signal) fails the lease guard below; one rebuilt after it is a new claim.
        if timeline.cut_during(node, t - ev.ttl, end + 1):
            r.notes.append(f"drain of {node}: a network cut around it; claims not judged")
            continue
        settled = ev.samples.first_at_or_after(t + CLAIM_SETTLE)
        if settled is None or settled[0] > end:
            continue  # no sample while the node could still claim
        judged += 1
        skew = ev.skewed_nodes.get(node, 0.0)
        late: dict[tuple[int, int], float] = {}
        seen = {k for k, v in settled[1].items() if v[0] == node}
        # the node's attempts first seen in a later sample (an attempt never leaves the samples and comes
        # back: its rows are seen while it runs, then never again), with the lease they were first seen with
        for at, key, until, _kind in ev.attempts.of_node(node):
            if at <= settled[0] or key in seen:
                continue
            if until is None or until - ev.ttl - skew > t + STAMP_SLACK:
                late[key] = at
        r.checks += 1
        if late:
            keys = sorted(late)
            lost = [
                k for k in keys if (job := state.jobs.get(k[0])) is not None and _errors_for(job, k[1], "lease_expired")
            ]
            first = min(late.values())
            r.add(
                [
                    f"P11 node {node} claimed {len(keys)} attempt(s) after its SIGTERM at +{t - ev.t0:.1f}s "
                    f"(first seen +{first - ev.t0:.1f}s, absent from an earlier sample taken ≥ {CLAIM_SETTLE}s after "
                    f"the signal): e.g. job/attempt {', '.join(f'{j}/{a}' for j, a in keys[:4])}; {len(lost)} of them "
                    "ended by lease expiry — on SIGTERM producers stop claiming first (operations guide, PROTOCOL §1)"
                ]
            )
    return judged


def p12_cron_due(r: Any, state: Any, ev: Evidence) -> None:
    """Cron slots only when due: a slot is a whole UTC minute, inserted no earlier than that minute by the
    inserting node's own `now` (the row's inserted_at), and none due after the cron row was paused."""
    paused = {e["name"]: float(e["t"]) for e in ev.by_type["cron_paused"]}
    for job in in_key_order(state.jobs):
        if job.cron_name is None or job.cron_slot is None:
            continue
        r.checks += 1
        slot = job.cron_slot.timestamp()
        if job.cron_slot.second or job.cron_slot.microsecond:
            r.add([f"P12 cron job {job.id}: slot {job.cron_slot.isoformat()} is not a whole UTC minute (§8.5)"])
            continue
        early = slot - job.inserted_at.timestamp()
        if early > STAMP_SLACK:
            r.add(
                [
                    f"P12 cron job {job.id} (slot {job.cron_slot.isoformat()}) was inserted at "
                    f"{job.inserted_at.isoformat()}, {early:.1f}s before its slot was due (§8.5: each due minute slot)"
                ]
            )
        t_paused = paused.get(job.cron_name)
        if t_paused is not None and slot > t_paused + ev.max_skew + 1.0:
            r.add(
                [
                    f"P12 cron job {job.id} fills slot {job.cron_slot.isoformat()}, due "
                    f"{slot - t_paused:.0f}s after its belay_crons row was paused (+{t_paused - ev.t0:.1f}s): "
                    "paused rows are skipped (§8.5)"
                ]
            )


def _step_attempt(step: Any) -> int | None:
    from model.envelope import decode

    try:
        value = decode(step.value)
    except Exception:  # noqa: BLE001 - a foreign value: no attempt to attribute
        return None
    return value.get("attempt") if isinstance(value, Mapping) and isinstance(value.get("attempt"), int) else None


def p13_cancel_at_next_step(r: Any, state: Any, ev: Evidence, steps: Mapping[int, Mapping[str, Any]]) -> int:
    """A cancel requested while a `steps` job runs: the step in flight may still be journaled, the next
    boundary must stop the job — so at most one step is journaled after the request committed (the driver
    records the cancel after its commit; a step's inserted_at is its node's `now`, less that node's offset)."""
    first: dict[int, float] = {}
    for e in ev.by_type["cancel"]:
        if e.get("kind") == "steps" and e.get("result") == "CancelRequested":
            first.setdefault(e["job_id"], float(e["t"]))
    judged = 0
    for job_id, tc in sorted(first.items()):
        job = state.jobs.get(job_id)
        if job is None or job.worker != "steps":
            continue
        judged += 1
        r.checks += 1
        after = []
        for name, st in steps.get(job_id, {}).items():
            attempt = _step_attempt(st)
            node = ev.attempts.node((job_id, attempt)) if attempt is not None else None
            skew = ev.skewed_nodes.get(node, 0.0) if node else ev.max_skew
            if st.inserted_at.timestamp() - skew > tc + STAMP_SLACK:
                after.append(name)
        if len(after) >= 2:
            r.add(
                [
                    f"P13 job {job_id} (steps): a cancel was requested at +{tc - ev.t0:.1f}s while it ran, yet "
                    f"{len(after)} steps ({', '.join(sorted(after))}) were journaled after it and the job ended "
                    f"{job.state}: a pending cancel must stop the job at its next step boundary (§8.6)"
                ]
            )
    return judged


def _own_faults(timeline: Any, node: str, stalls: Sequence[Sequence[float]] = ()) -> list[Sequence[float]]:
    """The fault windows that can hold up `node`'s own calls: its SIGSTOPs; a partition, stall, cut or
    injected latency of its route (its slot's); a PostgreSQL crash-restart or failover (every node's
    connection); and the machine's own stalls the harness saw (`stalls`: its samples late)."""
    slot = timeline.slot_of.get(node)
    out: list[Sequence[float]] = [*timeline.stopped.get(node, ()), *timeline.db_down, *stalls]
    out += [*timeline.isolated.get(slot, ()), *timeline.slowed.get(slot, ())]
    out += [(a, b) for n, a, b in timeline.cuts if n is None or n == node]
    return out


def _overlap(windows: Iterable[Sequence[float]], t0: float, t1: float) -> tuple[float, int]:
    """Seconds of [t0, t1] the windows cover (overlaps merged) and how many windows touch it."""
    spans = sorted((max(a, t0), min(b, t1)) for a, b in windows if a <= t1 and b >= t0)
    total, reach = 0.0, t0
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total, len(spans)


def _free_stretches(windows: Iterable[Sequence[float]], t0: float, t1: float) -> list[tuple[float, bool]]:
    """The stretches of [t0, t1] no window covers: (length, whether it begins where a window ended)."""
    out: list[tuple[float, bool]] = []
    if t1 <= t0:
        return out
    reach, after = t0, False
    for a, b in sorted((max(a, t0), min(b, t1)) for a, b in windows if a <= t1 and b >= t0):
        if a > reach:
            out.append((a - reach, after))
        if b > reach:
            reach, after = b, True
    if t1 > reach:
        out.append((t1 - reach, after))
    return out


def _machine_stalls(ev: Evidence) -> list[tuple[float, float]]:
    """Stretches in which the harness's lease sampler ran late by more than one interval (the machine
    stalled): [previous sample + SAMPLE_EVERY, sample]. Computed once per run."""
    cached = getattr(ev, "_stalls", None)
    if cached is None:
        cached, last = [], None
        for at, _rows in ev.samples:
            if last is not None and at - last > 2 * SAMPLE_EVERY:
                cached.append((last + SAMPLE_EVERY, at))
            last = at
        ev._stalls = cached  # type: ignore[attr-defined]
    return cached


# After a fault ends, a node's first call may still wait out a retry backoff (the reference's longest is 2.0 s)
# and the sampling of one interval: each fault that touches a renewal interval excuses its duration and this.
FAULT_RECOVER = 2.0 + SAMPLE_EVERY
CALL_S = 2.5  # s: one store call of the reference SDK at most (its call deadline; a longer one is cut, retried)
RETRY_BACKOFF_S = 2.0  # s: the reference's longest retry backoff (impl/faults.py RetryPolicy.maximum)


def p14_renewal_cadence(r: Any, ev: Evidence, timeline: Any) -> None:
    """§6 renew each ttl/3, judged per node from the renewals themselves: consecutive distinct lease_until
    values of one attempt in the lease samples (every 0.5 s, faster than any renewal) differ by the time
    between the two writes (the node's own clock: its offset cancels out). An interval may exceed ttl/3 by
    one sample interval (SAMPLE_EVERY: the precision at which the harness itself keeps time on this machine)
    plus, for each fault of that node touching it (`_own_faults`: its SIGSTOP, its route's partition, stall,
    cut or latency, a database crash-restart, a machine stall the harness saw), the fault's own overlap with
    the interval and FAULT_RECOVER. Two intervals beyond that on a node, or one beyond it by another whole
    ttl/3 (a renewal missed), are a cadence other than ttl/3 — even when no lease is lost (P2 judges
    losses). The reference renews at 0.333–0.336 ttl (issue 51's soaks). One renewal statement extends all
    the node's leases: each renewal instant counts once."""
    # The harness's own sampling gaps: a gap longer than a renewal period can hide a renewal, and two
    # renewals then look like one interval of 2 × ttl/3 (issue 27: the two-hour soak's one P14 finding
    # came from a starved harness). An interval spanning such a gap is not judged.
    hide = SAMPLE_HIDES * ev.ttl / 3
    blind: list[tuple[float, float]] = []
    stalls: list[tuple[float, float]] = []  # samples more than two intervals apart: the machine stalled
    gaps: dict[str, dict[float, tuple[float, float, tuple[int, int]]]] = defaultdict(dict)
    period = ev.ttl / 3

    def judge(key: tuple[int, int], node: str, seq: list[tuple[float, float]]) -> None:
        skew = ev.skewed_nodes.get(node, 0.0)
        own = _own_faults(timeline, node, stalls)
        for (u1, seen1), (u2, seen2) in itertools.pairwise(seq):
            t1, t2 = u1 - ev.ttl - skew, u2 - ev.ttl - skew  # the two writes' `now`, on the harness clock
            i = bisect.bisect_left(blind, seen1, key=lambda gap: gap[0])
            if i < len(blind) and blind[i][1] <= seen2:
                continue  # the samples were blind for longer than a renewal period in between
            covered, touching = _overlap(own, t1, t2)
            limit = period + SAMPLE_EVERY + covered + touching * FAULT_RECOVER
            r.checks += 1
            gaps[node].setdefault(round(u2, 1), (u2 - u1, limit, key))

    # an attempt's distinct lease_until values (with when each was first seen), judged once it has left the
    # samples (it runs, then is never seen again): only the running attempts' series are held (issue 27)
    live: dict[tuple[int, int], tuple[str, list[tuple[float, float]]]] = {}
    last_at: float | None = None
    for at, rows in ev.samples:  # in time order
        if last_at is not None and at - last_at > hide:
            blind.append((last_at, at))
        if last_at is not None and at - last_at > 2 * SAMPLE_EVERY:
            stalls.append((last_at + SAMPLE_EVERY, at))
        last_at = at
        now: dict[tuple[int, int], tuple[str, list[tuple[float, float]]]] = {}
        for key, (node, until, _kind) in rows.items():
            if until is None or not node:
                continue
            _, seq = live.pop(key, (node, []))
            if not seq or until > seq[-1][0] + 0.05:
                seq.append((until, at))
            now[key] = (node, seq)
        for key, (node, seq) in live.items():
            judge(key, node, seq)
        live = now
    for key, (node, seq) in live.items():
        judge(key, node, seq)
    for node, seen in sorted(gaps.items()):
        slow = sorted(((g, lim, k) for g, lim, k in seen.values() if g > lim), key=lambda x: x[0] - x[1], reverse=True)
        if not slow or (slow[0][0] <= slow[0][1] + period and len(slow) < 2):
            continue
        longest, limit, (job_id, attempt) = slow[0]
        r.add(
            [
                f"P14 node {node}: {len(slow)} renewal interval(s) above ttl/3 + {SAMPLE_EVERY:g}s and its own "
                f"faults seen in lease samples (the worst {longest:.2f}s against {limit:.2f}s allowed, job {job_id} "
                f"attempt {attempt}) with a ttl of {ev.ttl:g}s: §6 asks for a renewal each ttl/3 ({period:.2f}s)"
            ]
        )


def p15_wait_spends_no_attempt(r: Any, state: Any, ledger: Any) -> int:
    """Every park (await a signal, also parked as ready at once; durable sleep; await children) raises
    max_attempts by one, so a succeeded job's max_attempts is its enqueued value plus its parks. Parks of a
    succeeded job = attempt − 1 − errors (every other attempt ended by an error entry, reclaims included).
    The enqueued value is the one this run's non-parking ledger jobs kept (the driver gives all the same).
    Returns the parked-and-succeeded jobs judged."""
    # the ledger streamed twice (a long run's is a disk table, issue 27), never a dict of every job's kind
    base = Counter(
        job.max_attempts
        for e in ledger.entries
        if e.kind not in PARKING_KINDS and e.kind != "slow" and (job := state.jobs.get(e.job_id)) is not None
    )
    if not base:
        return 0
    m0 = base.most_common(1)[0][0]
    judged = 0
    for job_id, kind in sorted((e.job_id, e.kind) for e in ledger.entries if e.kind in PARKING_KINDS):
        job = state.jobs.get(job_id)
        if kind not in PARKING_KINDS or job is None or job.state != "succeeded":
            continue
        parks = job.attempt - 1 - len(job.errors)
        if parks < 1:
            continue
        judged += 1
        r.checks += 1
        if job.max_attempts != m0 + parks:
            r.add(
                [
                    f"P15 job {job_id} ({kind}) parked {parks} time(s) (attempt {job.attempt}, {len(job.errors)} "
                    f"error(s)) and ended with max_attempts {job.max_attempts}; enqueued with {m0}, it should be "
                    f"{m0 + parks}: a wait spends no attempt — each park raises max_attempts by one (§7 table)"
                ]
            )
    return judged


def p16_attempts_bounded(r: Any, state: Any) -> int:
    """No job runs more attempts than max_attempts allows: a claim takes attempt+1 only from a job an error or
    reclaim left ready with attempts to spare; a reclaim on the last attempt fails it (§6). Parks raise
    max_attempts (P15), operator retries raise it to attempt+1, so attempt ≤ max_attempts always holds.
    Returns the jobs that used their last attempt (the scenario that exposes a reclaim past the budget)."""
    exhausted = 0
    for job in in_key_order(state.jobs):
        r.checks += 1
        exhausted += job.attempt >= job.max_attempts and bool(job.errors)
        if job.attempt > job.max_attempts:
            r.add(
                [
                    f"P16 job {job.id} ({job.worker}) ran attempt {job.attempt} of max_attempts {job.max_attempts} "
                    f"(ended {job.state}; errors {[e.get('error') for e in job.errors if isinstance(e, Mapping)][-3:]}): "
                    "an attempt past the budget — a reclaim (or error) on the last attempt must fail the job (§6, §7)"
                ]
            )
    r.notes.append(f"{exhausted} job(s) reached their last attempt with errors")
    return exhausted


SWEEP_EVERY = 2.0  # s: PROTOCOL §1 "a sweeper at least every 2 s"
# A sweep pass is one call (reclaim, reconcile, crons, prune: a few statements): the reference's call
# deadline is 2.5 s, and a pass that outlives it is retried at the next period. Measured on the reference
# under load (2 cores, ~7 concurrent soaks): see docs/certification.md "P17 tolerance".
SWEEP_PASS = 2.5
RECLAIM_OVERDUE = SWEEP_EVERY + SWEEP_PASS + SAMPLE_EVERY  # + the harness's own sampling lateness (below)


def _free_since(timeline: Any, node: str, t0: float, t1: float) -> float | None:
    """The start of the last stretch of [t0, t1] in which `node` ran free of every fault that can delay
    its sweeper: alive (started, not ended before t1), not SIGSTOPped, its route not partitioned, stalled,
    cut or slowed by injected latency, and the database up (a crash-restart or a failover: every node's
    connection). None when the node was not alive and free at t1."""
    started = timeline.started.get(node)
    if started is None or started > t1 or timeline.ended.get(node, float("inf")) < t1:
        return None
    slot = timeline.slot_of.get(node)
    windows = [
        *timeline.stopped.get(node, ()),
        *timeline.isolated.get(slot, ()),
        *timeline.slowed.get(slot, ()),
        *timeline.db_down,
        *([a, b] for n, a, b in timeline.cuts if n is None or n == node),
    ]
    since = max(t0, started)
    for a, b in windows:
        if a <= t1 and b >= since:
            if b >= t1:
                return None  # the fault still held at t1
            since = max(since, b)
    return since


def p17_reclaims_expired(
    r: Any, ev: Evidence, timeline: Any, claimed_at: Mapping[tuple[int, int], float] | None = None
) -> None:
    """§6 "any node reclaims expirees", PROTOCOL §1 "a sweeper at least every 2 s": a row seen running
    with its lease expired is overdue from the later of its lease_until and the moment it became running —
    the claim's commit when the committed history has it (`claimed_at`: a claim whose `now` was read
    before a SIGSTOP commits with its lease already in the past; no sweeper could reclaim it before it
    existed), else the first lease sample that showed it running. It is a finding when some node ran free
    (`_free_since`: alive, not stopped, not cut off or slowed, the database up) for longer than the
    tolerance up to that sample: the sweeper period, one pass, one sample interval, and the harness's own
    lateness in that stretch (the largest gap between its lease samples beyond the 0.5 s they are due: a
    machine that starved the sampler starves a sweeper alike). Each fault excuses only its own duration."""
    flagged: set[tuple[int, int]] = set()
    claimed_at = claimed_at or {}
    gaps: list[tuple[float, float]] = []  # (at, gap since the previous sample)
    prev: float | None = None
    for at, rows in ev.samples:
        if prev is not None:
            gaps.append((at, at - prev))
        prev = at
        for key, (node, until, kind) in rows.items():
            if until is None or at - until <= RECLAIM_OVERDUE or key in flagged:
                continue
            began = claimed_at.get(key)
            if began is None:
                began = ev.attempts.first_at(key) or at
            start = max(until, began)
            if at - start <= RECLAIM_OVERDUE:
                continue
            r.checks += 1
            frees = [(f, n) for n in timeline.started if (f := _free_since(timeline, n, start, at)) is not None]
            if not frees:
                continue
            free, sweeper = min(frees)
            # the sampler's lateness inside the free stretch only: a gap that ended at or before `free` lies
            # outside it, and one that began before it counts for its part inside
            i = bisect.bisect_right(gaps, free, key=lambda g: g[0])
            late = max((min(g, t - free) - SAMPLE_EVERY for t, g in gaps[i:]), default=0.0)
            if at - free <= RECLAIM_OVERDUE + max(0.0, late):
                continue
            flagged.add(key)
            if len(flagged) <= 3 or len(flagged) % 50 == 0:
                r.add(
                    [
                        f"P17 job {key[0]} ({kind}) attempt {key[1]} leased by {node}: its lease expired at "
                        f"+{until - ev.t0:.1f}s, the row running since +{began - ev.t0:.1f}s, and it was still "
                        f"running at +{at - ev.t0:.1f}s although node {sweeper} had run free of faults with the "
                        f"database up for {at - free:.1f}s (> {RECLAIM_OVERDUE:.1f}s: a sweep each "
                        f"{SWEEP_EVERY:g}s, one pass, one sample): no sweeper reclaimed it (§6)"
                    ]
                )
            else:
                r.violations += 1
    r.checks += len(ev.samples)


def p18_admission(r: Any, ev: Evidence, timeline: Any = None) -> int:
    """§6 global_limit from the lease samples: a sample (one consistent read) counts the live leases of
    each admission queue — leases running more than LIVE_SLACK_S past the sample, so that a claimer whose
    clock runs ahead and saw a lease expire is not blamed; more than the queue's global_limit is a
    violation. Returns the samples that saw a queue at its limit (contention: the limit was binding).

    Not judged: samples within a ttl after a node came back from a SIGSTOP, a partition, a stall or a cut.
    Its lease may have expired meanwhile (others then admitted in its place, rightly) and its renewal,
    which §6 guards by holder only, revives it: more live leases than the limit without a wrong claim.
    Trace validation still judges every claim there exactly."""
    resumed: list[float] = []
    if timeline is not None:
        for windows in (*timeline.stopped.values(), *timeline.isolated.values()):
            resumed += [b for _a, b in windows if b != float("inf")]
        resumed += [c[2] for c in timeline.cuts if c[2] != float("inf")]
    excused = 0
    limits: dict[str, int] = {}
    per_key: dict[str, int] = {}  # partitioned queue → per-key limit (§6: global_limit, else the queue's limit)
    for e in ev.by_type["admission_queues"]:  # what this run configured (soak/scenarios.py)
        for q, o in (e.get("queues") or {}).items():
            if not isinstance(o, Mapping):
                continue
            if o.get("global_limit") is not None:
                limits[q] = int(o["global_limit"])
            if o.get("partition") is not None:
                lim = o.get("global_limit") or o.get("limit", 10)
                per_key[q] = int(lim["max"] if isinstance(lim, Mapping) else lim)
    at_limit = 0
    worst: dict[str, tuple[int, float]] = {}
    for e in ev.by_type["lease_sample"]:
        live = e.get("admission")
        if live is None:
            continue
        sample_at = float(e.get("at", e["t"]))
        if any(b <= sample_at <= b + ev.ttl for b in resumed):
            excused += 1
            continue
        for q, limit in limits.items():
            n = int(live.get(q, 0))
            r.checks += 1
            if n >= limit:
                at_limit += 1
            if n > limit and n > worst.get(q, (0, 0.0))[0]:
                worst[q] = (n, float(e.get("at", e["t"])))
        for qk, n in (e.get("partitions") or {}).items():
            q = qk.rsplit(":", 1)[0]
            if q not in per_key:
                continue
            r.checks += 1
            if n >= per_key[q]:
                at_limit += 1
            if n > per_key[q] and n > worst.get(qk, (0, 0.0))[0]:
                worst[qk] = (n, float(e.get("at", e["t"])))
    for q, (n, at) in sorted(worst.items()):
        if q in limits:
            what = f"queue {q}: {n} live leases at +{at - ev.t0:.1f}s (lease sample), its belay_queues row says global_limit {limits[q]}"
        else:
            queue, key = q.rsplit(":", 1)
            what = (
                f"queue {queue}, partition key {key!r}: {n} live leases at +{at - ev.t0:.1f}s (lease sample), "
                f"per-key limit {per_key[queue]}"
            )
        r.add([f"P18 {what} — claims must apply the queue's options (§6 admission)"])
    if excused:
        r.notes.append(
            f"{excused} lease sample(s) within a ttl after a node resumed (stop, partition, cut): not judged"
        )
    return at_limit


def later_duties(
    duties: Mapping[str, Any],
    state: Any,
    ledger: Any,
    ev: Evidence,
    timeline: Any,
    steps: Mapping[int, Mapping[str, Any]],
    committed: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """P11–P18 (the checker calls this once); returns their scenario counts for soak/coverage.py.
    `committed`: the trace validation's findings (soak/commits/refine.py), e.g. the commit time of each
    claim that committed with its lease already expired (P17)."""
    claimed_at = {(int(j), int(a)): float(t) for j, a, t in ((committed or {}).get("claimed_expired") or ())}
    counts = {"drains_sampled": p11_no_claims_after_term(duties["P11"], state, ev, timeline)}
    p12_cron_due(duties["P12"], state, ev)
    counts["cancels_judged"] = p13_cancel_at_next_step(duties["P13"], state, ev, steps)
    p14_renewal_cadence(duties["P14"], ev, timeline)
    counts["parks_resumed"] = p15_wait_spends_no_attempt(duties["P15"], state, ledger)
    counts["last_attempts"] = p16_attempts_bounded(duties["P16"], state)
    p17_reclaims_expired(duties["P17"], ev, timeline, claimed_at)
    if ev.by_type["admission_queues"] or ev.by_type["admission_queues_failed"]:
        counts["admission_at_limit"] = p18_admission(duties["P18"], ev, timeline)
    elif isinstance(duties, dict):
        # a run whose harness configured no admission queues (a harness older than P18, whose check phase
        # loads this module): the duty was not part of that run — it is left out, not passed
        duties.pop("P18", None)
    return counts


__all__ = [
    "DUTIES",
    "Evidence",
    "later_duties",
    "p1_stays_up",
    "p2_renews_leases",
    "p3_cancel_at_park",
    "p4_drains",
    "p5_priority",
    "p6_crons",
    "p7_sleeps",
    "p8_attempts",
    "p9_outcomes",
    "p10_children_signal",
    "p11_no_claims_after_term",
    "p12_cron_due",
    "p13_cancel_at_next_step",
    "p14_renewal_cadence",
    "p15_wait_spends_no_attempt",
    "p16_attempts_bounded",
    "p17_reclaims_expired",
    "p18_admission",
    "p19_crossing_fails",
    "p20_evidence",
]
