"""The duties of a worker's own run (soak/judges/duties/__init__.py has the table): P1 stays up, P2 renews its
leases, P3 honours a cancel at a park, P4 drains on SIGTERM (and never hands a job back), P19 fails the
attempt whose step crossed a budget, P20 emits the evidence its kinds promise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, cast

from model.state import in_key_order
from soak.judges.duties.evidence import (
    DRAIN_LIMIT,
    GRACE_MIN,
    PARKING_KINDS,
    SAMPLE_EVERY,
    TERMINAL,
    Evidence,
    _errors_for,
    _ts,
)
from soak.judges.duties.timing import (
    CALL_S,
    RETRY_BACKOFF_S,
    _free_stretches,
    _machine_stalls,
    _own_faults,
    _step_attempt,
)

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
            attempt = cast("int", e.get("attempt"))  # every lease_expired entry names its attempt (§7)
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
            own = _own_faults(timeline, node, _machine_stalls(ev))
            # sdk-guide §14: a claim whose reply was lost leases rows its node does not know, and "the worker
            # need do nothing" — "the soak excuses such leases around a database crash or network cut". A
            # claim made just after one of its node's faults ended (within a call and a retry backoff: the
            # server or route just back, the call slow past its deadline while it commits) whose lease was
            # never renewed may be such a claim (the Node worker, a failover soak, seed 84: its claim 1.0 s
            # after a crash-restart outlived its 2.5 s deadline and committed unconfirmed).
            first = ev.attempts.first_until((job.id, attempt))
            if last is not None and first is not None and float(last) == float(first):
                claimed = float(first) - offset - ttl  # the claim's own `now`
                ended = max((w[1] for w in own if w[1] < claimed), default=None)  # the latest fault before it
                if ended is not None and claimed <= ended + CALL_S + RETRY_BACKOFF_S:
                    r.notes.append(
                        f"job {job.id} attempt {attempt}: claimed {claimed - ended:.1f}s after a fault of its node "
                        "ended and never renewed — maybe a claim whose reply was lost (sdk-guide §14)"
                    )
                    continue
            faults = [w for w in own if w[0] <= end and w[1] >= begin]
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


def p4_drains(
    r: Any,
    state: Any,
    ev: Evidence,
    timeline: Any,
    ledger: Any = None,
    steps: Mapping[int, Mapping[str, Any]] | None = None,
) -> None:
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
        handed_back(r, state, node, e, steps, outage=timeline.db_down_during(t, end + 1))
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


def planned_failure(job: Any, attempt: int, kind: str, steps: Mapping[str, Any]) -> bool:
    """Whether soak/PROTOCOL.md §3 has the kind's own code end this attempt with an error — whatever the
    error is called: §3.2 `steps` "if attempt == 1 and i == raise_after, raise (retryable) right after step
    i is journaled", §3.7 `flaky` mode `raise` "while attempt ≤ k … the attempt ends with a retryable
    error", §3.6 `member` "if fail, fail (non-retryable, error name free)". None of them names the error,
    so a worker spelling it its own way (the Ruby worker's `raised`, the reference's `Planned`) is judged
    by when it failed, not by what it wrote. For `steps`, from the journal: step s<k> journaled by this
    attempt (the step values carry the attempt that journaled them, §3.2) and s<k+1> not — a hand-back
    before s<k> was journaled is not the planned raise."""
    inp = job.input if isinstance(job.input, Mapping) else {}
    if kind == "steps":
        k = inp.get("raise_after")
        if attempt != 1 or not isinstance(k, int) or isinstance(k, bool):
            return False
        at_k, after = steps.get(f"s{k}"), steps.get(f"s{k + 1}")
        return (
            at_k is not None and _step_attempt(at_k) == attempt and (after is None or _step_attempt(after) != attempt)
        )
    if kind == "flaky":
        until = inp.get("until_attempt")
        return inp.get("mode") == "raise" and isinstance(until, int) and attempt <= until
    if kind == "member":
        return bool(inp.get("fail"))
    return False


def handed_back(
    r: Any,
    state: Any,
    node: str,
    term: Mapping[str, Any],
    steps: Mapping[int, Mapping[str, Any]] | None = None,
    outage: bool = False,
) -> None:
    """P4's second rule: jobs the node was running at its SIGTERM are finished, not handed back.

    Operations guide "Shutdown": "Running jobs get the shutdown grace to finish; whatever survives is left
    to lease expiry"; PROTOCOL §1: "on SIGTERM: stop claiming, let running jobs finish within a grace
    period". A worker that acks its running jobs back to ready (a retry, a snooze, a release) breaks both.

    Evidence (the final rows; each attempt the nemesis listed running on the node at the signal): the
    attempt ended without ending the job — a later attempt ran it (`attempt` > the listed one) — and not
      * by lease expiry (a `lease_expired` entry for it: a job that outlived the grace, or a crash; the
        first rule judges those), nor
      * by an error its kind raises by itself on that attempt (`planned_failure`, PROTOCOL §3: a planned
        failure is the job's own work; its error's spelling is the worker's), nor
      * by a park — not told apart from a snooze or a release in the final row, so the parking kinds
        (`PARKING_KINDS`) are not judged here (a committed history would show the ack's outcome), nor
      * by an error while PostgreSQL was down during the drain (`outage`: a crash-restart between the
        SIGTERM and the exit — the job's own statements failed, and a failed attempt is retried, §7; a
        1,200 s soak of the reference worker: a `slow` job's attempt failed with OperationalError by two
        crash-restarts 1.9 s and 9.7 s into its node's drain). A snooze or a release (no entry) is still a
        hand-back.
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
        if "lease_expired" in errors or (
            errors and planned_failure(job, attempt, str(kind), {} if steps is None else steps.get(job.id, {}))
        ):
            continue
        if errors and outage:  # failed by the database's crash during the drain, not handed back
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
