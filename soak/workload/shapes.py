"""What the driver (soak/workload/driver.py) enqueues and how: its configuration, the workflow shapes and the
outcome each member of a shape must end with, the queue and cron names and the SQL it samples with.
"""

from __future__ import annotations

from dataclasses import dataclass

QUEUE = "soak"
CRON = "soak_cron"
TERMINAL_SQL = "('succeeded','failed','cancelled')"
STEP_WINDOW_SLACK_S = 5.0  # clock skew and commit delay between a job's finished_at and the sample that reads it
STEPS_SINCE = (  # the steps of jobs not finished before the given epoch (sample_steps)
    "SELECT s.job_id, s.name, s.seq, md5(s.value) FROM belay_steps s JOIN belay_jobs j ON j.id = s.job_id "
    "WHERE j.finished_at IS NULL OR j.finished_at >= to_timestamp(%s)"
)


RACE_PAUSE_MS = 1500  # a `race` awaiter's pause between its claim and its await (PROTOCOL §3.4 pause_ms)
RACE_DELAY_S = (0.3, 1.2)  # its signal is sent this long after the insert: mostly inside that pause


@dataclass(frozen=True)
class DriverConfig:
    echo_per_s: float = 50.0  # the bulk of the load
    priority: int = 1  # every driver job but `slow` ones; `slow` jobs run at priority 0, ahead of the
    # backlog: a reclaimed `slow` job is claimed again within seconds whatever the load (zombie stops,
    # soak/faults/zombies.py). They are few (a burst every `slow_every`), so they cannot starve the rest.
    steps_per_s: float = 1.0
    costed_per_s: float = 0.4
    awaiter_per_s: float = 0.6
    parent_per_s: float = 0.3
    workflow_per_s: float = 0.15
    flaky_per_s: float = 0.3
    flaky_exit_every: float = 15.0  # seconds between flaky jobs that kill their own worker process
    slow_every: float = 6.0  # seconds between bursts of slow jobs
    slow_burst: int = 3  # slow jobs per burst: one claim tends to take them all, so a SIGSTOP freezes several
    slow_seconds: float = 12.0
    unique_every: float = 1.5
    unique_parallel: int = 4
    sample_every: float = 10.0
    max_attempts: int = 10


def workflow_outcomes(members: list[dict]) -> dict[str, str]:
    """Expected final state of each member (§8.3): failing members fail, cancelled ones are cancelled,
    a member whose dep failed/cancelled without its ignore flag is doomed (cancelled), else it runs."""
    out: dict[str, str] = {}
    pending = list(members)
    while pending:
        for m in list(pending):
            if any(d not in out for d in m["deps"]):
                continue
            pending.remove(m)
            if m.get("cancel") or any(
                out[d] in ("failed", "cancelled") and out[d] not in m["ignore"] for d in m["deps"]
            ):
                out[m["name"]] = "cancelled"
            else:
                out[m["name"]] = "failed" if m.get("fail") else "succeeded"
    return out


WORKFLOW_SHAPES = {
    # a fails → b doomed → c (ignores cancelled) runs; d (ignores failed) runs
    "chain": [
        dict(name="a", deps=[], ignore=[], fail=True),
        dict(name="b", deps=["a"], ignore=[]),
        dict(name="c", deps=["b"], ignore=["cancelled"]),
        dict(name="d", deps=["a"], ignore=["failed"]),
    ],
    # diamond with a failing branch: d tolerates it, e does not
    "diamond": [
        dict(name="a", deps=[], ignore=[]),
        dict(name="b", deps=["a"], ignore=[]),
        dict(name="c", deps=["a"], ignore=[], fail=True),
        dict(name="d", deps=["b", "c"], ignore=["failed"]),
        dict(name="e", deps=["c"], ignore=[]),
    ],
    # a held member cancelled by the driver: c tolerates it, d is doomed
    "cancel": [
        dict(name="a", deps=[], ignore=[], scheduled=3.0),
        dict(name="b", deps=["a"], ignore=[], cancel=True),
        dict(name="c", deps=["b"], ignore=["cancelled"]),
        dict(name="d", deps=["b"], ignore=[]),
    ],
    "plain": [
        dict(name="a", deps=[], ignore=[]),
        dict(name="b", deps=["a"], ignore=[]),
        dict(name="c", deps=["a", "b"], ignore=[]),
    ],
}
