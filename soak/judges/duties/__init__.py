"""Worker duties (P1 … P17): what PROTOCOL.md and contract §§5–9 ask of a worker beyond the §11 invariants.

Pure, like soak/judges/checker.py: every rule reads the post-drain snapshot, the ledger (with the workers'
observations) and the harness history (faults, driver actions, lease samples). Each duty ends `valid`
only when it held AND the scenarios that could expose its violation occurred (soak/judges/coverage.py decides
the latter); `invalid` names the job or node and what went wrong.

| duty | source | rule |
|---|---|---|
| P1 | PROTOCOL §1 | a worker never exits by itself (database loss included) except the exits a kind asks for, which it records as an `exit` observation first; a worker that cannot stay up ends the run |
| P2 | §6 | leases are renewed: no attempt loses its lease while its node is alive, not stopped, not cut off and the database up (also when another node's clock runs ahead) |
| P3 | §8.6, §7 | a cancel requested while a job runs is honoured at its next boundary, a park included: the job ends cancelled |
| P4 | PROTOCOL §1, operations "Shutdown" | on SIGTERM a worker drains: exits 0 within the grace (≤ 15 s) and the jobs it was running end by their own acks, not by lease expiry, and are not handed back (an ack to ready — a retry, a snooze, a release — that ends the attempt without the job's own work) |
| P5 | §6 | claims take claimable jobs in priority order (priority ASC, ready_at, id): across priorities from the priority samples, within a priority from the committed claims (soak/judges/timing/) |
| P6 | §8.5 | cron slots are inserted as their `belay_crons` row says: queue (opts), kind, input |
| P7 | §8 (`$sleep:`) | a durable sleep journals its wake time (`$sleep:<name>`) before parking and does not sleep again on resume |
| P8 | PROTOCOL §2 | every successful result carries the attempt that produced it |
| P9 | PROTOCOL §3 | every soak job ends as its kind prescribes (the ledger's expected outcome), cancels of parked jobs included |
| P10 | §7 step 2, §8.4 (R1) | every terminal write of a child delivers `$children` to its parent, unconditionally |
| P11 | operations "Shutdown", PROTOCOL §1 | on SIGTERM producers stop claiming first: no attempt is claimed by a node after its own SIGTERM |
| P12 | §8.5 | a cron slot is inserted only once due (its minute T reached: the inserting node's `now` ≥ T) and never after its row was paused |
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

from collections.abc import Mapping
from typing import Any

from soak.judges.duties.evidence import SAMPLE_TYPES as SAMPLE_TYPES
from soak.judges.duties.evidence import AttemptFacts as AttemptFacts
from soak.judges.duties.evidence import Evidence as Evidence
from soak.judges.duties.evidence import Samples as Samples
from soak.judges.duties.outcomes import p5_priority as p5_priority
from soak.judges.duties.outcomes import p6_crons as p6_crons
from soak.judges.duties.outcomes import p7_sleeps as p7_sleeps
from soak.judges.duties.outcomes import p8_attempts as p8_attempts
from soak.judges.duties.outcomes import p9_outcomes as p9_outcomes
from soak.judges.duties.outcomes import p10_children_signal as p10_children_signal
from soak.judges.duties.running import handed_back as handed_back
from soak.judges.duties.running import p1_stays_up as p1_stays_up
from soak.judges.duties.running import p2_renews_leases as p2_renews_leases
from soak.judges.duties.running import p3_cancel_at_park as p3_cancel_at_park
from soak.judges.duties.running import p4_drains as p4_drains
from soak.judges.duties.running import p19_crossing_fails as p19_crossing_fails
from soak.judges.duties.running import p20_evidence as p20_evidence
from soak.judges.duties.timing import p11_no_claims_after_term as p11_no_claims_after_term
from soak.judges.duties.timing import p12_cron_due as p12_cron_due
from soak.judges.duties.timing import p13_cancel_at_next_step as p13_cancel_at_next_step
from soak.judges.duties.timing import p14_renewal_cadence as p14_renewal_cadence
from soak.judges.duties.timing import p15_wait_spends_no_attempt as p15_wait_spends_no_attempt
from soak.judges.duties.timing import p16_attempts_bounded as p16_attempts_bounded
from soak.judges.duties.timing import p17_reclaims_expired as p17_reclaims_expired
from soak.judges.duties.timing import p18_admission as p18_admission

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


def later_duties(
    duties: Mapping[str, Any],
    state: Any,
    ledger: Any,
    ev: Evidence,
    timeline: Any,
    steps: Mapping[int, Mapping[str, Any]],
    committed: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """P11–P18 (the checker calls this once); returns their scenario counts for soak/judges/coverage.py.
    `committed`: the trace validation's findings (soak/judges/refine/), e.g. the commit time of each
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
