"""What a soak rule concludes, and the small readers of job rows every rule shares.

Lower than soak/judges/checker.py, soak/judges/duties/ and soak/judges/durability.py, which all import it (one home, no
import cycle). `InvariantResult` serves the §11 invariants, the worker duties P1–P10 and D1 alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model import invariants as inv
from model.envelope import EnvelopeError, decode
from model.rows import Job, Step

MAX_SHOWN = 10  # counterexamples kept per rule


@dataclass
class InvariantResult:
    name: str
    verdict: str = "valid"
    checks: int = 0
    violations: int = 0
    counterexamples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exercised: bool = False
    why_unknown: str | None = None
    contract: str | None = None  # the duty's text (P-rows); invariants take theirs from model.invariants
    scenario: dict[str, int] = field(default_factory=dict)  # scenario counts this rule found (soak/judges/coverage.py)

    def add(self, violations: Iterable[inv.Violation | str]) -> None:
        for v in violations:
            self.violations += 1
            if len(self.counterexamples) < MAX_SHOWN:
                self.counterexamples.append(str(v))

    def finish(self) -> None:
        if self.violations:
            self.verdict = "invalid"
        elif self.why_unknown is not None:
            self.verdict = "unknown"
        elif not self.exercised:
            self.verdict = "unknown"
            self.why_unknown = "not exercised in this run"
        else:
            self.verdict = "valid"

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract or inv.CONTRACT.get(self.name, ""),
            "verdict": self.verdict,
            "valid": self.verdict == "valid",
            "checks": self.checks,
            "violations": self.violations,
            "first_counterexample": self.counterexamples[0] if self.counterexamples else None,
            "counterexamples": self.counterexamples,
            "notes": self.notes,
            "why_unknown": self.why_unknown,
        }


def _result(job: Job) -> Any:
    if job.result is None:
        return None
    try:
        return decode(bytes(job.result))
    except (EnvelopeError, ValueError):
        return None


def _value(step: Step) -> Any:
    try:
        return decode(bytes(step.value))
    except (EnvelopeError, ValueError):
        return None


def _digest(value: bytes) -> str:
    return hashlib.md5(bytes(value)).hexdigest()


def _last_error(job: Job) -> str | None:
    entry = job.errors[-1] if job.errors else None
    return entry.get("error") if isinstance(entry, Mapping) else None


def _matches(expected: str, job: Job) -> bool:
    for option in expected.split("|"):
        state, _, error = option.partition(":")
        if job.state == state and (not error or _last_error(job) == error):
            return True
    return False
