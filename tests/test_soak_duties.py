"""Worker duties P1–P10 (soak/duties.py) and scenario coverage (soak/coverage.py) on hand-built runs:
each duty flags its own violation, and a duty whose scenario did not occur is `unknown`, never `valid`.

Pure and fast (no database): the baseline run of tests/test_soak_checker.py plus fault-log evidence."""

from __future__ import annotations

from dataclasses import replace

from model.envelope import encode
from soak.checker import Observation
from tests.test_soak_checker import E0, at, baseline, err, job


def duty(result, name):
    return result.duties[name]


def test_a_duty_whose_scenario_did_not_occur_is_unknown_with_the_scenario_named():
    result = baseline().check()
    p4 = duty(result, "P4")
    assert p4.verdict == "unknown" and "SIGTERM of a worker with jobs running" in p4.why_unknown
    row = next(r for r in result.coverage if r["row"] == "P4")
    assert row["verdict"] == "unknown" and row["scenarios"][0]["count"] == 0


def test_p1_a_self_exit_after_a_database_crash_without_an_exit_observation_is_flagged():
    r = baseline()
    r.history += [
        {"t": E0 + 40, "type": "db_crash"},
        {"t": E0 + 40.2, "type": "db_restarted"},
        {"t": E0 - 1, "type": "worker_start", "node": "w4-1"},
        {"t": E0 + 41, "type": "worker_exit", "node": "w4-1", "code": 1},
    ]
    p1 = duty(r.check(), "P1")
    assert p1.verdict == "invalid" and "after a PostgreSQL crash" in p1.counterexamples[0]


def test_p1_an_exit_a_kind_asked_for_is_not_a_violation():
    r = baseline()
    r.history += [
        {"t": E0 + 40, "type": "db_crash"},
        {"t": E0 + 40.2, "type": "db_restarted"},
        {"t": E0 - 1, "type": "worker_start", "node": "w4-1"},
        {"t": E0 + 41, "type": "worker_exit", "node": "w4-1", "code": 75},
    ]
    r.observations.append(Observation(1, 1, "w4-1", "exit", {"reason": "flaky exit"}, at(41)))
    r.observations.append(Observation(1, 1, "w5-1", "exit", {"reason": "flaky exit"}, at(42)))
    p1 = duty(r.check(), "P1")
    assert p1.violations == 0 and p1.verdict == "valid", p1.to_json()


def test_p1_a_worker_that_cannot_stay_up_ends_the_run_invalid_with_its_message():
    r = baseline()
    r.history.append(
        {
            "t": E0 + 5,
            "type": "worker_unstable",
            "node": "w1-6",
            "message": "worker slot 1 could not stay up: 6 exits in a row",
        }
    )
    result = r.check()
    assert result.verdict == "invalid" and "could not stay up" in duty(result, "P1").counterexamples[0]


def lease_sample(t, rows, **kw):
    return {"t": E0 + t, "type": "lease_sample", "at": E0 + t, "rows": rows, **kw}


def test_p2_a_lease_lost_while_its_node_ran_is_a_renewal_failure():
    r = baseline()
    r.jobs[1] = replace(
        r.jobs[1], attempt=2, errors=[err(1, "lease_expired", 20)], result=encode({"echo": 1, "attempt": 2})
    )
    r.history += [
        lease_sample(3, [[1, 1, "w2-1", E0 + 13, "echo"]]),
        lease_sample(8, [[1, 1, "w2-1", E0 + 13, "echo"]]),
    ]
    p2 = duty(r.check(), "P2")
    assert p2.verdict == "invalid" and "job 1: attempt 1 on node w2-1" in p2.counterexamples[0]


def test_p2_a_lease_lost_while_its_node_was_stopped_is_not_blamed():
    r = baseline()
    r.jobs[1] = replace(
        r.jobs[1], attempt=2, errors=[err(1, "lease_expired", 20)], result=encode({"echo": 1, "attempt": 2})
    )
    r.history += [lease_sample(3, [[1, 1, "w1-1", E0 + 13, "echo"]])]  # w1-1 was SIGSTOPped 5 … 25
    assert duty(r.check(), "P2").violations == 0


def test_p3_a_job_that_succeeded_after_a_cancel_requested_before_its_await_is_flagged():
    r = baseline()
    r.history += [
        {
            "t": E0 + 1,
            "type": "cancel",
            "job_id": 4,
            "result": "CancelRequested",
            "plan": "cancel_at_park",
            "kind": "awaiter",
            "state_before": "running",
        },
        {"t": E0 + 2.5, "type": "signal", "job_id": 4, "when": "after-cancel", "woken": [4]},
    ]
    r.history = [e for e in r.history if not (e["type"] == "signal" and e["t"] < E0 + 2)]
    p3 = duty(r.check(), "P3")
    assert p3.verdict == "invalid" and "job 4" in p3.counterexamples[0]


def test_p4_a_job_abandoned_by_a_sigterm_exit_is_flagged():
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 30)])
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[2, 1, "steps"]]},
        {"t": E0 + 10.1, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 0.1},
    ]
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "job 2 (steps) attempt 1" in p4.counterexamples[0]


def test_p4_a_clean_drain_is_valid():
    r = baseline()
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[1, 1, "echo"]]},
        {"t": E0 + 11, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 1.0},
    ]
    assert duty(r.check(), "P4").verdict == "valid"


def test_p4_a_nonzero_exit_after_sigterm_is_flagged_unless_a_kind_asked_the_worker_to_die_meanwhile():
    r = baseline()
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[1, 1, "echo"]]},
        {"t": E0 + 11, "type": "worker_drained", "node": "w2-1", "code": 75, "seconds": 1.0},
    ]
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "status 75" in p4.counterexamples[0]
    r.observations.append(Observation(16, 1, "w2-1", "exit", {"reason": "flaky exit"}, at(10.5)))
    assert duty(r.check(), "P4").verdict == "valid"


def priority_sample(t, rows, due=E0 + 100):
    return {"t": E0 + t, "type": "priority_sample", "batch": 1, "at": E0 + t, "due": due, "rows": rows}


def test_p5_a_priority_5_job_running_while_a_due_priority_0_job_waits_is_flagged():
    r = baseline()
    r.history += [
        priority_sample(101, [[50, 5, "running", 1], [51, 0, "ready", 0]]),
        priority_sample(101.5, [[50, 5, "running", 1], [51, 0, "ready", 0]]),
    ]
    p5 = duty(r.check(), "P5")
    assert p5.verdict == "invalid" and "priority 0" in p5.counterexamples[0]


def test_p5_priority_0_first_is_valid():
    r = baseline()
    r.history += [
        priority_sample(101, [[51, 0, "running", 1], [50, 5, "ready", 0]]),
        priority_sample(101.5, [[51, 0, "running", 1], [50, 5, "ready", 0]]),
    ]
    assert duty(r.check(), "P5").verdict == "valid"


def test_p6_a_cron_job_in_another_queue_than_its_row_says_is_flagged():
    from model.rows import CronRow
    from model.state import from_rows

    r = baseline()
    r.jobs[12] = replace(r.jobs[12], queue="default")
    state = from_rows(r.jobs.values(), r.steps, r.events, r.signals)
    state = replace(
        state, crons={"soak_cron": CronRow("soak_cron", "* * * * *", "echo", {}, {"queue": "soak"}, False, at(0))}
    )
    from soak.checker import SoakLedger, check

    result = check(state, SoakLedger(tuple(r.ledger), tuple(r.observations), tuple(r.unique)), r.history)
    assert duty(result, "P6").verdict == "invalid" and "'default'" in duty(result, "P6").counterexamples[0]


def test_p7_a_sleeper_resumed_without_a_journaled_sleep_is_flagged():
    r = baseline()
    r.add(
        job(
            40,
            "sleeper",
            input={"seconds": 2},
            state="ready",
            attempt=3,
            result=None,
            finished_at=None,
            ready_at=at(10_000),
        ),
        "sleeper",
    )
    assert duty(r.check(), "P7").verdict == "invalid"


def test_p8_a_result_without_its_attempt_is_flagged():
    r = baseline()
    r.jobs[1] = replace(r.jobs[1], result=encode({"echo": 1}))
    assert duty(r.check(), "P8").verdict == "invalid"


def test_p9_a_job_ending_other_than_its_kind_prescribes_is_flagged():
    r = baseline()
    r.jobs[1] = replace(r.jobs[1], state="failed", errors=[err(1, "Boom", 2)], result=None)
    assert duty(r.check(), "P9").verdict == "invalid"


def test_p10_a_parent_seen_parked_with_all_children_terminal_is_flagged():
    r = baseline()
    r.history.append(lease_sample(8.5, [], parked=[5], stranded=[5]))
    p10 = duty(r.check(), "P10")
    assert p10.verdict == "invalid" and "parent 5" in p10.counterexamples[0]


def test_p4_a_lease_lost_while_the_draining_nodes_route_was_partitioned_is_the_networks_not_the_drains():
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 14)])
    r.history += [
        {"t": E0 - 1, "type": "worker_start", "node": "w2-1", "slot": 2},
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[2, 1, "steps"]]},
        {"t": E0 + 12, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 2.0},
    ]
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "job 2 (steps) attempt 1" in p4.counterexamples[0]
    r.history += [  # the node's route was partitioned from before the SIGTERM until after the drain
        {"t": E0 + 3, "type": "net_partition", "slot": 2, "node": "w2-1", "seconds": 15},
        {"t": E0 + 18, "type": "net_heal", "slot": 2, "node": "w2-1", "fault": "partition"},
    ]
    assert duty(r.check(), "P4").verdict == "valid"


def test_p4_a_lease_that_expired_before_the_sigterm_is_not_the_drains():
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 8)])
    r.history += [
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[2, 1, "steps"]]},
        {"t": E0 + 10.1, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 0.1},
    ]
    assert duty(r.check(), "P4").verdict == "valid"


def test_p4_a_lease_lost_after_a_database_crash_shortly_before_the_sigterm_is_the_crashs_not_the_drains():
    """The one-hour soak (run 20261201T071105Z-87fa) flagged two echo jobs: each was claimed just before a
    PostgreSQL crash-restart 3.8 s / 6.3 s before its node's SIGTERM, the claim committed but the node's
    connection died with the server, so the node never knew the job. A crash more than a ttl before the
    SIGTERM excuses nothing."""
    r = baseline()
    r.jobs[2] = replace(r.jobs[2], errors=[err(1, "lease_expired", 14)])
    r.history += [
        {"t": E0 - 1, "type": "worker_start", "node": "w2-1", "slot": 2},
        {"t": E0 + 10, "type": "worker_drain_term", "node": "w2-1", "running": [[2, 1, "steps"]]},
        {"t": E0 + 12, "type": "worker_drained", "node": "w2-1", "code": 0, "seconds": 2.0},
    ]
    long_before = [{"t": E0 - 9, "type": "db_crash"}, {"t": E0 - 8, "type": "db_restarted"}]
    r.history = long_before + r.history
    p4 = duty(r.check(), "P4")
    assert p4.verdict == "invalid" and "job 2 (steps) attempt 1" in p4.counterexamples[0]
    r.history += [{"t": E0 + 5, "type": "db_crash"}, {"t": E0 + 6.5, "type": "db_restarted"}]
    assert duty(r.check(), "P4").verdict == "valid"
