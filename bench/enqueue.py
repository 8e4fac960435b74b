"""Bulk enqueue figures (issue 17): `Client.enqueue_many` by batch shape, on one embedded PostgreSQL.

    .venv/bin/python -m bench.enqueue [--jobs 20000] [--batch 1000] [--rounds 3]

Shapes, each enqueuing --jobs jobs in calls of --batch (rounds interleaved, medians printed):
  plain          no unique key (the common bulk insert)
  unique         every job with its own unique key (mode incomplete): the partial unique index is checked
  window         unique keys in window mode (the window bucket is part of the key)
  duplicates     every job's key already held: every row comes back as a Duplicate naming its holder
and, once each: one call of 100,000 plain jobs, and one workflow of 10,000 members (a chain of 10-member
fans). Jobs per second are wall-clock seconds of the calls only; completion is counted in the database.
PostgreSQL: $BELAY_DATABASE_URL or an embedded cluster with fsync and synchronous_commit on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

import psycopg

from impl.client import Client
from impl.provision import provision, redact
from impl.store.migrate import migrate
from model.ops import JobSpec, WorkflowMember


def _specs(shape: str, n: int, tag: str) -> list[JobSpec]:
    if shape == "plain":
        return [JobSpec(queue="bench_enq", worker="noop") for _ in range(n)]
    if shape in ("unique", "duplicates"):
        return [JobSpec(queue="bench_enq", worker="noop", unique_key=f"{tag}-{i}") for i in range(n)]
    if shape == "window":
        return [
            JobSpec(queue="bench_enq", worker="noop", unique_key=f"{tag}-{i}", unique_mode="window", unique_window=3600)
            for i in range(n)
        ]
    raise ValueError(shape)


def rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM belay_jobs WHERE queue = 'bench_enq'").fetchone()[0]


def run_shape(client: Client, url: str, shape: str, jobs: int, batch: int) -> float:
    tag = uuid.uuid4().hex[:8]
    calls = [_specs(shape, min(batch, jobs - s), f"{tag}-{s}") for s in range(0, jobs, batch)]
    if shape == "duplicates":
        for specs in calls:  # the holders, enqueued before the clock starts
            client.enqueue_many(specs)
    before = rows(url)
    started = time.perf_counter()
    for specs in calls:
        result = client.enqueue_many(specs)
        assert len(result.outcomes) == len(specs)
    elapsed = time.perf_counter() - started
    added = rows(url) - before
    assert added == (0 if shape == "duplicates" else jobs), (shape, added)
    return jobs / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.enqueue", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-large", action="store_true", help="skip the 100,000-job call and the 10,000-member workflow")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.batch < 1 or args.rounds < 1:
        p.error("--jobs, --batch and --rounds must be positive")
    db = provision()
    out: dict[str, object] = {"jobs": args.jobs, "batch": args.batch}
    try:
        with psycopg.connect(db.url, autocommit=True) as c:
            migrate(c)
            durability = {k: c.execute(f"SHOW {k}").fetchone()[0] for k in ("fsync", "synchronous_commit")}
        print(f"PostgreSQL: {db.kind} ({db.reason}) at {redact(db.url)}; {durability}")
        shapes = ("plain", "unique", "window", "duplicates")
        figures: dict[str, list[float]] = {s: [] for s in shapes}
        with Client(db.url) as client:
            client.enqueue_many(_specs("plain", 100, "warm"))
            for r in range(args.rounds):
                order = shapes if r % 2 == 0 else tuple(reversed(shapes))
                for shape in order:
                    rate = run_shape(client, db.url, shape, args.jobs, args.batch)
                    figures[shape].append(rate)
                    print(f"round {r + 1} {shape:<10}: {rate:9,.0f} jobs/s", flush=True)
            for shape in shapes:
                out[shape] = statistics.median(figures[shape])
                print(f"median {shape:<10}: {out[shape]:9,.0f} jobs/s ({args.batch} per call)")
            if not args.no_large:
                before = rows(db.url)
                started = time.perf_counter()
                client.enqueue_many(_specs("plain", 100_000, "large"))
                elapsed = time.perf_counter() - started
                assert rows(db.url) - before == 100_000
                out["one_call_100k_s"] = elapsed
                print(f"one call of 100,000 jobs: {elapsed:.2f} s ({100_000 / elapsed:,.0f} jobs/s)")
                members = []
                for i in range(10_000):
                    deps = (f"m{i - 1 - (i % 10)}",) if i >= 10 else ()
                    members.append(WorkflowMember(f"m{i}", JobSpec(queue="bench_enq", worker="noop"), deps))
                started = time.perf_counter()
                client.enqueue_workflow(f"wf-{uuid.uuid4().hex[:8]}", members)
                elapsed = time.perf_counter() - started
                out["workflow_10k_s"] = elapsed
                print(f"one workflow of 10,000 members: {elapsed:.2f} s")
        print(json.dumps(out))
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
