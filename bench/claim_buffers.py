"""A scratch experiment (issue 54, target 2): buffers per claim against the jobs already claimed, for the
claim statement as it is (impl/store/sql/worker.sql claim_plain, `belay_jobs_claim_order_idx`), and what bounds it.

    .venv/bin/python -m bench.claim_buffers [--jobs 100000] [--take 10] [--vacuum-every 0,20000]
        [--storage 'autovacuum_vacuum_scale_factor=0,autovacuum_vacuum_threshold=10000' ...] [--json F]

One process, one connection, no worker: the backlog is enqueued with Client.enqueue_many, ANALYZE, then
claimed `take` at a time by running claim_plain itself (qb_take's text, as the worker runs it) under
EXPLAIN (ANALYZE, BUFFERS) — which executes it: every claim claims, and reports its own buffers (shared
hit + read of the whole statement, and of the claim index scan alone) — and each claimed batch is then
marked succeeded as an ack does (state 'running' → 'succeeded'). Buffer counts are deterministic-ish:
machine load does not change them. Variants (--vacuum-every K > 0): `VACUUM belay_jobs` after every K
jobs claimed, what autovacuum would do with autovacuum_vacuum_threshold = K and scale factor 0 on the
table — timed, since that is its price. Autovacuum itself stays as the cluster runs it (its runs during
the experiment are counted). Variants (--storage R, repeatable): no manual VACUUM, but
`ALTER TABLE belay_jobs SET (R)` before the enqueue — per-table autovacuum storage parameters, so that
autovacuum itself vacuums the table on a queue's cadence. --retained N first fills the table with N
succeeded rows (what retention keeps: they count in autovacuum's scale-factor threshold, never in the
claim's scan); --naptime S runs the cluster at autovacuum_naptime = S (a server setting, not a table's).

Also `generic`: the claim prepared (plan_cache_mode = force_generic_plan) while the table is empty and
never analyzed, then run against the backlog — the plan the issue warns "can sequential-scan it until
the first autoanalyze" — and again after ANALYZE.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.peers import belay_enqueue, belay_setup, drop_database, fresh_database
from impl.provision import ClusterConfig, provision
from impl.store.queries import SchemaSQL

# Finished jobs kept by retention: rows the claim never reads (not in its partial index), but that count in
# autovacuum's threshold (autovacuum_vacuum_scale_factor × reltuples).
RETAINED = (
    "INSERT INTO belay_jobs (queue, worker, state, inserted_at, finished_at) "
    "SELECT 'retained', 'noop', 'succeeded', now(), now() FROM generate_series(1, %(n)s)"
)


def claim_text(take: int) -> str:
    return SchemaSQL().qb_take("claim_plain", take).decode()


def _scan_nodes(plan: dict, found: list[dict]) -> list[dict]:
    if "Scan" in plan["Node Type"]:
        found.append(plan)
    for child in plan.get("Plans", ()):
        _scan_nodes(child, found)
    return found


def _buffers(node: dict) -> int:
    return int(node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0))


def drain(url: str, n: int, take: int, vacuum_every: int) -> dict[str, Any]:
    text = claim_text(take)
    per_claim: list[tuple[int, int, int]] = []  # (claimed before, statement buffers, claim index scan buffers)
    vacuums: list[float] = []
    plans: set[str] = set()
    with psycopg.connect(url, autocommit=True) as c:
        claimed = since_vacuum = 0
        started = time.perf_counter()
        while claimed < n:
            now = datetime.now(UTC)
            params = {
                "queue": "bench",
                "now": now,
                "node": "x",
                "lease_until": now + timedelta(seconds=30),
                "take": take,
            }
            row = c.execute(b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text.encode(), params).fetchone()
            assert row is not None
            plan = row[0][0]["Plan"]
            scans = _scan_nodes(plan, [])
            claim_scan = [
                s for s in scans if s.get("Index Name") in ("belay_jobs_claim_order_idx", "belay_jobs_claim_idx")
            ]
            plans.update(s["Node Type"] + (" on " + s["Index Name"] if "Index Name" in s else "") for s in scans)
            got = int(plan["Actual Rows"])
            if got == 0:
                raise RuntimeError(f"claim returned nothing at {claimed} of {n}")
            per_claim.append((claimed, _buffers(plan), sum(_buffers(s) for s in claim_scan)))
            c.execute(
                "UPDATE belay_jobs SET state = 'succeeded', finished_at = now(), lease_until = NULL, leased_by = NULL "
                "WHERE state = 'running' AND leased_by = 'x'"
            )
            claimed += got
            since_vacuum += got
            if vacuum_every and since_vacuum >= vacuum_every:
                t0 = time.perf_counter()
                c.execute("VACUUM belay_jobs")
                vacuums.append(time.perf_counter() - t0)
                since_vacuum = 0
        seconds = time.perf_counter() - started
        c.execute("SELECT pg_stat_clear_snapshot()")
        av = c.execute(
            "SELECT autovacuum_count, autoanalyze_count FROM pg_stat_user_tables WHERE relname = 'belay_jobs'"
        ).fetchone()
    # per twentieth of the drain: mean buffers per claim
    steps = []
    for k in range(20):
        lo, hi = n * k / 20, n * (k + 1) / 20
        sel = [p for p in per_claim if lo <= p[0] < hi]
        if sel:
            steps.append(
                {
                    "claimed_from": int(lo),
                    "statement_buffers": round(statistics.mean(p[1] for p in sel), 1),
                    "claim_index_buffers": round(statistics.mean(p[2] for p in sel), 1),
                }
            )
    return {
        "jobs": n,
        "take": take,
        "vacuum_every": vacuum_every,
        "claims": len(per_claim),
        "seconds_incl_explain": round(seconds, 2),
        "plans": sorted(plans),
        "statement_buffers_mean": round(statistics.mean(p[1] for p in per_claim), 1),
        "statement_buffers_max": max(p[1] for p in per_claim),
        "claim_index_buffers_first": per_claim[0][2],
        "claim_index_buffers_last": per_claim[-1][2],
        "vacuums": len(vacuums),
        "vacuum_seconds_total": round(sum(vacuums), 3),
        "autovacuum_runs": av[0] if av else None,
        "autoanalyze_runs": av[1] if av else None,
        "by_twentieth": steps,
    }


def generic(url: str, n: int, take: int, mode: str = "plain") -> dict[str, Any]:
    """The claim's generic plan made on an empty table, then run on a backlog of n. mode: `plain` — never
    analyzed, plan_cache_mode = force_generic_plan; `analyzed` — the same after an ANALYZE of the empty
    table (what a migration-time ANALYZE would leave); `auto` — never analyzed, plan_cache_mode auto (the
    server's default, as the worker's psycopg-prepared claim gets it), executed 6 times on the empty table
    (5 custom plans, then the server's choice)."""
    text = claim_text(take).replace("%(take)s", str(take))  # above INLINE_TAKE_MAX qb_take leaves it a parameter
    for i, name in enumerate(("queue", "now", "node", "lease_until")):
        text = text.replace(f"%({name})s", f"${i + 1}")
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as c:
        if mode == "analyzed":
            c.execute("ANALYZE belay_jobs")
        if mode != "auto":
            c.execute("SET plan_cache_mode = force_generic_plan")
        c.execute(f"PREPARE claim(text, timestamptz, text, timestamptz) AS {text}")
        run = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim('bench', now(), 'x', now() + interval '30 s')"
        for _ in range(6 if mode == "auto" else 1):  # cached on the empty table
            c.execute("EXECUTE claim('bench', now(), 'x', now() + interval '30 s')")
        belay_enqueue(url, n)
        for when in ("before ANALYZE", "after ANALYZE"):
            if when == "after ANALYZE":
                c.execute("ANALYZE belay_jobs")
            row = c.execute(run).fetchone()
            assert row is not None
            plan = row[0][0]["Plan"]
            c.execute("SELECT pg_stat_clear_snapshot()")
            counts = c.execute(
                "SELECT autovacuum_count, autoanalyze_count, analyze_count FROM pg_stat_user_tables "
                "WHERE relname = 'belay_jobs'"
            ).fetchone()
            out[when] = {
                "autovacuum, autoanalyze, analyze runs so far": list(counts) if counts else None,
                "scans": sorted({s["Node Type"] + (" on " + s.get("Index Name", "")) for s in _scan_nodes(plan, [])}),
                "buffers": _buffers(plan),
                "ms": plan.get("Actual Total Time"),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.claim_buffers", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=100000)
    p.add_argument("--take", type=int, default=10)
    p.add_argument("--vacuum-every", default="0,10000", help="comma list; '' runs only the generic-plan check")
    p.add_argument("--storage", action="append", default=[], help="reloptions for ALTER TABLE belay_jobs SET (...)")
    p.add_argument(
        "--generic", default="plain", help="comma list of generic-plan checks: plain, analyzed, auto; '' none"
    )
    p.add_argument("--retained", type=int, default=0, help="succeeded rows in the table before the backlog")
    p.add_argument("--naptime", default="", help="the cluster's autovacuum_naptime (e.g. 5s); default PostgreSQL's")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    results: dict[str, Any] = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "runs": []}
    config = ClusterConfig(extra_settings={"autovacuum_naptime": args.naptime}) if args.naptime else None
    db = provision(cluster_config=config)
    try:
        with psycopg.connect(db.url, autocommit=True) as c:
            results["autovacuum"] = [
                c.execute(f"SHOW {s}").fetchone()[0]  # type: ignore[index]
                for s in ("autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor")
            ]
        variants = [(int(x), "") for x in args.vacuum_every.split(",") if x.strip()]
        variants += [(0, storage) for storage in args.storage]
        for every, storage in variants:
            url = fresh_database(db.url)
            try:
                belay_setup(url, pg_autovacuum_defaults=True)  # the baseline: PostgreSQL's defaults
                if storage:
                    with psycopg.connect(url, autocommit=True) as c:
                        c.execute(f"ALTER TABLE belay_jobs SET ({storage})")
                with psycopg.connect(url, autocommit=True) as c:
                    c.execute(RETAINED, {"n": args.retained})
                belay_enqueue(url, args.jobs)
                with psycopg.connect(url, autocommit=True) as c:
                    c.execute("VACUUM ANALYZE" if args.retained else "ANALYZE")
                r = drain(url, args.jobs, args.take, every)
                r.update(storage=storage or None, retained=args.retained, naptime=args.naptime or "default")
                results["runs"].append(r)
                print(
                    f"vacuum every {every or 'never'}, storage ({storage or 'none'}): claim index buffers first {r['claim_index_buffers_first']} "
                    f"last {r['claim_index_buffers_last']}; statement buffers mean {r['statement_buffers_mean']} "
                    f"max {r['statement_buffers_max']}; {r['vacuums']} vacuums, {r['vacuum_seconds_total']} s; "
                    f"autovacuum runs {r['autovacuum_runs']}; plans {r['plans']}",
                    flush=True,
                )
                for s in r["by_twentieth"]:
                    print(
                        f"   claimed {s['claimed_from']:>8,}: statement {s['statement_buffers']:>7} "
                        f"claim index {s['claim_index_buffers']:>7}"
                    )
            finally:
                drop_database(db.url, url)
        for mode in [m.strip() for m in args.generic.split(",") if m.strip()]:
            url = fresh_database(db.url)
            try:
                belay_setup(url)
                key = "generic" if mode == "plain" else f"generic_{mode}"
                results[key] = generic(url, args.jobs, args.take, mode)
                print(f"{key}: plan made on the empty table: {results[key]}", flush=True)
            finally:
                drop_database(db.url, url)
    finally:
        db.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
