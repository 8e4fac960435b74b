"""D1 — committed work survives failover (issue 13; docs/failover.md): the judge of soak/faults/failover.py's runs.

Each `failover_watch` in the history lists the commits a client could have observed on the primary just before
a failover; D1 compares each with the final snapshot: a job that no longer exists (or whose id now belongs to a
job inserted at another time) is a lost enqueue — its ledger row went with it; a job watched terminal that is
no longer terminal with the same state and finish time is a lost ack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from model.rows import TERMINAL
from soak.judges.verdicts import InvariantResult

D1 = "D1"
D1_TEXT = (
    "D1 (deployment, issue 13): work a client could observe as committed on the primary — an enqueue, "
    "a terminal ack — survives a failover to the standby"
)


class DurabilityResult(InvariantResult):
    def to_json(self) -> dict[str, Any]:
        return {
            "contract": D1_TEXT,
            "verdict": self.verdict,
            "valid": self.verdict == "valid",
            "checks": self.checks,
            "violations": self.violations,
            "first_counterexample": self.counterexamples[0] if self.counterexamples else None,
            "counterexamples": self.counterexamples,
            "notes": self.notes,
            "why_unknown": self.why_unknown,
        }


def check_durability(state: Any, history: Sequence[Mapping[str, Any]]) -> DurabilityResult | None:
    """D1 over the final snapshot and every `failover_watch` in the history; None when no failover ran."""
    watches = [e for e in history if e.get("type") == "failover_watch"]
    if not watches:
        return None
    r = DurabilityResult(D1)
    mode = next((e.get("mode") for e in history if e.get("type") == "failover_begin"), "?")
    lost_enqueues, lost_acks = [], []
    for n, w in enumerate(watches, 1):
        for job_id, worker, st, attempt, inserted, finished in w.get("jobs", ()):
            r.checks += 1
            job = state.jobs.get(job_id)
            if job is None or job.inserted_at != datetime.fromisoformat(inserted):
                lost_enqueues.append(job_id)
                now_ = "is gone" if job is None else f"now holds a job inserted at {job.inserted_at.isoformat()}"
                r.add(
                    [
                        f"job {job_id} ({worker}, ledger job) was committed on the primary (inserted {inserted}) "
                        f"before failover {n} and {now_}: the enqueue was lost"
                    ]
                )
            elif st in TERMINAL and (
                job.state != st or job.finished_at is None or job.finished_at != datetime.fromisoformat(finished)
            ):
                lost_acks.append(job_id)
                r.add(
                    [
                        f"job {job_id} ({worker}) was committed {st} (attempt {attempt}, finished {finished}) on the "
                        f"primary before failover {n}; after it the row is {job.state} (attempt {job.attempt}, "
                        f"finished {job.finished_at}): the ack was lost and the job ran again"
                    ]
                )
    r.exercised = r.checks > 0
    if not r.exercised:
        r.why_unknown = "no commit was observed in any failover's watch window"
    r.notes.append(
        f"{len(watches)} failover(s), {mode} replication; {r.checks} watched commits compared; "
        f"lost enqueues {len(lost_enqueues)} {lost_enqueues[:20]}, lost acks {len(lost_acks)} "
        f"{lost_acks[:20]}"
    )
    r.finish()
    return r
