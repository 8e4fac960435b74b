"""Judges of order and time over the committed history, fault-aware per node (issue 51).

Trace validation (soak/judges/refine/) explains each committed transaction by a model operation; two
things the model leaves free are judged here against the harness's fault log instead:

**`now` freshness** (contract §2: every operation takes the caller's `now`, "the instant the operation is
made"; §2 clock rule: "Keep worker clocks within a few seconds of true time (NTP); leases and windows
tolerate small skew"). A write's `now` is read before its transaction commits, so it is older than the
commit by the time the call took. For each write whose writer node is known (a claim's `leased_by`, the
lease holder of the job whose step, event, spawn or ack is written), its lag — commit time − (`now` −
the node's declared BELAY_CLOCK_OFFSET) — may exceed NOW_BASE only by the time faults *of that node*
held it between its `now` and the commit: its SIGSTOP, a partition, stall, cut or injected latency of its
route, a PostgreSQL crash-restart or failover (every node's connection). Each fault excuses at most its
own overlap with [now, commit]; a lag beyond that is a finding naming the job, the node and the write.
The harness's own writes (enqueues, cancels, signals) and writes whose node the rows do not name (a
sweeper's reclaim, a cron fire) keep refine's blanket LAG.

**Claim order** (contract §6: candidates in order `priority ASC, ready_at ASC NULLS FIRST, id ASC`, with
`FOR UPDATE SKIP LOCKED`). A claim C that took row r while a row p earlier in that order was claimable
(in C's queue, due by C's own `now`, committed SNAP_SLACK before it) *passed over* p; that is honest
only when a concurrent transaction held p: one that later writes p, a claim that locked more rows than it
took, or one that aborted. A transaction frozen by a fault (SIGSTOP, partition, stall, latency, cut, a
machine stall) holds what it locked for the fault's duration, so the faults around C excuse its first
LOCKS_PER_TAKE × (largest claim) × (faults) passed-over rows in order — no more. The rest is proven:

  (a) a row passed over again by a claim begun more than HOLD after the first one committed, unwritten in
      between: HOLD is the longest an honest transaction of the run lives (the longest fault-free claim,
      at least CLAIM_HOLD_MIN) — no lock that left no trace lasts longer, none that left one did;
  (b) a claim whose passed-over rows, less those a transaction concurrent with it wrote, outnumber what
      the other claims of the queue in flight beside it could hold (LOCKS_PER_TAKE per row each took)
      plus one untraced claim (one aborted by its own call deadline, say).

INVALID with PROVEN_MIN rows of (a), or with claims of (b) numbering at least OVER_MIN and OVER_SHARE of
the claims judged; the counts are reported either way. Not judged: claims on admission queues
(global_limit, rate, partition: §6 admission legitimately skips rows of a full key or window), and rows
beyond the first SCAN_LIMIT candidates of a queue.
"""

from __future__ import annotations

from soak.judges.timing.claim_order import BEGAN_SLACK as BEGAN_SLACK
from soak.judges.timing.claim_order import CHOICE_SCAN as CHOICE_SCAN
from soak.judges.timing.claim_order import CLAIM_HOLD_MIN as CLAIM_HOLD_MIN
from soak.judges.timing.claim_order import INFLIGHT_MAX as INFLIGHT_MAX
from soak.judges.timing.claim_order import INT_MAX as INT_MAX
from soak.judges.timing.claim_order import KEEP_ROWS as KEEP_ROWS
from soak.judges.timing.claim_order import LOCKS_PER_TAKE as LOCKS_PER_TAKE
from soak.judges.timing.claim_order import OVER_MIN as OVER_MIN
from soak.judges.timing.claim_order import OVER_SHARE as OVER_SHARE
from soak.judges.timing.claim_order import PASSING_KEPT as PASSING_KEPT
from soak.judges.timing.claim_order import PROVEN_MIN as PROVEN_MIN
from soak.judges.timing.claim_order import SCAN_LIMIT as SCAN_LIMIT
from soak.judges.timing.claim_order import SNAP_SLACK as SNAP_SLACK
from soak.judges.timing.claim_order import UNTRACED_SHARE as UNTRACED_SHARE
from soak.judges.timing.claim_order import ClaimOrder as ClaimOrder
from soak.judges.timing.claim_order import Passed as Passed
from soak.judges.timing.claim_order import order_key as order_key
from soak.judges.timing.freshness import NOW_BASE as NOW_BASE
from soak.judges.timing.freshness import STALE_MIN_WRITES as STALE_MIN_WRITES
from soak.judges.timing.freshness import Freshness as Freshness
from soak.judges.timing.freshness import Stale as Stale
from soak.judges.timing.nodes import FREEZES as FREEZES
from soak.judges.timing.nodes import INF as INF
from soak.judges.timing.nodes import SAMPLE_EVERY as SAMPLE_EVERY
from soak.judges.timing.nodes import STALL_GAP as STALL_GAP
from soak.judges.timing.nodes import NodeFaults as NodeFaults
from soak.judges.timing.nodes import load_faults as load_faults

__all__ = ["ClaimOrder", "Freshness", "NodeFaults", "load_faults", "order_key"]
