"""bench.steady runs end to end in its quick form (a short calibration, 2 minutes of load, a 30 s held
transaction): the JSON's shape, the plots, and that what it claims to set up really happened — the held
transaction pins the database's xmin while it is open, and retention pruning deletes rows. No timing or
rate is asserted; the summaries are checked on made-up samples."""

from __future__ import annotations

import json

import pytest

from bench import steady

SAMPLE_KEYS = {
    "minute",
    "completed",
    "throughput_per_s",
    "p50_s",
    "p99_s",
    "backlog_ready",
    "rows",
    "heap_bytes",
    "indexes_bytes",
    "claim_index_bytes",
    "n_live_tup",
    "n_dead_tup",
    "pruned_total",
    "autovacuum_count",
    "oldest_xmin_age",
    "buffers_per_claim_scan",
}


def test_the_quick_steady_run_writes_every_sample_the_hold_and_the_plots(tmp_path, capsys):
    out = tmp_path / "steady"
    assert steady.main(["--quick", "--hold-tx-at", "0.5", "--hold-tx-for", "0.5", "--out", str(out)]) == 0
    result = json.loads((out / "steady.json").read_text())
    assert result["calibration"]["max_rate"] > 0 and result["rate"] > 0
    assert result["autovacuum_settings"]["autovacuum"] == "on"
    samples = result["samples"]
    assert len(samples) >= 6  # 2 minutes at 15 s
    for s in samples:
        assert set(s) >= SAMPLE_KEYS
    assert sum(s["completed"] for s in samples) > 0
    assert all(s["heap_bytes"] > 0 and s["indexes_bytes"] > 0 for s in samples)
    assert any(s["buffers_per_claim_scan"] for s in samples)  # the worker's claim scans, from pg_statio
    # retention (40 s in --quick) really prunes within the run
    assert samples[-1]["pruned_total"] > 0
    hold = result["hold"]
    assert {"began_minute", "ended_minute", "xid", "recovery"} <= set(hold)
    assert hold["ended_minute"] - hold["began_minute"] == pytest.approx(0.5, abs=0.1)
    inside = [s for s in samples if hold["began_minute"] < s["minute"] < hold["ended_minute"]]
    # the snapshot was really held: some backend's xmin is as old as the held xid (the xids since then)
    assert inside
    for s in inside:
        assert s["next_xid"] - hold["xid"] > 100  # traffic: claims, acks and inserts take xids
        assert s["oldest_xmin_age"] >= s["next_xid"] - hold["xid"] - 5
    assert {"pre_hold", "level", "recovery_minutes", "back_at_minute"} <= set(hold["recovery"])
    fl = result["first_vs_last"]
    assert fl["first"]["samples"] > 0 and fl["last"]["samples"] > 0
    assert set(result["plots"]) == {
        "throughput.png",
        "latency.png",
        "dead-tuples.png",
        "sizes.png",
        "claim-buffers.png",
        "backlog.png",
    }
    for name in result["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert steady.main(["--markdown", str(out / "steady.json")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| min | jobs/s (A)") and len(table) >= 4  # header, rule, a row per minute
    both = f"{out / 'steady.json'},{out / 'steady.json'}"
    assert steady.main(["--overlay", both, "--out", str(tmp_path / "overlay")]) == 0
    overlays = sorted((tmp_path / "overlay").glob("overlay-*.png"))
    assert len(overlays) == 6 and all(f.read_bytes()[:4] == b"\x89PNG" for f in overlays)


def _s(minute: float, backlog: int, p99: float | None) -> dict:
    return {
        "minute": minute,
        "backlog_ready": backlog,
        "p99_s": p99,
        "p50_s": p99,
        "throughput_per_s": 100.0,
        "n_dead_tup": 10,
        "buffers_per_claim_scan": 5.0,
        "heap_bytes": 1,
        "indexes_bytes": 1,
        "claim_index_bytes": 1,
        "rows": 1,
    }


def test_recovery_is_the_first_sample_after_the_hold_back_at_the_pre_hold_level():
    # pre-hold (minutes 5-10): backlog ≤ 20, p99 ≤ 0.1 s; held 10-20; still high until minute 24
    samples = [_s(m, 20 if m % 2 else 10, 0.1) for m in range(1, 11)]
    samples += [_s(11, 15, 0.1)] + [_s(m, 5000 * (m - 10), 3.0) for m in range(12, 21)]  # fine at first
    samples += [_s(21, 30000, 4.0), _s(22, 9000, 2.0), _s(23, 200, 0.2), _s(24, 25, 0.12), _s(25, 10, 0.1)]
    r = steady.recovery(samples, 10.0, 20.0, rate=100.0)
    assert r["pre_hold"]["backlog_max"] == 20 and r["pre_hold"]["p99_s_max"] == 0.1
    assert r["level"] == {"backlog_ready": 120.0, "p99_s": 0.15}  # max(1.5×20, 20 + 100); max(0.15, 0.1 + 0.05)
    assert r["worst_backlog"] == [20, 50000] and r["worst_p99_s"] == [21, 4.0]
    assert r["back_at_minute"] == 24 and r["recovery_minutes"] == 4
    # a sample at the level during the hold is not a recovery; none after it: None
    never = samples[:11] + [_s(m, 40000, 5.0) for m in range(12, 26)]
    assert steady.recovery(never, 10.0, 20.0, rate=100.0)["recovery_minutes"] is None


def test_first_and_last_windows_split_the_run_by_minute():
    samples = [_s(m, m, 0.1) for m in range(1, 31)]
    fl = steady.first_last(samples, 30.0)
    assert fl["window_minutes"] == 10
    assert (fl["first"]["samples"], fl["last"]["samples"]) == (10, 10)
    assert fl["first"]["backlog_ready"] == 5.5 and fl["last"]["backlog_ready"] == 25.5
