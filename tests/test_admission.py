"""Tests for model.admission — contract §6 claim admission arithmetic.

Three layers:

1. Behaviour tests with hand-computed numbers.
2. Z3 proofs over ALL integers in the stated ranges (each test asserts that the negated property is
   ``unsat``). The encodings mirror the Python formulas; ``test_z3_encodings_agree_with_the_python_
   functions`` ties them to the code on concrete points. Z3's ``Int`` division is SMT-LIB ``div``:
   floor for a positive divisor (proved below), *not* floor for a negative one — every encoding
   divides only by terms the ranges make >= 1.
3. Hypothesis cross-checks against brute-force references written here with Fraction / Decimal,
   and a ledger simulation that replays claims in time and measures the true sliding count.

Notation: A = allowed, D = demand, E = estimate, C = count(w), P = count(w - period),
Ts = period in seconds, T = Ts * 10**6 (µs), e = elapsed µs since w (0 <= e < T),
R(e) = round_half_away(P * (T - e) / T), used = C + R(e).
"""

from __future__ import annotations

import itertools
import math
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from model.admission import (
    US_PER_S,
    RateInput,
    admit,
    debit,
    global_admit,
    partition_take,
    per_key_allowance,
    rate_admit,
    rate_used,
    round_half_away,
    window_start,
)
from model.ops import InvalidInput

# =============================================================================================
# 1. behaviour


def test_half_rounds_away_from_zero_unlike_python():
    assert round_half_away(Fraction(1, 2)) == 1
    assert round_half_away(Fraction(5, 2)) == 3
    assert round_half_away(Fraction(-1, 2)) == -1
    assert round_half_away(Fraction(-5, 2)) == -3
    assert round(Fraction(5, 2)) == 2  # Python: banker's rounding
    assert round(Fraction(1, 2)) == 0


def test_non_halves_round_to_nearest():
    assert round_half_away(Fraction(12, 5)) == 2  # 2.4
    assert round_half_away(Fraction(13, 5)) == 3  # 2.6
    assert round_half_away(Fraction(-13, 5)) == -3
    assert round_half_away(Fraction(-12, 5)) == -2
    assert round_half_away(7) == 7
    assert round_half_away(Fraction(0)) == 0


def test_window_start_floors_to_the_period_also_before_the_epoch():
    assert window_start(0, 60) == 0
    assert window_start(59_999_999, 60) == 0
    assert window_start(60_000_000, 60) == 60
    assert window_start(-1, 60) == -60  # floor, not truncation toward zero
    assert window_start(-60_000_000, 60) == -60
    assert window_start(-60_000_001, 60) == -120
    # 2026-11-30T12:00:00.5Z, hourly windows
    assert window_start(1_795_953_600_500_000, 3600) == 1_795_953_600


def test_previous_window_weight_decays_linearly():
    period, prev = 100, 1000
    w_us = 1_000 * period * US_PER_S  # a window start
    # weight = 1 - elapsed/period: 1, 0.75, 0.5, 0.25, and 1e-8 one µs before the next window
    assert rate_used(w_us, period, 0, prev) == 1000
    assert rate_used(w_us + 25 * US_PER_S, period, 0, prev) == 750
    assert rate_used(w_us + 50 * US_PER_S, period, 0, prev) == 500
    assert rate_used(w_us + 75 * US_PER_S, period, 0, prev) == 250
    assert rate_used(w_us + period * US_PER_S - 1, period, 0, prev) == 0  # round(1e-5)
    assert rate_used(w_us + period * US_PER_S, period, 0, prev) == 0 + 1000 * 1  # next window: weight 1
    used = [rate_used(w_us + s * US_PER_S, period, 0, prev) for s in range(period)]
    assert used == sorted(used, reverse=True)
    assert [a - b for a, b in itertools.pairwise(used)] == [10] * (period - 1)  # linear: 10 per second


def test_current_window_count_is_added_unweighted():
    w_us = 6_000 * US_PER_S
    assert rate_used(w_us + 30 * US_PER_S, 60, 7, 0) == 7
    assert rate_used(w_us + 30 * US_PER_S, 60, 7, 10) == 7 + 5


def test_hand_computed_rate_example():
    # allowed 100 per 60 s, 15 s into the window: weight 3/4; prev 50 -> 37.5 -> 38 (half away)
    w_us = (29_000_000 // 60) * 60 * US_PER_S
    rate = RateInput(
        allowed=100, period_s=60, estimate=1, epoch_us=w_us + 15 * US_PER_S, count_current=30, count_previous=50
    )
    assert rate.window * US_PER_S == w_us
    assert rate.used == 30 + 38
    assert admit(1000, rate=rate) == 32
    assert admit(10, rate=rate) == 10
    est5 = RateInput(100, 60, 5, w_us + 15 * US_PER_S, 30, 50)
    assert admit(1000, rate=est5) == 6  # floor(32 / 5)
    assert debit(6, 5) == 30  # never more than the 32 that remained


def test_hand_computed_rate_example_when_over_budget_admits_nothing():
    assert rate_admit(10, allowed=100, used=100, estimate=1) == 0
    assert rate_admit(10, allowed=100, used=250, estimate=1) == 0
    assert rate_admit(10, allowed=100, used=99, estimate=2) == 0  # 1 unit left, a job costs 2
    assert rate_admit(10, allowed=100, used=98, estimate=2) == 1


def test_estimate_zero_divides_by_one_and_debits_nothing():
    assert rate_admit(50, allowed=10, used=3, estimate=0) == 7
    assert debit(7, 0) == 0


def test_bankers_rounding_would_change_the_admitted_count():
    # prev 5 at exactly half the window: 2.5 -> PostgreSQL 3, Python round() 2
    w_us = 100 * 10 * US_PER_S
    rate = RateInput(
        allowed=10, period_s=10, estimate=1, epoch_us=w_us + 5 * US_PER_S, count_current=0, count_previous=5
    )
    assert rate.used == 3
    assert admit(100, rate=rate) == 7
    python_used = 0 + round(5 * (1 - Fraction(5, 10)))
    assert python_used == 2
    assert rate_admit(100, 10, python_used, 1) == 8  # what a banker's-rounding SDK would claim


def test_global_limit_counts_only_live_leases_and_never_goes_negative():
    assert global_admit(10, limit=5, live_running=2) == 3
    assert global_admit(2, limit=5, live_running=2) == 2
    assert global_admit(10, limit=5, live_running=5) == 0
    assert global_admit(10, limit=5, live_running=9) == 0  # over the limit (limit lowered): 0, not -4


def test_admit_applies_the_global_limit_before_the_rate():
    rate = RateInput(allowed=10, period_s=60, estimate=1, epoch_us=0, count_current=4, count_previous=0)
    assert admit(100, rate=rate) == 6
    assert admit(100, global_limit=5, live_running=2, rate=rate) == 3
    assert admit(100, global_limit=50, live_running=2, rate=rate) == 6
    assert admit(4) == 4  # no limits: the demand


def test_per_key_allowance_is_never_negative():
    assert per_key_allowance(3, 0) == 3
    assert per_key_allowance(3, 2) == 1
    assert per_key_allowance(3, 3) == 0
    assert per_key_allowance(3, 7) == 0


def test_partition_take_keeps_global_order_and_per_key_ranks():
    cands = [("a", 1), ("b", 2), ("a", 3), ("a", 4), ("", 5), ("b", 6), ("c", 7), ("a", 8)]
    # per_key_limit 2; a has 1 running -> 1 slot, b none running -> 2, '' -> 2, c has 5 -> 0
    assert partition_take(cands, {"a": 1, "c": 5}, 2, 10) == [1, 2, 5, 6]
    assert partition_take(cands, {"a": 1, "c": 5}, 2, 3) == [1, 2, 5]
    assert partition_take(cands, {}, 1, 10) == [1, 2, 5, 7]
    assert partition_take(cands, {}, 2, 0) == []
    assert partition_take([], {}, 2, 5) == []


def test_floats_and_bad_domains_are_refused():
    with pytest.raises(TypeError):
        round_half_away(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        window_start(1.5, 60)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rate_admit(True, 1, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        window_start(0, 0)
    with pytest.raises(InvalidInput):
        rate_used(0, 60, -1, 0)
    with pytest.raises(InvalidInput):
        admit(-1)
    with pytest.raises(InvalidInput):
        partition_take([], {}, 1, -1)


# =============================================================================================
# 2. Z3 proofs

MAX_DEMAND, MAX_ALLOWED, MAX_ESTIMATE, MAX_COUNT, MAX_PERIOD = 10**6, 10**6, 10**4, 10**7, 86_400
MAX_LIMIT = 10**6


def zmin(x, y):
    return z3.If(x <= y, x, y)


def zmax(x, y):
    return z3.If(x >= y, x, y)


def z_round_half_away(a, b):
    """round_half_away(a/b) for b > 0, the Python formula sign * ((2|a| + b) div 2b)."""
    mag = (2 * z3.If(a >= 0, a, -a) + b) / (2 * b)
    return z3.If(a < 0, -mag, mag)


def z_weighted(P, T, e):
    """R(e) = round(P * (1 - e/T)) = round_half_away(P*(T-e) / T)."""
    return z_round_half_away(P * (T - e), T)


def z_rate_admit(D, A, used, E):
    return zmin(D, zmax(zmin(A - used, A), 0) / zmax(E, 1))


def z_global_admit(D, L, live):
    return zmin(D, zmax(L - live, 0))


def proved(claim, *assuming, timeout_ms: int = 15_000) -> None:
    """Assert that `claim` holds for every assignment satisfying `assuming` (negation is unsat)."""
    s = z3.Solver()
    s.set(timeout=timeout_ms)
    s.add(*assuming)
    s.add(z3.Not(claim))
    result = s.check()
    assert result == z3.unsat, (
        f"counterexample: {s.model()}" if result == z3.sat else f"z3 gave {result}: {s.reason_unknown()}"
    )


def witness(*constraints, timeout_ms: int = 15_000) -> z3.ModelRef:
    s = z3.Solver()
    s.set(timeout=timeout_ms)
    s.add(*constraints)
    assert s.check() == z3.sat
    return s.model()


class Claim:
    """Z3 variables and ranges for one rate claim; `n` is the admitted job count."""

    def __init__(self, tag: str = "", *, A=None, P=None, Ts=None, C=None):
        self.D, self.E, self.e = z3.Ints(f"D{tag} E{tag} e{tag}")
        self.A = A if A is not None else z3.Int(f"A{tag}")
        self.P = P if P is not None else z3.Int(f"P{tag}")
        self.Ts = Ts if Ts is not None else z3.Int(f"Ts{tag}")
        self.C = C if C is not None else z3.Int(f"C{tag}")
        self.T = self.Ts * US_PER_S
        self.ranges = [
            self.D >= 0,
            self.D <= MAX_DEMAND,
            self.A >= 1,
            self.A <= MAX_ALLOWED,
            self.E >= 1,
            self.E <= MAX_ESTIMATE,
            self.C >= 0,
            self.C <= MAX_COUNT,
            self.P >= 0,
            self.P <= MAX_COUNT,
            self.Ts >= 1,
            self.Ts <= MAX_PERIOD,
            self.e >= 0,
            self.e < self.T,
        ]
        self.R = z_weighted(self.P, self.T, self.e)
        self.used = self.C + self.R
        self.n = z_rate_admit(self.D, self.A, self.used, self.E)
        self.debit = self.n * self.E
        self.after = self.C + self.debit  # count(w) after the debit


def test_z3_integer_division_is_floor_for_positive_divisors():
    """What the encodings rely on: for b >= 1, q = a / b satisfies b*q <= a < b*q + b (floor)."""
    a, b = z3.Ints("a b")
    q = a / b
    proved(z3.And(b * q <= a, a < b * q + b), b >= 1)
    # ...and it is NOT floor for negative divisors (SMT-LIB div is Euclidean): 7 div -2 = -3, floor -4.
    assert z3.simplify(z3.IntVal(7) / z3.IntVal(-2)).as_long() == -3
    assert z3.simplify(z3.IntVal(-7) / z3.IntVal(2)).as_long() == -4 == math.floor(-7 / 2)


def test_proof_round_half_away_matches_the_exact_definition():
    """For ALL integers a and b >= 1 (unbounded), r = round_half_away(a/b) satisfies
    |a/b - r| <= 1/2, and on a tie (|a/b - r| = 1/2) |r| > |a/b| (away from zero);
    and r is the ONLY integer with both properties."""
    a, b, r2 = z3.Ints("a b r2")
    r = z_round_half_away(a, b)

    def is_rounding(r):
        dist2 = 2 * (a - r * b)  # 2b * (a/b - r)
        absd = z3.If(dist2 >= 0, dist2, -dist2)
        return z3.And(absd <= b, z3.Implies(absd == b, z3.If(r >= 0, r, -r) * b > z3.If(a >= 0, a, -a)))

    proved(is_rounding(r), b >= 1)
    proved(z3.Implies(is_rounding(r2), r2 == r), b >= 1)


def test_proof_window_start_leaves_elapsed_in_range_for_every_epoch():
    """For ALL integer epochs (negative too) and 1 <= Ts <= 86400: with w = floor(epoch/T)*T,
    0 <= epoch - w < T — the elapsed range every other proof assumes."""
    epoch, Ts = z3.Ints("epoch Ts")
    T = Ts * US_PER_S
    w_us = (epoch / T) * T
    proved(z3.And(epoch - w_us >= 0, epoch - w_us < T), Ts >= 1, Ts <= MAX_PERIOD)


def test_proof_weighted_previous_count_is_between_zero_and_prev():
    """0 <= R(e) <= P, and R is non-increasing in e (for e1 <= e2 < T: R(e2) <= R(e1)).
    Hence used >= C >= 0 and min(allowed - used, allowed) == allowed - used."""
    c = Claim()
    e2 = z3.Int("e2")
    proved(z3.And(c.R >= 0, c.R <= c.P, zmin(c.A - c.used, c.A) == c.A - c.used), *c.ranges)
    proved(z_weighted(c.P, c.T, e2) <= c.R, *c.ranges, c.e <= e2, e2 < c.T)


def test_proof_admitted_count_is_never_negative():
    """(a) n >= 0 for every D, A, E, C, P, Ts, e in range; also with the global limit first."""
    c = Claim()
    L, live = z3.Ints("L live")
    proved(c.n >= 0, *c.ranges)
    both = z_rate_admit(z_global_admit(c.D, L, live), c.A, c.used, c.E)
    proved(both >= 0, *c.ranges, L >= 1, L <= MAX_LIMIT, live >= 0, live <= MAX_COUNT)


def test_proof_admitted_count_never_exceeds_demand():
    """(b) n <= D (rate), and global_admit(D, L, live) <= D."""
    c = Claim()
    L, live = z3.Ints("L live")
    proved(c.n <= c.D, *c.ranges)
    proved(z_global_admit(c.D, L, live) <= c.D, c.D >= 0, live >= 0)


def test_proof_global_limit_is_respected():
    """(c) With g = global_admit(D, L, live) and n = rate_admit(g, ...):
    live <= L  =>  live + g <= L and live + n <= L;   live >= L  =>  g == 0 and n == 0.
    Ranges 0 <= D <= 1e6, 1 <= L <= 1e6, 0 <= live <= 1e7 (live may exceed a lowered limit)."""
    c = Claim()
    L, live = z3.Ints("L live")
    g = z_global_admit(c.D, L, live)
    n = z_rate_admit(g, c.A, c.used, c.E)
    dom = [*c.ranges, L >= 1, L <= MAX_LIMIT, live >= 0, live <= MAX_COUNT]
    proved(z3.Implies(live <= L, z3.And(live + g <= L, live + n <= L)), *dom)
    proved(z3.Implies(live >= L, z3.And(g == 0, n == 0)), *dom)


def test_proof_one_claim_never_debits_more_than_remained():
    """(d) n * E <= max(A - used, 0); so if C <= A then count(w) after the debit, C + n*E, <= A."""
    c = Claim()
    proved(c.debit <= zmax(c.A - c.used, 0), *c.ranges)
    proved(c.after <= c.A, *c.ranges, c.C <= c.A)


def _three_claims():
    """Three successive claims in ONE window: same A, P, period; C_{i+1} = C_i + debit_i;
    elapsed non-decreasing e0 <= e1 <= e2; demand and estimate free per claim."""
    A, P, Ts, C0 = z3.Ints("A P Ts C0")
    claims, C = [], C0
    for i in range(3):
        c = Claim(str(i), A=A, P=P, Ts=Ts, C=C)
        claims.append(c)
        C = c.after
    dom = [x for c in claims for x in c.ranges]
    dom += [claims[0].e <= claims[1].e, claims[1].e <= claims[2].e]
    return claims, dom


def test_proof_a_window_count_never_exceeds_allowed():
    """(e) For 3 successive claims in one window starting from C0 <= A:
    count(w) after all of them (C3) <= A, and total debit C3 - C0 <= max(A - C0 - R(e_last), 0),
    i.e. C3 <= max(C0, A - R(e2)). With count(w) = 0 at a window's start and every debit going
    through admission, by induction on (d) every window's count stays <= allowed — whatever the
    order of the claim instants (the single-step proof in (d) does not use e at all)."""
    claims, dom = _three_claims()
    C0, C3, A = claims[0].C, claims[2].after, claims[0].A
    proved(C3 <= A, *dom, C0 <= A)
    proved(zmax(A - C0 - claims[2].R, 0) >= C3 - C0, *dom, C0 <= A)


def test_later_claims_in_a_window_can_debit_more_than_the_first_claim_saw():
    """(e, negative) Total debit can exceed A - C0 - R(e_first): the previous-window term decays,
    so a later claim in the same window sees a smaller `used`. Z3 finds a witness; we replay it
    through the Python functions. Hand example: A=10, period 10 s, P=10, C0=0: at e=0 used=10
    admits 0; at e=9 s used=0+round(10*0.1)=1 admits 9 > 10 - 0 - 10 = 0."""
    claims, dom = _three_claims()
    A, C0 = claims[0].A, claims[0].C
    m = witness(*dom, C0 <= A, A <= 100, claims[0].Ts <= 10, claims[2].after - C0 > A - C0 - claims[0].R)
    val = lambda x: m.eval(x, model_completion=True).as_long()  # noqa: E731
    Ts, P, C = val(claims[0].Ts), val(claims[0].P), val(C0)
    w_us = 1000 * Ts * US_PER_S
    first_R = None
    for c in claims:
        rate = RateInput(val(A), Ts, val(c.E), w_us + val(c.e), C, P)
        first_R = rate.used - C if first_R is None else first_R
        C += debit(admit(val(c.D), rate=rate), val(c.E))
    assert C - val(C0) > val(A) - val(C0) - first_R
    assert val(A) >= C

    w_us = 500 * 10 * US_PER_S
    assert admit(100, rate=RateInput(10, 10, 1, w_us, 0, 10)) == 0
    assert admit(100, rate=RateInput(10, 10, 1, w_us + 9 * US_PER_S, 0, 10)) == 9


def test_proof_sliding_estimate_overshoots_allowed_by_less_than_half_a_unit():
    """Rounding slack: after a claim that admits n >= 1 at elapsed e, the formula's own unrounded
    sliding estimate satisfies  C' + P*(T-e)/T < A + 1/2  (C' = C + n*E), i.e.
    2*C'*T + 2*P*(T-e) < 2*A*T + T.  The bound is strict and approached (witness below):
    A=1, P=1, e = T/2 + 1 µs gives estimate 1 + 1/2 - 1/T with 1 job admitted, although the
    unrounded formula floor(A - C - P*(T-e)/T) would admit 0."""
    c = Claim()
    proved(z3.Implies(c.n >= 1, 2 * c.after * c.T + 2 * c.P * (c.T - c.e) < 2 * c.A * c.T + c.T), *c.ranges, c.C <= c.A)
    # The rounding really does admit past the unrounded estimate:
    T = 1 * US_PER_S
    e = T // 2 + 1
    rate = RateInput(allowed=1, period_s=1, estimate=1, epoch_us=7 * T + e, count_current=0, count_previous=1)
    assert admit(5, rate=rate) == 1
    estimate_after = 1 + 1 * Fraction(T - e, T)
    assert estimate_after == Fraction(3, 2) - Fraction(1, T)
    assert math.floor(1 - 0 - Fraction(T - e, T)) == 0


def test_proof_any_period_long_interval_meets_at_most_two_windows():
    """For ALL integer instants t' in (t - T, t] (µs, any sign): floor(t'/T) is floor(t/T) or
    floor(t/T) - 1 — a sliding interval (t - period, t] overlaps only windows w and w - period."""
    t, t2, Ts = z3.Ints("t t2 Ts")
    T = Ts * US_PER_S
    proved(z3.Or(t2 / T == t / T, t2 / T == t / T - 1), Ts >= 1, Ts <= MAX_PERIOD, t - T < t2, t2 <= t)


def test_proof_true_sliding_count_bound():
    """The TRUE sliding count S(t) = debits with instant in (t - period, t]. Right after a claim at
    t = w + e that admitted n >= 1, S = X + C' where X = debits of window w-period still inside the
    interval, 0 <= X <= P, and P <= A (the previous window obeys the window invariant). Proved:

        S <= A + P - R(e),   P - R(e) == ceil(P*e/T - 1/2)   (so S <= A + ceil(P*e/T - 1/2)),
        S <= 2*A             (also with n == 0, from C <= A).

    So the overshoot over `allowed` is at most ceil(P*e/T - 1/2) <= P <= A: the formula assumes
    the previous window's debits were spread evenly, and they need not be."""
    c = Claim()
    X = z3.Int("X")
    dom = [*c.ranges, c.C <= c.A, c.P <= c.A, X >= 0, X <= c.P]
    S = X + c.after
    k = c.P - c.R
    proved(z3.Implies(c.n >= 1, c.A + k >= S), *dom)
    # k is the least integer >= P*e/T - 1/2, i.e. 2kT >= 2Pe - T > 2(k-1)T
    proved(z3.And(2 * k * c.T >= 2 * c.P * c.e - c.T, 2 * (k - 1) * c.T < 2 * c.P * c.e - c.T), *dom)
    proved(S <= 2 * c.A, *dom)


class Ledger:
    """One rate bucket replayed in time: debits as (instant_us, units), admission via model.admission."""

    def __init__(self, allowed: int, period_s: int):
        self.allowed, self.period_s, self.debits = allowed, period_s, []

    def count(self, window_s: int) -> int:
        return sum(u for t, u in self.debits if window_start(t, self.period_s) == window_s)

    def claim(self, t_us: int, demand: int, estimate: int = 1) -> int:
        w = window_start(t_us, self.period_s)
        rate = RateInput(self.allowed, self.period_s, estimate, t_us, self.count(w), self.count(w - self.period_s))
        n = admit(demand, rate=rate)
        if n:
            self.debits.append((t_us, debit(n, estimate)))
        return n

    def sliding(self, t_us: int) -> int:
        T = self.period_s * US_PER_S
        return sum(u for t, u in self.debits if t_us - T < t <= t_us)


def test_true_sliding_count_reaches_twice_allowed():
    """Witness that the sliding-window overshoot is real and the 2*A bound is tight, from an empty
    bucket: A=5 per 60 s. Claim 5 one µs before window w (its previous window is empty); claim 5
    again 2 µs before w ends: weight 2/T, R = round(5*2/60e6) = 0, so used = 0. The interval
    (t - 60 s, t] holds both debits: 10 = 2*A. Z3 also finds such a timeline by itself."""
    A, Ts = 5, 60
    T = Ts * US_PER_S
    w = 29_455_000 * T  # a window start (µs)
    ledger = Ledger(A, Ts)
    assert ledger.claim(w - 1, 100) == 5
    t2 = w + T - 2
    assert ledger.claim(t2, 100) == 5
    assert ledger.sliding(t2) == 2 * A
    assert ledger.count(w // US_PER_S) == A and ledger.count(w // US_PER_S - Ts) == A  # windows obey A

    # Z3: two claims from an empty history; claim 1 at elapsed e1 of window w - period, claim 2 at
    # elapsed e2 of w (P = claim 1's debit). Claim 1 is inside (t2 - T, t2] iff e1 > e2.
    first = Claim("1", C=z3.IntVal(0), P=z3.IntVal(0))
    second = Claim("2", A=first.A, Ts=first.Ts, C=z3.IntVal(0), P=first.debit)
    S = z3.If(first.e > second.e, first.debit, 0) + second.debit
    m = witness(*first.ranges, *second.ranges, first.A >= 2, first.A <= 50, first.Ts <= 3600, S == 2 * first.A)
    val = lambda x: m.eval(x, model_completion=True).as_long()  # noqa: E731
    A, Ts = val(first.A), val(first.Ts)
    T = Ts * US_PER_S
    w = 1_000 * T
    ledger = Ledger(A, Ts)
    ledger.claim(w - T + val(first.e), val(first.D), val(first.E))
    t2 = w + val(second.e)
    ledger.claim(t2, val(second.D), val(second.E))
    assert ledger.sliding(t2) == 2 * A


def test_z3_encodings_agree_with_the_python_functions():
    """The proofs are about the z3 encodings; check they compute what the Python code computes."""
    c = Claim()
    L, live = z3.Ints("L live")
    both = z_rate_admit(z_global_admit(c.D, L, live), c.A, c.used, c.E)

    @settings(max_examples=150, deadline=None)
    @given(
        D=st.integers(0, MAX_DEMAND),
        A=st.integers(1, MAX_ALLOWED),
        E=st.integers(1, MAX_ESTIMATE),
        C=st.integers(0, MAX_COUNT),
        P=st.integers(0, MAX_COUNT),
        Ts=st.integers(1, MAX_PERIOD),
        frac=st.fractions(0, 1).filter(lambda f: f < 1),
        k=st.integers(-(10**6), 10**6),
        Lv=st.integers(1, MAX_LIMIT),
        lv=st.integers(0, MAX_COUNT),
    )
    def check(D, A, E, C, P, Ts, frac, k, Lv, lv):
        T = Ts * US_PER_S
        e = math.floor(frac * T)
        epoch_us = k * T + e
        subs = [(c.D, D), (c.A, A), (c.E, E), (c.C, C), (c.P, P), (c.Ts, Ts), (c.e, e), (L, Lv), (live, lv)]
        ev = lambda x: z3.simplify(z3.substitute(x, *[(v, z3.IntVal(n)) for v, n in subs])).as_long()  # noqa: E731
        assert ev(c.used) == rate_used(epoch_us, Ts, C, P)
        rate = RateInput(A, Ts, E, epoch_us, C, P)
        assert ev(c.n) == admit(D, rate=rate)
        assert ev(both) == admit(D, global_limit=Lv, live_running=lv, rate=rate)

    check()


# =============================================================================================
# 3. Hypothesis cross-checks against brute-force references


def ref_round_decimal(x: Fraction) -> int:
    """Decimal ROUND_HALF_UP (= half away from zero). 200 digits: a tie's quotient is exact, and a
    non-tie is at least 1/(2b) away from a half, far above the precision."""
    with localcontext() as ctx:
        ctx.prec = 200
        return int((Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def ref_round_nearest(x: Fraction) -> int:
    lo, hi = math.floor(x), math.ceil(x)
    if x - lo != hi - x:
        return lo if x - lo < hi - x else hi
    return hi if x > 0 else lo  # tie: away from zero


def ref_used(epoch_us: int, period_s: int, cc: int, cp: int) -> int:
    epoch = Fraction(epoch_us, US_PER_S)  # seconds, exact
    w = math.floor(epoch / period_s) * period_s
    return cc + ref_round_nearest(cp * (1 - (epoch - w) / period_s))


@settings(max_examples=400, deadline=None)
@given(a=st.integers(-(10**18), 10**18), b=st.integers(1, 10**12))
def test_round_half_away_matches_decimal_and_nearest_references(a, b):
    x = Fraction(a, b)
    assert round_half_away(x) == ref_round_decimal(x) == ref_round_nearest(x)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(-(10**9), 10**9))
def test_round_half_away_on_exact_halves(n):
    x = Fraction(2 * n + 1, 2)
    assert round_half_away(x) == (n + 1 if n >= 0 else n)  # away from zero
    assert abs(round_half_away(x)) == abs(x) + Fraction(1, 2)


@settings(max_examples=400, deadline=None)
@given(
    epoch_us=st.integers(-(10**17), 10**17) | st.integers(1_700_000_000 * US_PER_S, 1_900_000_000 * US_PER_S),
    period_s=st.integers(1, MAX_PERIOD),
    cc=st.integers(0, MAX_COUNT),
    cp=st.integers(0, MAX_COUNT),
    demand=st.integers(0, MAX_DEMAND),
    allowed=st.integers(1, MAX_ALLOWED),
    est=st.integers(1, MAX_ESTIMATE),
)
def test_rate_functions_match_a_fraction_reference(epoch_us, period_s, cc, cp, demand, allowed, est):
    epoch = Fraction(epoch_us, US_PER_S)
    assert window_start(epoch_us, period_s) == math.floor(epoch / period_s) * period_s
    used = rate_used(epoch_us, period_s, cc, cp)
    assert used == ref_used(epoch_us, period_s, cc, cp)
    ref_n = min(demand, math.floor(Fraction(max(min(allowed - used, allowed), 0), max(est, 1))))
    assert rate_admit(demand, allowed, used, est) == ref_n
    assert admit(demand, rate=RateInput(allowed, period_s, est, epoch_us, cc, cp)) == ref_n
    assert 0 <= debit(ref_n, est) <= max(allowed - used, 0)


def ref_partition_take(candidates, running_by_key, per_key_limit, take):
    """SQL-shaped: row_number() per key over the global order, filter, re-sort globally, LIMIT."""
    by_key: dict[str, list[int]] = {}
    for pos, (key, _) in enumerate(candidates):
        by_key.setdefault(key, []).append(pos)
    keep = []
    for key, positions in by_key.items():
        allowance = max(per_key_limit - running_by_key.get(key, 0), 0)
        keep += [pos for rn, pos in enumerate(positions, start=1) if rn <= allowance]
    return [candidates[pos][1] for pos in sorted(keep)][:take]


KEYS = st.sampled_from(["", "a", "b", "c", "tenant-7"])


@settings(max_examples=400, deadline=None)
@given(
    keys=st.lists(KEYS, max_size=40),
    running=st.dictionaries(KEYS, st.integers(0, 6)),
    per_key_limit=st.integers(0, 5),
    take=st.integers(0, 45),
)
def test_partition_take_matches_a_row_number_reference(keys, running, per_key_limit, take):
    candidates = [(k, ("job", i)) for i, k in enumerate(keys)]
    got = partition_take(candidates, running, per_key_limit, take)
    assert got == ref_partition_take(candidates, running, per_key_limit, take)
    # consequences: global order kept, at most `take`, per key never past the limit
    assert got == sorted(got, key=lambda item: item[1]) and len(got) <= take
    for key in set(keys):
        taken = sum(1 for k, item in candidates if k == key and item in got)
        assert taken <= per_key_allowance(per_key_limit, running.get(key, 0))
        if running.get(key, 0) <= per_key_limit:
            assert running.get(key, 0) + taken <= per_key_limit


@settings(max_examples=150, deadline=None)
@given(
    allowed=st.integers(1, 30),
    period_s=st.integers(1, 5),
    steps=st.lists(
        st.tuples(st.integers(1, 3 * US_PER_S), st.integers(0, 12), st.integers(1, 4)), min_size=1, max_size=25
    ),
)
def test_replayed_claims_obey_the_proved_bounds(allowed, period_s, steps):
    """Random claim timelines through the Python functions: every window count <= allowed, the true
    sliding count <= 2*allowed, and right after an admitting claim <= A + ceil(P*e/T - 1/2)."""
    T = period_s * US_PER_S
    ledger, t = Ledger(allowed, period_s), 10**6 * T
    for gap, demand, est in steps:
        t += gap
        w = window_start(t, period_s)
        P = ledger.count(w - period_s)
        n = ledger.claim(t, demand, est)
        assert ledger.count(w) <= allowed
        assert ledger.sliding(t) <= 2 * allowed
        if n:
            e = t - w * US_PER_S
            assert ledger.sliding(t) <= allowed + math.ceil(Fraction(P * e, T) - Fraction(1, 2))
