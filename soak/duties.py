"""Worker duties (P1 … P10): what PROTOCOL.md and contract §§5–9 ask of a worker beyond the §11 invariants.

Pure, like soak/checker.py: every rule reads the post-drain snapshot, the ledger (with the workers'
observations) and the harness history (faults, driver actions, lease samples). Each duty ends `valid`
only when it held AND the scenarios that could expose its violation occurred (soak/coverage.py decides
the latter); `invalid` names the job or node and what went wrong.

| duty | source | rule |
|---|---|---|
| P1 | PROTOCOL §1 | a worker never exits by itself (database loss included) except the exits a kind asks for, which it records as an `exit` observation first; a worker that cannot stay up ends the run |
| P2 | §6 | leases are renewed: no attempt loses its lease while its node is alive, not stopped, not cut off and the database up (also when another node's clock runs ahead) |
| P3 | §8.6, §7 | a cancel requested while a job runs is honoured at its next boundary, a park included: the job ends cancelled |
| P4 | PROTOCOL §1 | on SIGTERM a worker drains: exits 0 within the grace (≤ 15 s) and the jobs it was running end by their own acks, not by lease expiry |
| P5 | §6 | claims take claimable jobs in priority order (priority ASC, ready_at, id) |
| P6 | §8.5 | cron slots are inserted as their `belay_crons` row says: queue (opts), kind, input |
| P7 | §8 (`$sleep:`) | a durable sleep journals its wake time (`$sleep:<name>`) before parking and does not sleep again on resume |
| P8 | PROTOCOL §2 | every successful result carries the attempt that produced it |
| P9 | PROTOCOL §3 | every soak job ends as its kind prescribes (the ledger's expected outcome), cancels of parked jobs included |
| P10 | §7 step 2, §8.4 (R1) | every terminal write of a child delivers `$children` to its parent, unconditionally |
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

DUTIES: dict[str, str] = {
    "P1": "PROTOCOL §1: stays up — never exits by itself (database loss included) except the exits a kind asks for",
    "P2": "§6: renews its leases (every ttl/3): no lease lost while its node is alive, running and connected",
    "P3": "§8.6: a cancel requested while a job runs is honoured at the next boundary, a park included",
    "P4": "PROTOCOL §1: on SIGTERM, drains — exit 0 within the grace, running jobs finished, not abandoned",
    "P5": "§6: claims in priority order (priority ASC, ready_at ASC NULLS FIRST, id ASC)",
    "P6": "§8.5: cron slots inserted as the belay_crons row says (queue, kind, input)",
    "P7": "§8 $sleep: a durable sleep journals its wake time before parking and does not sleep again",
    "P8": "PROTOCOL §2: every successful result carries the attempt that produced it",
    "P9": "PROTOCOL §3: every soak job ends as its kind prescribes (cancels of parked jobs included)",
    "P10": "§7/§8.4 R1: every terminal write of a child delivers $children to its parent, unconditionally",
}
TERMINAL = ("succeeded", "failed", "cancelled")
SKEW_SLACK = 1.0  # seconds of clock disagreement tolerated when comparing a worker's timestamps with the harness's
DRAIN_LIMIT = 15.0  # PROTOCOL §1: grace ≤ 15 s


class Evidence:
    """What the history says, indexed once for the duties and the coverage table."""

    def __init__(self, history: Sequence[Mapping[str, Any]], ttl: float) -> None:
        self.ttl = ttl
        self.by_type: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for e in history:
            self.by_type[e.get("type")].append(e)
        # (job, attempt) → node, first seen, last seen; lease_until values seen
        self.attempt_node: dict[tuple[int, int], str] = {}
        self.span: dict[tuple[int, int], list[float]] = {}
        self.renewed: set[tuple[int, int]] = set()
        self.skewed_nodes = {
            e["node"]: float(e["clock_skew"]) for e in self.by_type["worker_start"] if e.get("clock_skew")
        }
        self.skew_seen: dict[str, float] = {}
        last_until: dict[tuple[int, int], float] = {}
        for e in self.by_type["lease_sample"]:
            at = float(e.get("at", e["t"]))
            for job_id, attempt, node, until, _kind in e.get("rows", ()):
                key = (int(job_id), int(attempt))
                if node:
                    self.attempt_node[key] = node
                span = self.span.setdefault(key, [at, at])
                span[1] = at
                if until is not None:
                    if key in last_until and until > last_until[key] + 0.05:
                        self.renewed.add(key)
                    last_until[key] = until
                    ahead = until - at - ttl
                    if node in self.skewed_nodes and ahead > 0.1:
                        self.skew_seen[node] = max(self.skew_seen.get(node, 0.0), ahead)
        self.max_skew = max([0.0, *self.skewed_nodes.values()])
        self.t0 = min((float(e["t"]) for e in history), default=0.0)

    def long_attempts(self) -> list[tuple[int, int]]:
        """Attempts seen holding their lease for longer than the ttl (they needed a renewal)."""
        return [k for k, (a, b) in self.span.items() if b - a > self.ttl]


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
    for job in sorted(state.jobs.values(), key=lambda j: j.id):
        for e in job.errors:
            if not (isinstance(e, Mapping) and e.get("error") == "lease_expired"):
                continue
            attempt = e.get("attempt")
            node = ev.attempt_node.get((job.id, attempt))
            if node is None:
                continue
            r.checks += 1
            t1 = _ts(e["at"])
            t0 = t1 - ttl - 2 * SKEW_SLACK
            first_seen = ev.span.get((job.id, attempt), [t1])[0]
            if first_seen > t1 - ttl / 2:
                continue  # held for less than half a ttl when it expired: no renewal was due yet
            if (
                timeline.node_ran(node, t0, t1 + SKEW_SLACK)
                and not timeline.db_down_during(t0, t1 + SKEW_SLACK)
                and not timeline.cut_during(node, t0, t1 + SKEW_SLACK)
            ):
                skew = f" (node clocks ahead by up to {ev.max_skew:.2f}s)" if ev.max_skew else ""
                r.add(
                    [
                        f"P2 job {job.id}: attempt {attempt} on node {node} lost its lease (lease_expired at {e['at']}) "
                        f"although {node} was alive, not stopped, connected and the database up for the whole "
                        f"{ttl + 2 * SKEW_SLACK:.0f}s before{skew}: it did not renew its lease in time (§6: every ttl/3)"
                    ]
                )
    skewed = sorted(ev.skewed_nodes)  # one name per incarnation: a long run has hundreds — name a few
    named = ", ".join(skewed[:5]) + (f" … ({len(skewed)} incarnations)" if len(skewed) > 5 else "")
    r.notes.append(
        f"{len(ev.renewed)} renewal(s) seen in lease samples; {len(ev.long_attempts())} attempt(s) held "
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
        if asked and d.get("code") != 0:  # a kind asked the draining worker to die (PROTOCOL §1): not a drain
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
        # A PostgreSQL crash within a ttl before the SIGTERM (or during the drain) can have committed a claim
        # whose response never reached the node (its connection died with the server): the node never knew
        # that job, so a lease it lets expire is the crash's doing, not the drain's.
        if timeline.db_down_during(t - ev.ttl, end + 1):
            continue
        # issue 13: a partition or stall of this node's route within a ttl before SIGTERM or during the
        # drain can expire a lease the node could not renew — that is the network's doing, not the drain's.
        if timeline.cut_during(node, t - ev.ttl, end + 1):
            continue
        for job_id, attempt, kind in e.get("running", ()):
            job = state.jobs.get(job_id)
            if job is None or kind == "slow":
                continue
            r.checks += 1
            # Only a lease that expired after the SIGTERM is the drain's: one gone before it was lost earlier.
            if any(_ts(x["at"]) >= t - 1 for x in _errors_for(job, attempt, "lease_expired") if x.get("at")):
                r.add(
                    [
                        f"P4 job {job_id} ({kind}) attempt {attempt} was running on {node} when it got SIGTERM; the "
                        f"worker exited after {d.get('seconds')}s without finishing it (its lease expired): SIGTERM "
                        "must let running jobs finish within the grace"
                    ]
                )


def p5_priority(r: Any, ev: Evidence, timeline: Any) -> int:
    """Returns how many batches had claims choosing between priorities (the scenario)."""
    contested = 0
    by_batch: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for e in ev.by_type["priority_sample"]:
        by_batch[e["batch"]].append(e)
    for batch, samples in sorted(by_batch.items()):
        samples.sort(key=lambda e: float(e["at"]))
        had_choice, flagged = False, False
        for a, b in itertools.pairwise(samples):
            ta, tb = float(a["at"]), float(b["at"])
            if ta < float(a["due"]) + ev.max_skew + 0.3 or tb - ta < 0.2 or timeline.db_down_during(ta - 1, tb):
                continue
            ready_a = {i for i, p, s, att in a["rows"] if s == "ready" and att == 0}
            ready_b = {i for i, p, s, att in b["rows"] if s == "ready" and att == 0}
            prio = {i: p for i, p, s, att in a["rows"] + b["rows"]}
            running_a = {i for i, p, s, att in a["rows"] if s == "running"}
            if ready_a and running_a:
                had_choice = True
            r.checks += 1
            waiting_low = sorted(i for i in ready_a & ready_b if prio[i] == 0)
            ahead = sorted(i for i in running_a if prio[i] > 0)
            if waiting_low and ahead and not flagged:
                flagged = True
                r.add(
                    [
                        f"P5 batch {batch}: jobs {ahead[:3]} of priority {prio[ahead[0]]} were running while jobs "
                        f"{waiting_low[:3]} of priority 0, due and never claimed, stayed ready for {tb - ta:.2f}s: claims "
                        "did not take the lowest priority value first"
                    ]
                )
        contested += had_choice
    return contested


def p6_crons(r: Any, state: Any) -> int:
    n = 0
    for job in sorted(state.jobs.values(), key=lambda j: j.id):
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
    for job in sorted(state.jobs.values(), key=lambda j: j.id):
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


def p8_attempts(r: Any, state: Any, expected: set[int]) -> None:
    from soak.verdicts import _result

    for job_id in sorted(expected):
        job = state.jobs.get(job_id)
        if job is None or job.state != "succeeded" or job.queue != "soak":
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


__all__ = [
    "DUTIES",
    "Evidence",
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
]
