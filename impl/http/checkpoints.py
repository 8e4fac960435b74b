"""Checkpoints as versioned steps (pure; no I/O): how a task's named, overwritable state lives in the
contract's own tables so that a Belay worker in any language can read it (docs/http-checkpoints.md).

A checkpoint is a value the task replaces as it goes (`PUT` sets it, `GET` returns the latest). Steps
are immutable once journaled (§8.2, invariant 3), so each `PUT` journals a new step

    $checkpoint:<name>#<version>        version = 1, 2, 3, … (decimal, no padding)

in the same transaction as the §7 fence on the writing run's attempt, under that job row's lock, so
versions of one checkpoint are written one at a time, in order. The latest state of checkpoint <name>
is the version with the highest number (equivalently the highest `seq`); its `inserted_at` is the
checkpoint's `updated_at`. A plain step named <name> — how servers before versioned checkpoints
stored a checkpoint, and what they journaled for a resolved wait-for-event — counts as version 0.

Why steps and not a signal row: steps go wherever the job goes (retention deletes them together;
signals are pruned by their own TTL and would outlive or predecease the task), keep the 1 MiB value
cap every SDK is held to, and stay immutable — the history of a checkpoint is kept, nothing is
overwritten in place.
"""

from __future__ import annotations

import re

PREFIX = "$checkpoint:"
_VERSION = re.compile(r"[1-9][0-9]{0,17}")


def version_prefix(name: str) -> str:
    """Every version of checkpoint `name` is a step named this plus its number."""
    return f"{PREFIX}{name}#"


def step_name(name: str, version: int) -> str:
    """The step that holds `version` (≥ 1) of checkpoint `name`."""
    if version < 1:
        raise ValueError(f"checkpoint versions start at 1, got {version}")
    return f"{version_prefix(name)}{version}"


def version_of(name: str, step: str) -> int | None:
    """The version of checkpoint `name` that step `step` holds: its number, 0 for the plain legacy
    step `name`, None when the step is no version of that checkpoint (e.g. `a#1`'s steps for `a`)."""
    if step == name:
        return 0
    prefix = version_prefix(name)
    if step.startswith(prefix) and _VERSION.fullmatch(step[len(prefix) :]):
        return int(step[len(prefix) :])
    return None
