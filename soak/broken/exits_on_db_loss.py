"""Broken: the worker exits when it loses its database connection (PROTOCOL.md §1 says: retry, never exit).

Expected verdict: invalid, P1 (a self-exit right after a PostgreSQL crash-restart, with no `exit`
observation from a kind)."""

from __future__ import annotations

import os
import sys

import psycopg

from impl.runtime import Worker
from soak.reference_worker import main


class FragileWorker(Worker):
    def call(self, fn, what):
        try:
            return fn()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:  # BUG: connection loss is fatal
            print(f"database gone during {what}: {exc}; exiting", file=sys.stderr, flush=True)
            os._exit(1)
        except Exception:  # noqa: BLE001 - other transient faults: the normal retry path
            return super().call(fn, what)


if __name__ == "__main__":
    main(worker_class=FragileWorker)
