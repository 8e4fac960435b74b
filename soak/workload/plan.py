"""One job the driver inserts (its spec, ledger kind, expected outcome) and the driver's clock.

Shared by soak/workload/driver.py and soak/workload/scenarios.py, below both (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from model import ops


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Plan:
    """One job to insert: its spec, ledger kind, expected outcome and detail."""

    spec: ops.JobSpec
    kind: str
    expected: str = "succeeded"
    detail: dict[str, Any] = field(default_factory=dict)
