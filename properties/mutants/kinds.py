"""The shapes of the mutant catalogue (`Edit`, `Mutant`) and the project's suites, grouped by layer.

Its own module so that every tier's catalogue file (properties/mutants/catalogue.py for impl/,
properties/mutants/certifier.py for the certifier's rules in soak/) builds on it without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- the suites: the project's own tests, grouped by the layer they exercise --------------------------

CONFORMANCE = "properties/test_conformance.py"
STATEFUL = "properties/test_stateful.py"
REGRESSIONS = "properties/test_regressions.py"
MUTANT_REGRESSIONS = "properties/test_mutants_regressions.py"
RUNTIME = "tests/test_runtime.py"
SIGNALS = "tests/test_workflows_signals.py"
PEER_BUGS = ("tests/test_peer_bugs.py",)
# §6 admission under concurrent writers (issue 27: a claim against a renewal), forced schedules on PostgreSQL
ADMISSION_RACES = ("tests/test_admission_races.py",)
TELEMETRY_SUITE = (
    "tests/test_telemetry_retry.py",
    "tests/test_telemetry.py",
)  # issue 13: other job queues' real bugs, as named regressions

STORE_SUITE = (CONFORMANCE, REGRESSIONS, MUTANT_REGRESSIONS, STATEFUL)
RACE_SUITE = (SIGNALS, MUTANT_REGRESSIONS, CONFORMANCE)
RUNTIME_SUITE = (RUNTIME,)
# The durable-execution tier (issue 20): the Client's transactional enqueue, the runtime duties, then the
# model-vs-runtime property test under real faults — fastest first (the runner stops at the first kill).
DURABLE_SUITE = (
    "properties/test_client_transactions.py",
    "properties/test_runtime_duties.py",
    "properties/test_durable_execution.py",
)


@dataclass(frozen=True)
class Edit:
    """Replace the single occurrence of `old` in `path` (relative to the repository root) by `new`."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    """One protocol bug: a name, what it breaks, the contract section, the patch, the catching suite."""

    name: str
    description: str
    section: str
    edits: tuple[Edit, ...]
    suite: tuple[str, ...] = STORE_SUITE
