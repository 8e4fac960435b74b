"""Broken: spawn is not idempotent across re-runs (§8.4: "Spawn MUST be doubly idempotent") — the spawn's
journal name and its children's unique keys carry the attempt, so a parent that parks on its children and
resumes spawns a fresh set every time it runs.

Expected verdict: invalid, I8 (a parent with more children than its spawn declared)."""

from __future__ import annotations

from impl import worker as sdk
from soak.reference_worker import main

_spawn = sdk.JobContext.spawn


def spawn(self, name, children):
    return _spawn(self, f"{name}@{self.attempt}", children)  # BUG: a new spawn on every attempt


if __name__ == "__main__":
    sdk.JobContext.spawn = spawn  # type: ignore[method-assign]
    main()
