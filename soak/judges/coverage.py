"""Scenario coverage as a first-class result (issue 11).

For every §11 invariant (I1–I9) and every worker duty (P1–P17, soak/judges/duties/) this module names the
scenarios that could expose a violation and counts how many occurred in the run. A row whose scenarios
did not all occur is `unknown` — never `valid` — whatever its checks found; the table
(duty · scenarios · count · verdict) goes into results.json, summary.md and report.html.

`scenario_counts(...)` is pure (snapshot, ledger, history, evidence); `apply(...)` marks rows unknown.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

# row → the scenarios that must each occur at least once (name → description)
SCENARIOS: dict[str, list[tuple[str, str]]] = {
    "I1": [
        ("ledger_jobs", "jobs inserted by the driver"),
        ("kills", "kill -9 of a worker"),
        ("reclaims", "leases reclaimed (lease_expired entries)"),
    ],
    "I2": [("stops", "SIGSTOP of a worker past its lease"), ("stale_acks", "attempts that came back stale")],
    "I3": [("replays", "journaled steps replayed by a later attempt"), ("kills", "kill -9 of a worker")],
    "I4": [
        ("crossings", "budget crossings"),
        ("crash_at_crossing", "crash right after the crossing step (the next attempt's pre-flight)"),
        (
            "zombies_back",
            "duplicate executions of a paid step (a stale `slow` attempt finished its `nap` after a later "
            "attempt journaled it)",
        ),
    ],
    "I5": [
        ("dooms", "doomed workflow members"),
        ("ignore_releases", "releases through an ignore flag"),
        ("cancel_held", "cancel of a held member"),
    ],
    "I6": [("cron_slots", "cron slots due while a worker ran")],
    "I7": [("unique_groups", "concurrent unique-key insert groups")],
    "I8": [("spawns", "parents with a journaled spawn")],
    "I9": [
        ("signal_after_park", "signals delivered to a parked awaiter"),
        (
            "signal_race",
            "signals racing the park (the signal committed while the awaiter's attempt ran, before its park, "
            "or its park committed within the sampling resolution before the signal)",
        ),
        ("lost_wakeups", "lost wake-ups (children finished without $children) rescued by the reconciler"),
    ],
    "P1": [
        ("db_restarts", "PostgreSQL crash-restarts under running workers"),
        ("deliberate_exits", "exits a kind asked for (recorded)"),
    ],
    "P2": [
        ("long_leases", "attempts holding a lease longer than the ttl"),
        ("skew_seen", "leases written by a node whose clock runs ahead (observed)"),
    ],
    "P3": [("cancel_before_park", "cancels requested while a job ran, before its await")],
    "P4": [("drains", "SIGTERM of a worker with jobs running")],
    "P5": [
        ("priority_contention", "claims choosing between due jobs of two priorities"),
        (
            "claim_choice",
            "claims that left a claimable row of their priority untaken, judged by trace validation (the "
            "order-backlog batches keep a standing backlog of one priority)",
        ),
    ],
    "P6": [("cron_jobs", "cron jobs inserted")],
    "P7": [("sleeps_resumed", "sleepers resumed after their durable sleep")],
    "P8": [("succeeded", "successful results")],
    "P9": [
        ("cancel_awaiting_signal", "cancel of a job awaiting a signal"),
        ("cancel_sleeping", "cancel of a sleeping job"),
        ("cancel_awaiting_children", "cancel of a parent awaiting children"),
        ("cancel_held", "cancel of a held workflow member"),
        ("cancel_running_steps", "cancel of a running multi-step job"),
    ],
    "P10": [("parents_parked", "parents parked on $children whose children workers finished")],
    "P11": [
        (
            "drains_sampled",
            "SIGTERM drains judged: by the committed claims (trace validation), or by lease samples taken "
            "after the claims in flight settled",
        )
    ],
    "P12": [("cron_jobs", "cron jobs inserted")],
    "P13": [("cancels_judged", "cancels requested while a multi-step job ran")],
    "P14": [("long_leases", "attempts holding a lease longer than the ttl")],
    "P15": [("parks_resumed", "parking jobs (awaiter, parent, sleeper) that parked, resumed and succeeded")],
    "P16": [
        ("other_reclaims", "reclaims with attempts left (lease_expired entries before the last attempt)"),
        (
            "last_attempt_reclaims",
            "reclaims that fell on a last attempt (attempt = max_attempts: the reclaim must fail the job)",
        ),
    ],
    "P17": [("kills", "kill -9 of a worker (its leases expire and must be reclaimed)")],
    "P18": [
        ("admission_at_limit", "lease samples that saw soak-global at its global_limit (the limit was binding)"),
        ("admission_claims", "claims on the admission queues judged by trace validation"),
    ],
    "P19": [
        (
            "crossings_acked",
            "budget crossings whose attempt went on to ack (not killed or frozen after the crossing step)",
        )
    ],
    "P20": [("slow_attempts", "`slow` attempts that ran (journaled `begin` or wrote `pre_ack`)")],
}


# scenario → what the run lacked and the likely worker-side causes, appended to an unknown row's reason
# (issue 30: an UNKNOWN that helps). Harness-side causes (a run too short, a fault switched off) come first.
HINTS: dict[str, str] = {
    "ledger_jobs": "the driver inserted nothing: the database was unreachable or the run ended at once",
    "kills": "no kill -9 happened: --kill-every 0, or no worker was ever up long enough to be chosen",
    "reclaims": "no lease_expired entry: kills/stops found no running job, or the worker's sweeper never "
    "reclaims expired leases (§6) — see P17",
    "stops": "no SIGSTOP: --stop-every 0 or the run was shorter than one period",
    "stale_acks": "no attempt came back stale: SIGSTOPs froze no running job past its lease, or the worker "
    "records no `ack` observation for a stale ack (PROTOCOL §3.8 SHOULD) and no `pre_ack` showed the row moved on",
    "replays": "no later attempt read a journaled step back: retried `steps`/`flaky` attempts wrote no step "
    "tokens, or the worker re-executes steps instead of reading the journal",
    "crossings": "no `costed` job crossed its budget: its steps journaled no cost (§8.2), or none ran",
    "crash_at_crossing": "no crash_at_crossing job failed at attempt ≥ 2: the worker did not kill itself right "
    "after the crossing step (PROTOCOL §3.3), or its next attempt never ran",
    "zombies_back": "no stale `slow` attempt finished its paid `nap` after a later attempt journaled it: no "
    "zombie stop released with `journaled` (slow jobs not claimed again while one node was frozen — too few "
    "workers or too much load), or the `slow` kind emits no `start` event / `pre_ack` observation (PROTOCOL §3.8)",
    "dooms": "no workflow member was doomed: the failing members did not fail, or settlement never ran",
    "ignore_releases": "no release through an ignore flag: the members with wf_ignore never ran",
    "cancel_held": "no held member was cancelled: its deps finished first (the driver lost the race)",
    "cron_slots": "no minute slot was covered by a running worker: the run is shorter than about 70 s",
    "unique_groups": "no concurrent unique-key insert group ran",
    "spawns": "no parent journaled `$spawn:kids`: the worker's spawn is not a memoized step (§8.4)",
    "signal_after_park": "no signal woke a parked awaiter: awaiters never parked (the worker runs `awaiter` "
    "without a durable wait) or no delivery found one awaiting",
    "signal_race": "no signal committed while its awaiter's attempt ran before parking (nor just after a park): "
    "the `race` awaiters (pause_ms before the await) were claimed after their signal, or no lease sample saw "
    "them running around the delivery — heavy load, or the worker ignores `pause_ms` (PROTOCOL §3.4)",
    "other_reclaims": "no lease_expired entry before a last attempt: kills/stops found no running job, or the "
    "worker's sweeper never reclaims expired leases (§6) — see P17",
    "slow_attempts": "no `slow` attempt journaled `begin` or wrote `pre_ack`: no slow job ran, or the worker "
    "journals no `begin` step and writes no `pre_ack` observation (PROTOCOL §3.8)",
    "crossings_acked": "no `costed` job's crossing attempt acked: its steps journaled no cost (§8.2), none "
    "crossed its budget, or every crossing attempt was killed before its ack (crash_at_crossing only)",
    "last_attempt_reclaims": "no lease expired on a job's last attempt: no kill or SIGSTOP froze a `slow` job "
    "enqueued with max_attempts 1, or the worker's sweeper never reclaims (§6) — see P17",
    "lost_wakeups": "no parent with finished external children was rescued: the worker runs no `$children` "
    "reconciler (§8.4 R2), or no parent parked before the harness finished its children",
    "db_restarts": "no PostgreSQL crash-restart: --db-restart-every 0, or --database-url (no cluster to crash)",
    "deliberate_exits": "no `exit` observation: the worker kills itself without recording it first (PROTOCOL §1) "
    "or no flaky exit / crash_at_crossing job ran",
    "long_leases": "no attempt held its lease longer than the ttl: `slow` jobs did not run, or were reclaimed "
    "before a renewal (renewal missing or late)",
    "skew_seen": "the clock-skewed node's leases did not end ahead of the harness clock: the worker ignores "
    "BELAY_CLOCK_OFFSET (PROTOCOL §1), or that node held no lease while sampled",
    "cancel_before_park": "no cancel was requested while an awaiter ran before its await",
    "drains": "no SIGTERM found a worker with jobs running: --term-every 0, or the run was too short",
    "drains_sampled": "no SIGTERM drain was judged: --term-every 0, or the committed history is off or has gaps "
    "(--no-history) and no lease sample was taken between 1.5 s after a SIGTERM and the node's exit",
    "priority_contention": "no claim chose between due jobs of two priorities: the batches were claimed at once",
    "claim_choice": "no committed claim had a choice within its priority: the history is off (--no-history) or has "
    "gaps, the run is too short for an order-backlog batch (the first comes 10 s in), or the worker claimed "
    "every batch whole",
    "cron_jobs": "no cron job was inserted: the run is shorter than a minute, or the sweeper fires no crons",
    "sleeps_resumed": "no sleeper resumed after its durable sleep: the sleeps outlasted the run, or the worker "
    "sleeps in process instead of parking",
    "succeeded": "nothing succeeded",
    "cancels_judged": "no cancel was requested while a `steps` job ran (they finished before the driver's pass)",
    "parks_resumed": "no awaiter/parent/sleeper parked, resumed and succeeded: the worker waits in process "
    "instead of parking, or the parked jobs never resumed",
    "parents_parked": "no parent was seen parked on `$children`: its children finished before it parked",
    "cancel_awaiting_signal": "no awaiter was cancelled while awaiting: none parked in time",
    "cancel_sleeping": "no sleeper was cancelled while sleeping: none parked in time",
    "cancel_awaiting_children": "no parent was cancelled while awaiting children",
    "cancel_running_steps": "no `steps` job was cancelled while running",
    "admission_at_limit": "soak-global never ran 2 jobs at once: the worker does not claim from every queue in "
    "BELAY_QUEUES (PROTOCOL §1), or its bursts were claimed one at a time",
    "admission_claims": "no claim on soak-global / soak-rate was judged: the committed history is off "
    "(--no-history) or has gaps, or the worker does not claim from those queues (BELAY_QUEUES)",
}


def stale_paid_step_resumes(state: Any, ev: Any) -> set[int]:
    """`slow` jobs a zombie stop made execute their paid step twice, judged without asking the stale
    execution to journal anything: the nemesis froze the attempt inside `nap` (begin journaled, nap not,
    lease live — the fault log's `zombie_stop`), released it only once `nap` was journaled (`zombie_cont`
    journaled), the journal holds `nap` from a *later* attempt, and the node lived on after the SIGCONT (its
    `nap` loop ends at once then: the step's execution completes as a duplicate). Whether the stale execution
    then journals it (absorbed, no spend: §8.2) or is fenced (stricter, allowed) is I4's to judge, not this."""
    from model.envelope import decode

    out: set[int] = set()
    conts = sorted(ev.by_type.get("zombie_cont", ()), key=lambda e: float(e["t"]))
    killed = defaultdict(list)
    for e in (*ev.by_type.get("worker_kill", ()), *ev.by_type.get("worker_exit", ())):
        killed[e.get("node")].append(float(e["t"]))
    for stop in ev.by_type.get("zombie_stop", ()):
        node, t = stop.get("node"), float(stop["t"])
        cont = next((c for c in conts if c.get("node") == node and float(c["t"]) >= t), None)
        if cont is None or cont.get("why") != "journaled":
            continue
        tc = float(cont["t"])
        if any(tc - 0.5 <= k <= tc + 1.0 for k in killed[node]):
            continue
        for job_id, attempt in stop.get("held", ()):
            nap = state.steps.get((job_id, "nap"))
            if nap is None:
                continue
            try:
                value = decode(nap.value)
            except Exception:  # noqa: BLE001 - a foreign value: not attributable
                continue
            by = value.get("attempt") if isinstance(value, Mapping) else None
            if isinstance(by, int) and by > attempt:
                out.add(int(job_id))
    return out


def duplicate_step_writes(state: Any, ledger: Any) -> int:
    """How many `slow` jobs had two attempts each execute `nap` to its end (`duplicate_step_jobs`)."""
    return len(duplicate_step_jobs(state, ledger))


def duplicate_step_jobs(state: Any, ledger: Any) -> set[int]:
    """`slow` jobs whose paid step `nap` was executed by two or more attempts (I4's duplicate writes).

    An attempt executed `nap` itself (rather than reading it back from the journal) when its `pre_ack`
    observation came at least half the nap's length after its own `start` event (PROTOCOL.md §3.8; a
    journal hit returns at once). Each such attempt then wrote `nap`; only one insert can win, so a job
    with two of them had a duplicate paid step write — which §8.2 says adds no spend, and I4 checks
    (spent = sum of the journaled costs). From the database alone: belay_events, soak_observations.
    Caveat: an attempt frozen between its `start` event and its journal read of `nap` (a window of a few
    milliseconds in a 12-second step) would be taken for one that executed it."""
    starts: dict[tuple[int, int], Any] = {}
    for e in state.events.values():
        p = e.payload
        if isinstance(p, Mapping) and p.get("phase") == "start" and isinstance(p.get("attempt"), int):
            starts.setdefault((e.job_id, p["attempt"]), e.inserted_at)
    executed: Counter[int] = Counter()
    for o in ledger.observations:
        job = state.jobs.get(o.job_id)
        if o.phase != "pre_ack" or job is None or job.worker != "slow" or (o.job_id, "nap") not in state.steps:
            continue
        started = starts.get((o.job_id, o.attempt))
        seconds = job.input.get("seconds") if isinstance(job.input, Mapping) else None
        if started is None or not isinstance(seconds, int | float):
            continue
        if (o.at - started).total_seconds() >= seconds / 2:
            executed[o.job_id] += 1
    return {j for j, n in executed.items() if n >= 2}


RACE_RESOLUTION = 0.5  # seconds: the lease samples' period (soak/workload/scenarios.py sample_every)


def signal_races(ev: Any, resolution: float = RACE_RESOLUTION) -> set[tuple[int, float]]:
    """Signal deliveries that raced their awaiter's park (I9's risky case), as (job, delivery time).

    The window: the awaiter's attempt between its claim and its await-park commit. A delivery's commit
    lies between the driver's `signal_intent` (recorded before the write) and its `signal` record (after
    the commit, with the jobs it woke); the lease samples (one consistent read of every running row each
    `resolution` seconds) say when an attempt was running. A delivery raced the park when a sample taken
    within `resolution` before its intent saw an attempt of the job running, and either
      * a sample within `resolution` after its record saw that same attempt still running — the signal
        committed inside the claim→park window, so the park (or its check of the signal row, §7) had to
        see it; or
      * the delivery woke the job — its park committed after that sample and before the signal: the park's
        commit within `resolution` of the signal's.
    A signal delivered before the claim (the attempt not yet running), or long after the park, is no race
    whatever the driver's plan called it: the plan is an intention, this is the event."""
    intents: dict[int, list[float]] = defaultdict(list)
    for e in ev.by_type.get("signal_intent", ()):
        intents[int(e["job_id"])].append(float(e["t"]))
    out: set[tuple[int, float]] = set()
    for e in sorted(ev.by_type.get("signal", ()), key=lambda x: float(x["t"])):
        job_id, done = int(e["job_id"]), float(e["t"])
        # its own intent: the latest one before it not taken by an earlier delivery (each is recorded once)
        mine = [t for t in intents.get(job_id, ()) if t <= done]
        began = max(mine, default=done)
        if mine:
            intents[job_id].remove(began)
        before = [
            key
            for _at, sample in ev.series["lease_sample"].between(began - resolution, began)
            for key in ((int(j), int(a)) for j, a, *_ in sample.get("rows", ()))
            if key[0] == job_id
        ]
        if not before:
            continue
        attempt = before[-1]
        woken = job_id in {int(x) for x in e.get("woken") or ()}
        after = woken or any(
            (int(j), int(a)) == attempt
            for _at, sample in ev.series["lease_sample"].between(done, done + resolution)
            for j, a, *_ in sample.get("rows", ())
        )
        if after:
            out.add((job_id, done))
    return out


def last_attempt_reclaims(state: Any) -> int:
    """Reclaims that fell on a job's last attempt (P16's risky case): `lease_expired` entries whose attempt
    is at least the job's max_attempts. A park raises max_attempts (P15), so the final value bounds the one
    at the reclaim from above: a reclaim counted here was on the last attempt (none is counted twice, some
    parking jobs' may be missed). A correct reclaim fails the job there (§6); a worker that retries it
    shows as an attempt past max_attempts (P16's violation)."""
    return sum(
        1
        for j in state.jobs.values()
        for e in j.errors
        if isinstance(e, Mapping)
        and e.get("error") == "lease_expired"
        and isinstance(e.get("attempt"), int)
        and e["attempt"] >= j.max_attempts
    )


def scenario_counts(state: Any, ledger: Any, ev: Any, extra: Mapping[str, int]) -> dict[str, int]:
    """How often each scenario happened, from the history, the snapshot and the ledger."""
    t = ev.by_type
    cancels: Counter[str] = Counter()
    for e in t["cancel"]:
        if e.get("result") not in ("Cancelled", "CancelRequested"):
            continue
        kind, before = e.get("kind"), e.get("state_before")
        if kind == "awaiter" and before == "awaiting":
            cancels["cancel_awaiting_signal"] += 1
        elif kind == "sleeper" and before == "sleeping":
            cancels["cancel_sleeping"] += 1
        elif kind == "parent" and before == "awaiting":
            cancels["cancel_awaiting_children"] += 1
        elif kind == "member" and (before == "held" or (e.get("result") == "Cancelled" and before != "ready")):
            cancels["cancel_held"] += 1
        elif kind == "steps" and before == "running" and e.get("result") == "CancelRequested":
            cancels["cancel_running_steps"] += 1
    cancels_before_park = sum(
        1 for e in t["cancel"] if e.get("plan") == "cancel_at_park" and e.get("result") == "CancelRequested"
    )
    reclaims = sum(
        1 for j in state.jobs.values() for e in j.errors if isinstance(e, Mapping) and e.get("error") == "lease_expired"
    )
    crash_at_crossing = 0
    by_id = ledger.by_id()
    for j in state.jobs.values():
        entry = by_id.get(j.id)
        if (
            entry is not None
            and entry.kind == "costed"
            and j.input.get("crash_at_crossing")
            and j.attempt >= 2
            and j.state == "failed"
        ):
            crash_at_crossing += 1
    rescued = 0
    for e in t["lost_wakeup"]:
        parent = state.jobs.get(e["parent"])
        if parent is not None and parent.state == "succeeded":
            rescued += 1
    woken_after = sum(1 for e in t["signal"] if e.get("woken") and e.get("when") in ("after", "after-cancel"))
    races = len(signal_races(ev))  # issue 51: the race itself, not the deliveries the plan called races
    counts = {
        "ledger_jobs": len(ledger.entries),
        "kills": len(t["worker_kill"]),
        "reclaims": reclaims,
        "last_attempt_reclaims": (last := last_attempt_reclaims(state)),  # issue 51: P16's risky case itself
        "other_reclaims": reclaims - last,
        "stops": len(t["worker_stop"]),
        "db_restarts": len(t["db_restarted"]),
        "deliberate_exits": sum(1 for o in ledger.observations if o.phase == "exit"),
        "long_leases": len(ev.long_attempts()),
        "skew_seen": len(ev.skew_seen),
        "cancel_before_park": cancels_before_park,
        "drains": sum(1 for e in t["worker_drain_term"] if e.get("running")),
        "crash_at_crossing": crash_at_crossing,
        # issue 30: either evidence — two attempts that each ran `nap` to its end (both wrote pre_ack), or a
        # stale execution resumed inside `nap` after a later attempt journaled it (no write asked of it)
        "zombies_back": len(duplicate_step_jobs(state, ledger) | stale_paid_step_resumes(state, ev)),
        "lost_wakeups": rescued,
        "signal_after_park": woken_after,
        "signal_race": races,
        "cancel_held": cancels["cancel_held"],
        "succeeded": sum(1 for j in state.jobs.values() if j.state == "succeeded"),
        **{
            k: cancels[k]
            for k in ("cancel_awaiting_signal", "cancel_sleeping", "cancel_awaiting_children", "cancel_running_steps")
        },
    }
    counts.update(extra)
    return counts


def apply(results: Mapping[str, Any], counts: Mapping[str, int]) -> list[dict[str, Any]]:
    """Mark every row whose scenarios did not all occur `unknown`; return the coverage table."""
    table = []
    for name, scenarios in SCENARIOS.items():
        r = results.get(name)
        if r is None:
            continue
        missing = [(key, desc) for key, desc in scenarios if counts.get(key, 0) <= 0]
        if missing and not r.violations:
            r.exercised = False
            why = "scenario(s) did not occur in this run: " + "; ".join(
                f"{desc} [lacked: {HINTS[key]}]" if key in HINTS else desc for key, desc in missing
            )
            r.why_unknown = why if r.why_unknown is None else f"{r.why_unknown}; {why}"
        table.append(
            {
                "row": name,
                "scenarios": [
                    {"scenario": desc, "key": key, "count": int(counts.get(key, 0))} for key, desc in scenarios
                ],
            }
        )
    return table


def finish_table(table: list[dict[str, Any]], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    for row in table:
        r = results[row["row"]]
        row.update(
            verdict=r.verdict,
            checks=r.checks,
            violations=r.violations,
            why=r.counterexamples[0] if r.counterexamples else r.why_unknown,
        )
    return table


def markdown(table: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## Scenario coverage", "", "| row | scenarios (count) | checks | verdict |", "|---|---|---|---|"]
    for row in table:
        sc = "; ".join(f"{s['scenario']} ({s['count']})" for s in row["scenarios"])
        lines.append(f"| {row['row']} | {sc} | {row['checks']} | {row['verdict']} |")
    return lines


__all__ = [
    "HINTS",
    "SCENARIOS",
    "apply",
    "duplicate_step_jobs",
    "duplicate_step_writes",
    "finish_table",
    "last_attempt_reclaims",
    "markdown",
    "scenario_counts",
    "signal_races",
    "stale_paid_step_resumes",
]
