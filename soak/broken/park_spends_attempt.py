"""Broken: a park (await a signal, durable sleep, await children) does not raise max_attempts, so every
wait spends one of the job's attempts (docs/decisions.md §7 table: a wait spends no attempt). A job that
parks a few times then has fewer retries left for real failures; nothing else looks wrong.

Expected verdict: invalid, P15 (a parked-and-resumed job's max_attempts is not its enqueued value plus
its parks)."""

from __future__ import annotations

from impl.store import worker_store
from soak.reference_worker import main

if __name__ == "__main__":
    worker_store.PARK_BUDGET["park_credit"] = 0  # BUG: the park UPDATEs add nothing to max_attempts
    main()
