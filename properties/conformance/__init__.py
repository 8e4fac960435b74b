"""The Belay conformance suite, as a library: point it at any store and get a per-case report.

    from properties.conformance import exercise, CASES
    report = exercise(lambda: MyStore(url_of_a_fresh_migrated_database()))
    print(report.table())          # one line per case: status, contract section, behaviour, time
    report.raise_for_failures()     # or inspect report.failed / report.ok

A store is anything with `apply(op, conn=None)` over the shared vocabulary (model/ops.py,
model/worker_ops.py) returning the shared result values. `store_factory()` must return a *fresh,
empty, migrated* store — a context manager, or an object with an optional `close()` — because every
case runs on its own store. Cases drive states only through the store's own operations (a job gets to
`failed` by claim + ack Fail), never through SQL, so the same case runs on the in-memory model, on
PostgreSQL, or on a store an SDK author wrote in front of another driver.

Areas (one module each, River style), with the contract sections they check:
  client          §1, §5, §8.1, §8.3, §8.6, §10: compatibility, enqueue and uniqueness, workflow enqueue,
                  reads, signals and steering, cancel, retry, input validation, transactional enqueue
  claims          §6: claim order and predicate, global_limit, rate windows, partitions, renew, reclaim
  acks            §7: every outcome, the fence, the park rule both ways, sleep, after-terminal steps,
                  batched acks (AckMany)
  steps           §8.2: read hit/miss, pre-flight budget check, record + spend, duplicates, events
  children        §8.4: memoized spawn, child keys, ids rebuilt from keys, await-children, reconciler
  cron_retention  §8.5 cron firing; §8.7 pruning (per state, batches, signals, rate windows, live
                  workflows kept, retry of a member whose deps were pruned)
  guide           points docs/sdk-guide.md settles: error entries, await fields on claim, park scopes,
                  settlement edge cases, cron syntax and options, queue rows

Optional capabilities (a case needing one the store lacks is reported as skipped):
  supports_transactional_enqueue  a store that says False must refuse `conn=` loudly (InvalidInput);
  caller_connection()             with the flag True: a context manager yielding a DB-API connection in
                                  an open transaction, so the suite can check commit/rollback visibility.

`exercise(factory, only=...)` selects cases by section ('§7'; '§8' also takes '§8.x'), area
('acks'), id substring, a list of those, or a predicate on `Case`.
"""

from __future__ import annotations

# Importing the area modules registers their cases, in this order.
from properties.conformance import (  # noqa: F401
    acks,
    children,
    claims,
    client,
    cron_retention,
    guide,
    steps,
)
from properties.conformance.core import (
    CASES,
    DEFAULT_NOW,
    Case,
    NotApplicable,
    Outcome,
    Report,
    case,
    exercise,
    require,
    run_case,
    select,
)

AREAS = ("client", "claims", "acks", "steps", "children", "cron_retention", "guide")

__all__ = [
    "AREAS",
    "CASES",
    "DEFAULT_NOW",
    "Case",
    "NotApplicable",
    "Outcome",
    "Report",
    "case",
    "exercise",
    "require",
    "run_case",
    "select",
]
