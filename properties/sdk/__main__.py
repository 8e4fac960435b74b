"""python -m properties.sdk --adapter "<command>": judge an SDK operation by operation (docs/sdk-adapter.md).

Runs (a) every conformance case the SDK's level allows, with the per-case table, then (b) the Hypothesis
state machine comparing every result and the full database snapshot with the model after every step.
Exit status 0 when both pass, 1 on a finding, 2 on a usage error.

The database: a throwaway one provisioned as the tests do (BELAY_DATABASE_URL's server, Docker, or an
embedded PostgreSQL), or --database-url — a migrated database the harness may EMPTY (it deletes every
Belay row between cases).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from impl.testing import session_databases

    dbs = session_databases()
    try:
        with dbs.fresh() as fresh:
            yield fresh
    finally:
        dbs.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.sdk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", required=True, help='the adapter command, e.g. "node adapters/node/adapter.js"')
    parser.add_argument("--database-url", help="a migrated database the harness may empty (default: a fresh one)")
    parser.add_argument("--schema", default="public")
    parser.add_argument(
        "--only", action="append", help="conformance cases: a section (§7), an area (acks) or an id substring"
    )
    parser.add_argument("--examples", type=int, default=int(os.environ.get("BELAY_SDK_EXAMPLES", "100")))
    parser.add_argument("--steps", type=int, default=30, help="operations per example (rules; some rules send several)")
    parser.add_argument(
        "--random", action="store_true", help="explore randomly (default: derandomized, the same examples every run)"
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds an adapter has to answer one request")
    parser.add_argument("--no-conformance", action="store_true")
    parser.add_argument("--no-machine", action="store_true")
    parser.add_argument("--replay", metavar="FILE", help="run a rule program a failure printed, and report")
    args = parser.parse_args(argv)

    from properties.sdk.conformance import run_conformance
    from properties.sdk.harness import AdapterFailure, AdapterProcess
    from properties.sdk.machine import replay, run_machine

    with _database(args.database_url) as url:
        adapter = AdapterProcess(args.adapter, url, schema=args.schema, timeout=args.timeout)
        try:
            adapter.start()
        except AdapterFailure as exc:
            print(f"the adapter failed its handshake: {exc}", file=sys.stderr)
            return 1
        try:
            print(
                f"adapter: {adapter.sdk} — {adapter.level} level, {len(adapter.ops)} operations, "
                f"transactions: {'yes' if adapter.transactions else 'no'}"
            )
            if args.replay:
                with open(args.replay, encoding="utf-8") as f:
                    error = replay(adapter, url, f.read())
                print("replay: passed" if error is None else f"replay: FAILED: {error}")
                return 0 if error is None else 1
            ok = True
            if not args.no_conformance:
                run = run_conformance(adapter, url, only=args.only)
                print(run.table())
                ok = ok and run.ok
            if not args.no_machine:
                adapter.ensure()
                machine = run_machine(
                    adapter, url, examples=args.examples, steps=args.steps, derandomize=not args.random
                )
                print(machine.report())
                ok = ok and machine.ok
            return 0 if ok else 1
        finally:
            adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
