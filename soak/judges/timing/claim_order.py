"""Claim order (soak/judges/timing/__init__.py has the rule): rows passed over by a claim while claimable,
excused by what concurrent transactions and the faults around the claim could hold, proven otherwise.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from model.rows import Job
from soak.judges.timing.nodes import INF, NodeFaults

# --- claim order ------------------------------------------------------------------------------------

CLAIM_HOLD_MIN = 2.5  # s: the reference's call deadline — an honest claim transaction's life at the least
PROVEN_MIN = 2  # rows proven passed over again long after the first claim: the verdict is invalid
OVER_MIN = 3  # claims passing over more rows than all in flight could hold, at least …
OVER_SHARE = 0.002  # … and at least this share of the claims judged (as UNTRACED_SHARE below)
# untraced transactions (aborted claims) a run may need, per claim judged: the reference's soaks for issue 51
# needed at most 1 in 1,475 claims; a worker passing over free rows needed 3–29 in 628–1,548
UNTRACED_SHARE = 0.002
PASSING_KEPT = 8  # passing claims followed per row (beyond: counted as held by a concurrent transaction)
INFLIGHT_MAX = 60.0  # s: claims committed this long after another are not searched as its concurrent ones
KEEP_ROWS = 200_000  # passed-over rows kept for the end-of-run judgement (memory bound)
# a commit's timestamp is taken before its WAL flush (fsync on) makes it visible: a row written this little
# before a claim's `now` may still be missing from the claim's snapshot
SNAP_SLACK = 1.0
# rows a claim transaction may lock per row it takes: the reference's claim locks the first `take` ready rows
# and the first `take` due (awaiting) rows, then takes the first `take` of both (impl/store/sql/worker.sql)
LOCKS_PER_TAKE = 2
# a claim whose `now` (true clock) is this much after another's commit began after it: both are read from the
# machine's one clock (the node's declared offset taken off), to a millisecond, plus rounding
BEGAN_SLACK = 0.05
SCAN_LIMIT = 200  # candidates ahead of a claim's last taken row examined per claim
CHOICE_SCAN = 50  # candidates after it examined for a choice the claim had (coverage only)
INT_MAX = 1 << 62
# the harness's own claim (soak/workload/scenarios.py `_finish_children_silently`, the lost-wakeup scenario):
# it takes a parent's external children by `parent_id`, deliberately not a §6 claim of any SDK's
HARNESS_NODE = "soak-harness"
TRIM_EVERY = 5_000  # claims between two trims of the claims no judged claim can look back to (`claim_lag_max`)
TRIM_MARGIN = 60.0  # s beyond the bound: commit timestamps are taken before the WAL flush, not quite in LSN order


class Longest:
    """The longest of the values appended, all that HOLD needs of the run's claim lags (`max(...)` of it is the
    longest, `default` without any): one float, not one per claim."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float | None = None

    def append(self, x: float) -> None:
        if self.value is None or x > self.value:
            self.value = x

    def __iter__(self) -> Any:
        return iter(() if self.value is None else (self.value,))


def order_key(priority: int, ready_at: datetime | None, job_id: int) -> tuple[int, int, float, int]:
    """§6 candidate order: priority ASC, ready_at ASC NULLS FIRST, id ASC."""
    return (priority, 0 if ready_at is None else 1, 0.0 if ready_at is None else ready_at.timestamp(), job_id)


@dataclass
class Passed:
    """A row passed over by a claim, awaiting its next write (or the end of the history)."""

    job_id: int
    claim_at: float  # the first passing claim's commit
    claim_now: float
    node: str
    taken: int  # a row that claim took, later in §6 order
    lsn: str
    ready: bool = True  # a ready row (awaiting rows are also locked by the reconciler, which may write nothing)
    times: int = 1  # claims that passed it over while it stayed untouched
    gap: float = 0.0  # the latest such claim's `now` − the first one's commit (s)
    again_lsn: str = ""
    passing: list[int] = field(default_factory=list)  # the first PASSING_KEPT passing claims (indices)
    key: tuple[int, int, float, int] = (0, 0, 0.0, 0)  # its §6 order key
    written_at: float = INF  # its next write's commit
    writer_now: float | None = None  # that write's `now`, when it was a claim (when it began)


class ClaimOrder:
    def __init__(self, faults: NodeFaults | None, claim_lag_max: float | None = None) -> None:
        # without the run's fault log no freeze can be excused: claims are indexed but not judged
        self.enabled = faults is not None
        self.faults = faults or NodeFaults()
        # queue → sorted [(order key, job id)] of rows that are or may become claimable (ready, or awaiting
        # with a ready_at); job id → (queue, key, state, ready_at, last write commit)
        self.index: dict[str, list[tuple[tuple[int, int, float, int], int]]] = defaultdict(list)
        self.rows: dict[int, tuple[str, tuple[int, int, float, int], str, datetime | None, float]] = {}
        self.pending: dict[int, Passed] = {}
        self.settled: list[Passed] = []  # passed-over rows since written (or at the end), judged at the end
        self.proven: list[Passed] = []
        self.proven_rows = 0  # rows proven passed over (either way below)
        self.repeat_rows = 0  # … passed over again long after the first claim
        self.over_capacity: list[int] = []  # claims that passed over more rows than anything in flight held
        self.excused_written = 0
        self.excused_fault = 0  # pairs around a fault
        self.judged = 0  # claims judged
        # judged claims that had a choice: a claimable row of the priority of a row they took, left untaken —
        # the risky case of the order judge (coverage row P5): without one, no claim order is exposed
        self.choices = 0
        self.inversions = 0  # passed-over (row, claim) pairs seen, honest or not
        self.claim_lags = Longest()  # fault-free claim lags (commit − now): the longest, for HOLD
        self.skipped_admission = 0
        self.skipped_harness = 0  # the harness's own claims (HARNESS_NODE): not judged
        self.max_take = 1  # the most rows one claim of the run took
        # queue → [(now, commit, rows taken, order key of its last taken row)] of every claim, in commit
        # order (who was concurrent with whom, and which rows each could have locked without taking them)
        self.claims: dict[str, list[tuple[float, float, int, tuple[int, int, float, int]]]] = defaultdict(list)
        self.untraced_rows = 0  # rows passed over that only an untraced transaction could have held
        self.aborts_needed = 0  # … the fewest untraced transactions that could have held them all
        self.untraced_first: tuple[int, str, str] | None = None  # (job, claim LSN, claim node)
        # judged claims: [queue, now, commit, lsn, node, rows passed over (not excused by a fault), of them
        # written by a concurrent transaction, a row taken], by their index in judgement order — only those
        # that passed over a row: no end-of-run judgement reads the others (memory flat in the run's length)
        self.judged_claims: dict[int, list[Any]] = {}
        # the longest a claim's `now` may lag its commit — the trace validation's LAG: a staler claim is
        # unexplained and never observed here. With it, the claims no later claim and no kept judged claim can
        # look back to are dropped from `claims` (`_trim`); None keeps every claim
        self.claim_lag_max = claim_lag_max
        self._since_trim = 0
        # (job, attempt, commit) of claims that committed with their lease already expired (duty P17 counts
        # from the commit: no sweeper could reclaim a row before it was running)
        self.claimed_expired: list[tuple[int, int, float]] = []

    # the row index -----------------------------------------------------------------------------------

    def _unindex(self, job_id: int) -> None:
        old = self.rows.pop(job_id, None)
        if old is None:
            return
        lst = self.index[old[0]]
        i = bisect.bisect_left(lst, (old[1], job_id))
        if i < len(lst) and lst[i] == (old[1], job_id):
            lst.pop(i)

    def _put(self, job: Any, at: float) -> None:
        self._unindex(job.id)
        if job.state == "ready" or (job.state == "awaiting" and job.ready_at is not None):
            key = order_key(job.priority, job.ready_at, job.id)
            self.rows[job.id] = (job.queue, key, job.state, job.ready_at, at)
            bisect.insort(self.index[job.queue], (key, job.id))

    @property
    def hold(self) -> float:
        return max(CLAIM_HOLD_MIN, max(self.claim_lags, default=0.0))

    # per transaction ---------------------------------------------------------------------------------

    def observe(
        self,
        jobs: Mapping[int, tuple[Any, Any]],
        at: datetime,
        lsn: str,
        claims: Iterable[tuple[str, str, datetime, bool]] = (),
    ) -> None:
        """One committed transaction: `jobs` its job rows (before, after), `claims` the claims the model
        explained in it as (node, queue, now, admission queue). Judged against the rows before it, then
        the index takes the rows after it."""
        t = at.timestamp()
        began: dict[int, float] = {}  # rows this transaction claimed → its claim's `now` (true clock)
        for node, queue, now, admission in claims:
            taken = [
                a
                for b, a in jobs.values()
                if a is not None
                and a.state == "running"
                and a.leased_by == node
                and a.queue == queue
                and (b is None or b.state != "running" or a.attempt == b.attempt + 1)
            ]
            if not taken:
                continue
            for a in taken:
                if a.lease_until is not None and a.lease_until <= at and len(self.claimed_expired) < 20000:
                    self.claimed_expired.append((a.id, a.attempt, round(t, 3)))
            t_now = now.timestamp() - self.faults.offset.get(node, 0.0)
            began.update((a.id, t_now) for a in taken)
            self.claims[queue].append(
                (t_now, t, len(taken), max(order_key(a.priority, a.ready_at, a.id) for a in taken))
            )
            self._since_trim += 1
            if self._since_trim >= TRIM_EVERY and self.claim_lag_max is not None:
                self._trim(t)
            if not self.faults.excuse(node, t_now, t)[0] and self.faults.any_freeze(t_now, t) is None:
                self.claim_lags.append(t - t_now)
            if admission:
                self.skipped_admission += 1
                continue
            if node == HARNESS_NODE:  # the harness's scenario write, not an SDK's claim: P5 judges SDKs
                self.skipped_harness += 1
                continue
            if not self.enabled:
                continue
            self.judged += 1
            self._judge(node, queue, now, t_now, t, lsn, taken, jobs)
        for job_id, (_b, a) in jobs.items():  # a write ends a row's wait (whatever it was)
            p = self.pending.pop(job_id, None)
            if p is not None:
                p.written_at, p.writer_now = t, began.get(job_id)
                self._written(p, t, began.get(job_id))
                self._keep(p)
            if a is None:
                self._unindex(job_id)
            else:
                self._put(a, t)

    def _judge(
        self,
        node: str,
        queue: str,
        now: datetime,
        t_now: float,
        t: float,
        lsn: str,
        taken: list[Job],
        jobs: Mapping[int, tuple[Any, Any]],
    ) -> None:
        last = max(order_key(a.priority, a.ready_at, a.id) for a in taken)
        ids = {a.id for a in taken}
        self.max_take = max(self.max_take, len(taken))
        # a frozen transaction holds at most the rows it locked: LOCKS_PER_TAKE × the largest claim of the
        # run, the first candidates in §6 order when it froze — so the freezes around this claim excuse at
        # most that many of the rows it passed over, the earliest in order
        can_hold = LOCKS_PER_TAKE * self.max_take * self.faults.freezes(t_now - CLAIM_HOLD_MIN, t)
        rank = 0
        me = self.judged - 1  # this claim's index in judgement order (observe counted it)
        mine: list[Any] = [queue, t_now, t, lsn, node, 0, 0, max(ids), None, 0]  # a judged_claims record
        self.judged_claims[me] = mine
        lst = self.index.get(queue, [])
        for key, job_id in lst[: min(len(lst), SCAN_LIMIT)]:
            if key >= last:
                break
            if job_id in ids or job_id in jobs:
                continue  # taken, or written by this very transaction
            _q, _k, state, ready_at, written = self.rows[job_id]
            if ready_at is not None and ready_at > now:
                continue  # not yet due by the claim's own clock
            if written > t_now - SNAP_SLACK:
                continue  # committed after (or just before) the claim's `now`: maybe not in its snapshot
            self.inversions += 1
            rank += 1
            # a transaction frozen by a fault could hold p: one that locked it after its last write and
            # froze before this claim ended, thawing (then ending within CLAIM_HOLD_MIN) after its `now`
            if rank <= can_hold and self.faults.froze_holding(written, t_now - CLAIM_HOLD_MIN, t):
                self.excused_fault += 1
                continue
            mine[5] += 1
            if mine[8] is None:
                mine[8] = job_id
            p = self.pending.get(job_id)
            if p is None:
                p = self.pending[job_id] = Passed(job_id, t, t_now, node, max(ids), lsn, state == "ready", key=key)
            else:
                p.times += 1
                if t_now - p.claim_at > p.gap:
                    p.gap, p.again_lsn = t_now - p.claim_at, lsn
            if len(p.passing) < PASSING_KEPT:
                p.passing.append(me)
            else:
                mine[6] += 1  # not followed further: counted as held by a concurrent transaction
        if rank or self._had_choice(lst, last, ids, jobs, now, t_now):
            self.choices += 1
        if not mine[5]:  # passed over nothing: no row refers to it, no capacity is judged for it
            del self.judged_claims[me]

    def _had_choice(
        self,
        lst: list[tuple[tuple[int, int, float, int], int]],
        last: tuple[int, int, float, int],
        ids: set[int],
        jobs: Mapping[int, Any],
        now: datetime,
        t_now: float,
    ) -> bool:
        """A claimable row of the priority of the claim's last taken row, later in §6 order, left untaken
        (rows earlier in order, passed over, are counted by `_judge` itself)."""
        i = bisect.bisect_right(lst, (last, INT_MAX))
        for key, job_id in lst[i : i + CHOICE_SCAN]:
            if key[0] != last[0]:
                return False
            if job_id in ids or job_id in jobs:
                continue
            _q, _k, _state, ready_at, written = self.rows[job_id]
            if (ready_at is None or ready_at <= now) and written <= t_now - SNAP_SLACK:
                return True
        return False

    def _written(self, p: Passed, t: float, writer_now: float | None) -> None:
        """Row p's next write, committed at t (a claim's, begun at writer_now): a passing claim it may have
        been concurrent with — the writer began before that claim committed, or (its beginning unknown)
        committed within HOLD of it — counts p as held by it."""
        for i in p.passing:
            c = self.judged_claims[i]
            if (writer_now is not None and writer_now <= c[2] + BEGAN_SLACK) or (
                writer_now is None and t <= c[2] + self.hold
            ):
                c[6] += 1

    def _keep(self, p: Passed) -> None:
        if len(self.settled) < KEEP_ROWS:
            self.settled.append(p)

    def _capacity(self, queue: str, t_now: float, t: float) -> int:
        """Rows the other claims of the queue in flight during [t_now, t] could hold: LOCKS_PER_TAKE per row
        each took (its `now` before t, its commit after t_now less SNAP_SLACK)."""
        lst = self.claims.get(queue, [])
        i = bisect.bisect_left(lst, t_now - SNAP_SLACK, key=lambda c: c[1])
        held = 0
        for c_now, c_at, n, _last in lst[i:]:
            if c_at > t + INFLIGHT_MAX:
                break
            if c_now <= t + BEGAN_SLACK and not (c_now == t_now and c_at == t):
                held += LOCKS_PER_TAKE * n
        return held

    def _trim(self, t: float) -> None:
        """Drop the claims committed before any later claim can look back to them (its `now` at most
        `claim_lag_max` and the largest clock offset before its commit, less SNAP_SLACK and a margin) that no
        kept judged claim's window ([now − SNAP_SLACK, commit + INFLIGHT_MAX], `_capacity`, `_overlocker`)
        holds: the end-of-run judgement reads the rest only."""
        self._since_trim = 0
        assert self.claim_lag_max is not None
        offsets = [abs(o) for o in self.faults.offset.values()]
        horizon = t - self.claim_lag_max - max(offsets, default=0.0) - SNAP_SLACK - TRIM_MARGIN
        windows: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for c in self.judged_claims.values():
            windows[c[0]].append((c[1] - SNAP_SLACK, c[2] + INFLIGHT_MAX))
        for queue, lst in self.claims.items():
            cut = bisect.bisect_left(lst, horizon, key=lambda c: c[1])
            if not cut:
                continue
            spans = sorted(windows.get(queue, ()))
            starts = [a for a, _b in spans]
            reach: list[float] = []  # the furthest end of the windows starting at or before each start
            for _a, b in spans:
                reach.append(max(b, reach[-1]) if reach else b)
            lst[:cut] = [
                claim
                for claim in lst[:cut]
                if (i := bisect.bisect_right(starts, claim[1])) and reach[i - 1] >= claim[1]
            ]

    def finish(self, end: datetime | None) -> None:
        """Judge every passed-over row and claim (see the module docstring)."""
        for p in list(self.pending.values()):
            self._keep(p)
        self.pending.clear()
        hold = self.hold
        for p in self.settled:
            if p.gap > hold:
                self.repeat_rows += 1
                if len(self.proven) < 20:
                    self.proven.append(p)
            else:
                self.excused_written += 1
        # one untraced transaction beside each claim — a claim aborted by its own call deadline, say —
        # could hold as many rows as the largest claim locks
        untraced = LOCKS_PER_TAKE * self.max_take
        for i, c in self.judged_claims.items():
            queue, t_now, t, passed, held = c[0], c[1], c[2], c[5], c[6]
            if passed - held > untraced:
                c[9] = self._capacity(queue, t_now, t)
                if passed - held > untraced + c[9]:
                    self.over_capacity.append(i)
        self._untraced(hold)
        self.proven_rows = self.repeat_rows + self.untraced_rows

    def _overlocker(self, queue: str, t_now: float, t: float, key: tuple[int, int, float, int]) -> bool:
        """Another claim of the queue in flight during [t_now, t] that could have locked a row of order `key`
        without taking it: a claim locks the first candidates in §6 order and takes the first of them, so
        what it locked and left is later in order than every row it took."""
        lst = self.claims.get(queue, [])
        i = bisect.bisect_left(lst, t_now - SNAP_SLACK, key=lambda c: c[1])
        for c_now, c_at, _n, last in lst[i:]:
            if c_at > t + INFLIGHT_MAX:
                break
            if c_now <= t + BEGAN_SLACK and not (c_now == t_now and c_at == t) and last < key:
                return True
        return False

    def _untraced(self, hold: float) -> None:
        """Ready rows passed over that no transaction of the history could have held: not written by one
        concurrent with the passing claim, no claim in flight beside it that could have locked the row
        without taking it, no fault excusing it. Only a transaction that left no trace — a claim aborted
        by its own deadline, say — could hold them: one holds at most LOCKS_PER_TAKE × (largest claim)
        rows, for at most HOLD. `aborts_needed` is the fewest such transactions that explain them all
        (rows grouped in windows of HOLD)."""
        pairs: list[tuple[float, int, int]] = []
        for p in self.settled:
            if not p.ready:
                continue
            for ci in p.passing:
                queue, t_now, t = self.judged_claims[ci][:3]
                began = p.writer_now if p.writer_now is not None else p.written_at - hold
                if began <= t + BEGAN_SLACK or self._overlocker(queue, t_now, t, p.key):
                    continue
                pairs.append((t, p.job_id, ci))
        pairs.sort()
        per = LOCKS_PER_TAKE * self.max_take
        rows: set[int] = set()
        start = None
        for t, job_id, ci in pairs:
            if self.untraced_first is None:
                c = self.judged_claims[ci]
                self.untraced_first = (job_id, c[3], c[4])
            if start is None or t > start + hold:
                self.aborts_needed += -(-len(rows) // per)
                self.untraced_rows += len(rows)
                rows, start = set(), t
            rows.add(job_id)
        self.aborts_needed += -(-len(rows) // per)
        self.untraced_rows += len(rows)

    @property
    def invalid(self) -> bool:
        """Rows passed over again long after (PROVEN_MIN of them), or claims that passed over more free rows
        than every transaction in flight could hold — more such claims than a rare untraced abort explains:
        at least OVER_MIN, and at least OVER_SHARE of the claims judged."""
        if self.repeat_rows >= PROVEN_MIN:
            return True
        if self.aborts_needed >= OVER_MIN and self.aborts_needed >= UNTRACED_SHARE * self.judged:
            return True
        n = len(self.over_capacity)
        return n >= OVER_MIN and n >= OVER_SHARE * self.judged

    def lines(self) -> list[str]:
        if not self.invalid:
            return []
        head = (
            f"P5 claim order: claims took rows later in §6 order (priority ASC, ready_at ASC NULLS FIRST, id ASC) "
            f"than rows that were claimable and that no transaction held — {self.repeat_rows} row(s) passed over "
            f"again by a claim begun more than {self.hold:.1f} s (the run's "
            f"longest fault-free claim) after the first; {len(self.over_capacity)} claim(s) passed over more free "
            f"rows than every transaction in flight could hold; {self.untraced_rows} ready row(s) that only an "
            f"untraced transaction could have held, needing at least {self.aborts_needed} of them (allowed: "
            f"{max(OVER_MIN - 1, int(UNTRACED_SHARE * self.judged))}); "
            f"{self.judged} claims judged, {self.inversions} "
            f"passed-over (row, claim) pairs, {self.excused_fault} of them around a fault, {self.excused_written} "
            "rows explained by a concurrent transaction"
        )
        out = [head]
        if self.untraced_first is not None:
            job_id, lsn, node = self.untraced_first
            out.append(
                f"P5 job {job_id} was claimable and passed over by the claim of {node} committed at LSN {lsn}, "
                "with no transaction of the history able to hold it: not written by one in flight beside the "
                "claim, and every claim in flight took rows later in §6 order than it"
            )
        untraced = LOCKS_PER_TAKE * self.max_take
        for i in self.over_capacity[:3]:
            _q, _n, _t, lsn, node, passed, held, taken, first, cap = self.judged_claims[i]
            out.append(
                f"P5 the claim of {node} committed at LSN {lsn} took job {taken} and passed over {passed} claimable "
                f"rows earlier in §6 order (first: job {first}); {held} of them were written by a concurrent "
                f"transaction, and the claims in flight beside it ({cap}) and one untraced one ({untraced}) could "
                "hold no more than the rest"
            )
        for p in self.proven[:3]:
            again = f", the last {p.gap:.1f} s later (LSN {p.again_lsn})" if p.times > 1 else ""
            out.append(
                f"P5 job {p.job_id} was claimable and passed over by the claim of {p.node} committed at LSN "
                f"{p.lsn} (which took job {p.taken}, later in §6 order) and by {p.times - 1} later claim(s){again}, "
                "while no transaction that could hold it was in flight"
            )
        return out
