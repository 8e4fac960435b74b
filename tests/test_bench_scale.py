"""bench.scale runs end to end on a tiny workload: per-round JSON, the summary and the plots (the figures
themselves belong to bench runs; no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from bench import scale


def test_the_scale_bench_writes_per_round_json_a_summary_and_the_plots(tmp_path):
    systems = ["belay"]
    if importlib.util.find_spec("pgqueuer") is not None:
        systems.append("pgqueuer")
    out = tmp_path / "scale"
    assert scale.main(["--quick", "--systems", ",".join(systems), "--fleet-queues", "1,8", "--out", str(out)]) == 0
    result = json.loads((out / "scale.json").read_text())
    assert result["not_run"] == {}
    # backlog 200, 400 and fleet 1, 2 on one queue and on 8 (pgqueuer: 8 entrypoints with concurrency_limit)
    expected = {("backlog", s, n, 1, 1) for s in systems for n in (200, 400)}
    expected |= {("fleet", s, 200, p, k) for s in systems for p in (1, 2) for k in (1, 8)}
    got = {(r["sweep"], r["system"], r["jobs"], r["processes"], r["queues"]) for r in result["rounds"]}
    assert got == expected
    assert len(list((out / "rounds").glob("*.json"))) == len(expected)
    for r in result["rounds"]:
        assert r["drain_per_s"] > 0 and r["cpu_us_per_job"]["worker"] > 0
        assert r["table_buffers_per_job"] > 0  # the queue table's blocks, from pg_statio_user_tables
        if r["system"] == "belay":
            # the real worker's claims scanned the claim index: buffers per scan from pg_statio/pg_stat
            assert r["claim_scans"] > 0 and r["buffers_per_claim_scan"] > 0
            assert r["explains"] and r["explains"][0]["scans"] and r["explains"][0]["buffers"] > 0
        else:
            assert r["claim_scans"] == 0 and r["buffers_per_claim_scan"] is None
    for name in result["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"backlog-rate.png", "backlog-fifths.png", "fleet-rate.png", "fleet-cpu.png"} <= set(result["plots"])
    md = scale.markdown(result)  # the tables of docs/benchmarks.md: one row per sweep point
    assert sum(line.startswith("| belay |") for line in md.splitlines()) == sum(k[1] == "belay" for k in expected)
    # --merge: the rounds of runs made apart (the 1M backlog) in one summary and the same plots
    merged_dir = tmp_path / "merged"
    assert scale.main(["--merge", f"{out / 'scale.json'},{out / 'scale.json'}", "--out", str(merged_dir)]) == 0
    merged = json.loads((merged_dir / "scale.json").read_text())
    assert len(merged["rounds"]) == 2 * len(result["rounds"])
    assert all(s["rounds"] == 2 for s in merged["summary"])
    assert sorted({r["round"] for r in merged["rounds"]}) == [1, 2]  # renumbered: the pairing sees two rounds
    assert all(len(x["per_round"]) == 2 for x in merged["ratios"])
    assert set(merged["plots"]) == set(result["plots"]) and all((merged_dir / n).exists() for n in merged["plots"])


def test_fifths_split_the_drain_by_jobs_done_from_the_first_job_and_divide_buffers_by_scans():
    # (done, claim index blocks, claim scans) per sample, one second apart; the first job is done at t=1
    io = [(0, 0, 0), (5, 0, 0), (20, 15, 20), (40, 35, 40), (60, 65, 60), (80, 105, 80), (100, 155, 100)]
    samples = [
        (float(t), done, {"table_blks": 0.0, "claim_blks": float(blks), "claim_scans": float(scans)})
        for t, (done, blks, scans) in enumerate(io)
    ]
    got = scale.fifths(samples, 100)
    assert [f["done_to"] for f in got] == [20, 40, 60, 80, 100]
    assert got[0]["done_from"] == 5  # from the first sample with a job done: the start-up is no fifth's
    assert [f["buffers_per_claim_scan"] for f in got] == pytest.approx([0.75, 1.0, 1.5, 2.0, 2.5])
    assert [f["rate"] for f in got] == pytest.approx([15.0, 20.0, 20.0, 20.0, 20.0])


def test_an_unknown_system_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        scale.main(["--systems", "nope"])
    assert exc.value.code == 2


LOG = """\
2026-12-07 02:50:01.123 UTC [4242] LOG:  duration: 0.812 ms  execute _pg3_1: WITH ready AS (
\t  SELECT id FROM belay_jobs WHERE queue = $1 AND state = 'ready'
\t  ORDER BY priority, ready_at NULLS FIRST, id LIMIT 10 FOR UPDATE SKIP LOCKED)
\tUPDATE belay_jobs SET state = 'running' FROM ready WHERE belay_jobs.id = ready.id
2026-12-07 02:50:01.124 UTC [4242] DETAIL:  Parameters: $1 = 'bench'
2026-12-07 02:50:01.125 UTC [4243] LOG:  duration: 0.050 ms  parse <unnamed>: SELECT 1 FOR UPDATE SKIP LOCKED
2026-12-07 02:50:01.126 UTC [4243] LOG:  duration: 0.020 ms  bind <unnamed>: SELECT 1 FOR UPDATE SKIP LOCKED
2026-12-07 02:50:01.127 UTC [4243] LOG:  duration: 2.500 ms  execute __asyncpg_stmt_3__: WITH next_job AS (
\tSELECT id FROM pgqueuer WHERE status = 'queued' for update skip locked) SELECT 1
2026-12-07 02:50:01.128 UTC [4244] LOG:  duration: 9.000 ms  statement: UPDATE belay_jobs SET state = 'succeeded'
2026-12-07 02:50:01.129 UTC [4244] LOG:  duration: 1.000 ms  statement: SELECT * FROM belay_jobs FOR UPDATE SKIP LOCKED
"""


def test_claim_latency_reads_only_the_executions_of_statements_that_take_rows():
    # the claim (multi-line), pgqueuer's dequeue (lower case), a simple-protocol claim; not the parse and
    # bind phases, not the ack, not the DETAIL line
    assert scale.claim_durations(LOG) == [0.812, 2.5, 1.0]
    summary = scale.latency_summary([float(x) for x in range(1, 101)])
    assert summary["sampled_claims"] == 100
    assert summary["p50_ms"] == pytest.approx(50.5)
    assert summary["p99_ms"] == pytest.approx(99.01)
    assert scale.latency_summary([])["p99_ms"] is None
