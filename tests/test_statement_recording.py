"""properties.statements.recording() counts the statements of its own block only (issue 55: found by running
the suite in parallel). Its counter is process-wide; a worker process that had run the model comparison (the
`stateful-run` group) before tests/test_runtime.py's reclaim test handed that test the comparison's
12,845 snapshot reads, so `counts["expired_leases"] == 1` failed with 624. In a serial run tests/ comes
first and the counter happened to be empty."""

from __future__ import annotations

from collections import Counter

from properties.statements import RECORDER, recording


def test_a_recording_starts_from_zero_whatever_an_earlier_run_left(store, now):
    from model import ops

    RECORDER.counts["expired_leases"] += 624  # what the model comparison leaves in this process
    RECORDER.by_rule["expired_leases", "reclaim"] += 624
    with recording() as counts:
        store.apply(ops.ReadJob(1))
    assert counts == Counter({"read_job": 1}), counts
    assert set(RECORDER.by_rule) == {("read_job", "-")}, RECORDER.by_rule
