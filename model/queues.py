"""Queue options (belay_queues.opts): what admission (§6) reads, validated strictly.

Unknown keys are refused loudly rather than ignored: a typo in `global_limit` silently ignored would
remove a limit the operator believes is in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from model.validate import InvalidInput, require_int, require_json, require_name

KNOWN = ("limit", "global_limit", "rate", "partition", "paused")


@dataclass(frozen=True)
class Rate:
    """§6 rate {allowed, period, estimate} over bucket queue:<q> or resource:<name>."""

    allowed: int
    period: int  # seconds
    estimate: int = 1
    resource: str | None = None

    def bucket(self, queue: str) -> str:
        return f"resource:{self.resource}" if self.resource else f"queue:{queue}"


@dataclass(frozen=True)
class Partition:
    """§6 partitioned claims: rank per COALESCE(<field>->>key, '')."""

    field: str  # "input" | "meta"
    key: str


@dataclass(frozen=True)
class QueueOpts:
    limit_min: int = 10  # per-node concurrency (adaptive between min and max)
    limit_max: int = 10
    global_limit: int | None = None
    rate: Rate | None = None
    partition: Partition | None = None
    paused: bool = False

    @property
    def needs_admission_lock(self) -> bool:
        """§6: global_limit, rate or partition ⇒ claims serialize on the queue advisory lock."""
        return self.global_limit is not None or self.rate is not None or self.partition is not None

    @property
    def per_key_limit(self) -> int:
        """§6: per_key_limit = global_limit (else local_limit)."""
        return self.global_limit if self.global_limit is not None else self.limit_max

    @classmethod
    def parse(cls, opts: Any) -> QueueOpts:
        if not isinstance(opts, Mapping):
            raise InvalidInput(f"queue options must be a JSON object, got {type(opts).__name__}")
        require_json(dict(opts), "queue options")
        unknown = sorted(set(opts) - set(KNOWN))
        if unknown:
            raise InvalidInput(f"unknown queue options {unknown}; known options: {', '.join(KNOWN)}")
        limit = opts.get("limit", 10)
        if isinstance(limit, Mapping):
            extra = sorted(set(limit) - {"min", "max"})
            if extra or "min" not in limit or "max" not in limit:
                raise InvalidInput(f"limit must be an integer or {{min, max}}, got {dict(limit)}")
            lo, hi = limit["min"], limit["max"]
            require_int(lo, "limit.min", minimum=1)
            require_int(hi, "limit.max", minimum=1)
            if lo > hi:
                raise InvalidInput(f"limit.min ({lo}) exceeds limit.max ({hi})")
        else:
            require_int(limit, "limit", minimum=1)
            lo = hi = limit
        global_limit = opts.get("global_limit")
        require_int(global_limit, "global_limit", minimum=1, optional=True)
        rate = None
        if opts.get("rate") is not None:
            r = opts["rate"]
            if not isinstance(r, Mapping):
                raise InvalidInput("rate must be an object {allowed, period, estimate?, resource?}")
            extra = sorted(set(r) - {"allowed", "period", "estimate", "resource"})
            if extra:
                raise InvalidInput(f"unknown rate options {extra}; known: allowed, period, estimate, resource")
            for key in ("allowed", "period"):
                if key not in r:
                    raise InvalidInput(f"rate needs {key!r}")
            require_int(r["allowed"], "rate.allowed", minimum=1)
            require_int(r["period"], "rate.period", minimum=1)
            require_int(r.get("estimate", 1), "rate.estimate", minimum=1)
            if r.get("resource") is not None:
                require_name(r["resource"], "rate.resource")
            rate = Rate(r["allowed"], r["period"], r.get("estimate", 1), r.get("resource"))
        partition = None
        if opts.get("partition") is not None:
            p = opts["partition"]
            if not isinstance(p, Mapping) or sorted(p) != ["field", "key"]:
                raise InvalidInput("partition must be an object {field: 'input'|'meta', key: <name>}")
            if p["field"] not in ("input", "meta"):
                raise InvalidInput(f"partition.field must be 'input' or 'meta', got {p['field']!r}")
            require_name(p["key"], "partition.key")
            partition = Partition(p["field"], p["key"])
        paused = opts.get("paused", False)
        if not isinstance(paused, bool):
            raise InvalidInput("paused must be true or false")
        return cls(lo, hi, global_limit, rate, partition, paused)


def merge_opts(static: QueueOpts, row: Mapping[str, Any]) -> QueueOpts:
    """A belay_queues row merged over a node's static options, key by key (a key the row does not
    name keeps the node's static value; a key set to null clears it). This is what makes an
    operator's pause — the row key `paused`, an extension of this toolkit that foreign SDKs may
    ignore — stop claiming on every reference node without resetting their configured limits."""
    from dataclasses import replace

    parsed = QueueOpts.parse(row)
    changes: dict[str, Any] = {}
    if "limit" in row:
        changes.update(limit_min=parsed.limit_min, limit_max=parsed.limit_max)
    for key in ("global_limit", "rate", "partition", "paused"):
        if key in row:
            changes[key] = getattr(parsed, key)
    return replace(static, **changes)
