"""Claim admission arithmetic (wire contract §6), exact and pure.

Both the in-memory model and the PostgreSQL implementation call these functions: the Postgres store
reads the counts under the queue's advisory lock (``pg_advisory_xact_lock(hashtext('belay:' || q))``)
and then does the arithmetic here, so the two stores cannot disagree about how many jobs to claim.

The §6 formulas implemented::

    global_limit:  allowed = limit - count(*) WHERE queue=$q AND state='running' AND lease_until > $now
    rate:          w          = floor(epoch/period)*period
                   used       = count(w) + round(count(w-period) * (1 - (epoch-w)/period))
                   admit_jobs = min(demand, floor(max(min(allowed - used, allowed), 0) / max(estimate,1)))
                   after claiming N jobs: debit N * estimate into window w (upsert-increment)
    partitioned:   row_number() OVER (PARTITION BY COALESCE(field->>$key,'') ORDER BY priority,
                   ready_at NULLS FIRST, id) <= greatest(per_key_limit - running_k, 0), global order,
                   LIMIT take

Decisions:

* No floats, no clock, no I/O, no randomness. Every value is an ``int`` or a ``fractions.Fraction``;
  passing a float (or a bool) raises ``TypeError`` rather than silently going inexact.
* Instants are integer microseconds since the Unix epoch (timestamptz has µs precision), so
  ``epoch - w`` and the previous-window weight ``1 - elapsed/period`` are exact rationals.
* ``round`` is PostgreSQL's ``round(numeric)``: halves go away from zero (2.5 → 3, -0.5 → -1), not
  Python's banker's rounding (2.5 → 2). It is computed in integers, never through a float.
* ``floor`` is mathematical floor (also for negative epochs); window starts are epoch seconds.
* ``global_limit`` counts live leases only (``lease_until > now``); the result is never negative.
* ``admit`` applies the global limit first and the rate admission to what remains of the demand.
* The debit is literally ``N * estimate`` (the ``max(estimate, 1)`` guard is only in the divisor);
  queue options already require ``estimate >= 1``.
* Domain: demand, counts, live_running and estimate must be >= 0 and period >= 1 (``InvalidInput``
  otherwise); ``allowed`` / ``limit`` may be any integer (<= 0 simply admits nothing).
* With non-negative counts ``used >= 0``, so ``min(allowed - used, allowed)`` equals
  ``allowed - used``; the clause is kept verbatim anyway.

What the rate formula guarantees, and what it does not (proved with Z3 in tests/test_admission.py,
writing A = allowed, C = count(w), P = count(w-period), T = period in µs, e = elapsed µs in [0, T),
R(e) = round(P*(T-e)/T)):

* One claim debits at most ``max(A - used, 0)``; hence count(w) never exceeds A if it started <= A,
  whatever the order of claim instants inside the window.
* After any claim that admitted something at elapsed e: ``count(w) + R(e) <= A`` and the formula's
  own sliding estimate ``count(w) + P*(T-e)/T < A + 1/2`` (the 1/2 is the rounding slack).
* It is NOT a true sliding-window limit: the number of debits in a real interval (t - period, t] can
  reach ``2*A`` (all of window w-period's debits just before w, then a late claim in w that sees a
  weight near 0). The exact bound at a claim admitted at elapsed e is
  ``A + P - R(e) = A + ceil(P*e/T - 1/2) <= A + P <= 2*A``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from model.ops import InvalidInput

US_PER_S = 1_000_000

__all__ = [
    "US_PER_S",
    "RateInput",
    "admit",
    "debit",
    "global_admit",
    "partition_take",
    "per_key_allowance",
    "rate_admit",
    "rate_used",
    "round_half_away",
    "window_start",
]


def _int(value: Any, what: str, minimum: int | None = None) -> int:
    """Require an exact int (not bool/float), optionally >= minimum."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{what} must be >= {minimum}, got {value}")
    return value


def round_half_away(x: Fraction | int) -> int:
    """PostgreSQL round(numeric) of an exact value: nearest integer, halves away from zero."""
    if isinstance(x, bool) or not isinstance(x, (int, Fraction)):
        raise TypeError(f"round_half_away needs an int or Fraction, got {type(x).__name__} {x!r}")
    a, b = x.numerator, x.denominator  # b > 0 always
    sign = -1 if a < 0 else 1
    return sign * ((2 * abs(a) + b) // (2 * b))


def window_start(epoch_us: int, period_s: int) -> int:
    """Current window w in epoch seconds: floor(epoch / period) * period, epoch given in µs."""
    _int(epoch_us, "epoch_us")
    _int(period_s, "period_s", 1)
    return (epoch_us // (period_s * US_PER_S)) * period_s


def rate_used(epoch_us: int, period_s: int, count_current: int, count_previous: int) -> int:
    """used = count(w) + round(count(w-period) * (1 - (epoch - w)/period)), exactly."""
    _int(count_current, "count_current", 0)
    _int(count_previous, "count_previous", 0)
    w = window_start(epoch_us, period_s)
    elapsed_us = epoch_us - w * US_PER_S
    weight = 1 - Fraction(elapsed_us, period_s * US_PER_S)
    return count_current + round_half_away(count_previous * weight)


def rate_admit(demand: int, allowed: int, used: int, estimate: int) -> int:
    """min(demand, floor(max(min(allowed - used, allowed), 0) / max(estimate, 1)))."""
    _int(demand, "demand", 0)
    _int(allowed, "allowed")
    _int(used, "used", 0)
    _int(estimate, "estimate", 0)
    return min(demand, max(min(allowed - used, allowed), 0) // max(estimate, 1))


def global_admit(demand: int, limit: int, live_running: int) -> int:
    """min(demand, max(limit - live_running, 0)); live_running counts lease_until > now only."""
    _int(demand, "demand", 0)
    _int(limit, "limit")
    _int(live_running, "live_running", 0)
    return min(demand, max(limit - live_running, 0))


def debit(n: int, estimate: int) -> int:
    """Units to upsert-increment into window w after claiming n jobs: n * estimate."""
    _int(n, "n", 0)
    _int(estimate, "estimate", 0)
    return n * estimate


@dataclass(frozen=True)
class RateInput:
    """The §6 rate inputs read under the advisory lock: opts plus the two window counts."""

    allowed: int
    period_s: int
    estimate: int
    epoch_us: int
    count_current: int  # count(w) of the bucket
    count_previous: int  # count(w - period) of the bucket

    @property
    def window(self) -> int:
        """The window w (epoch seconds) the debit goes into."""
        return window_start(self.epoch_us, self.period_s)

    @property
    def used(self) -> int:
        """used = count(w) + round(count(w-period) * weight)."""
        return rate_used(self.epoch_us, self.period_s, self.count_current, self.count_previous)


def admit(demand: int, *, global_limit: int | None = None, live_running: int = 0, rate: RateInput | None = None) -> int:
    """Jobs to claim: the global limit first, then the rate admission on the remaining demand."""
    n = _int(demand, "demand", 0)
    if global_limit is not None:
        n = global_admit(n, global_limit, live_running)
    if rate is not None:
        n = rate_admit(n, rate.allowed, rate.used, rate.estimate)
    return n


def per_key_allowance(per_key_limit: int, running_k: int) -> int:
    """greatest(per_key_limit - running_k, 0): rows with row_number <= this are kept."""
    _int(per_key_limit, "per_key_limit")
    _int(running_k, "running_k", 0)
    return max(per_key_limit - running_k, 0)


def partition_take(
    candidates: Sequence[tuple[str, Any]], running_by_key: Mapping[str, int], per_key_limit: int, take: int
) -> list[Any]:
    """Items kept by the exact partitioned claim: per-key rank <= allowance, global order, first take."""
    _int(take, "take", 0)
    ranks: dict[str, int] = {}
    kept: list[Any] = []
    for key, item in candidates:
        if not isinstance(key, str):
            raise TypeError(f"partition keys are text (COALESCE(field->>key, '')), got {key!r}")
        ranks[key] = rank = ranks.get(key, 0) + 1  # row_number() within the key, in global order
        if rank <= per_key_allowance(per_key_limit, running_by_key.get(key, 0)):
            kept.append(item)
            if len(kept) == take:
                break
    return kept[:take]
