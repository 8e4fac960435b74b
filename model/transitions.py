"""The §4 transition relation with its legal writers, as data and pure functions.

One definition serves three callers: the model (every transition `model.store` makes is one of these —
checked by the stateful test's per-step check), the stateful test, and the soak's history checker
(soak/judges/replay/), which judges every committed row change of a real database.

A *row change* is one row version replaced by the next: (before, after) with None for "no row"
(insert / delete). `judge_job` names the legal writer that explains a belay_jobs change, or the rule it
breaks. Writers (contract §4, columns per §§5–8):

  insert   — §5.1: a new row is ready (or held, when dep-bearing) with attempt 0, no errors, no spend,
             no lease, no cancel request
  claim    — §6: ready|awaiting → running; attempt + 1; a lease and a node; started_at kept or set
  renew    — §6: running → running; only lease_until, and never backwards
  cancel_request — §8.6: running → running; cancel_requested false → true
  spend    — §8.2: spent_* grow by exactly the costs of the steps the same transaction journaled
  ack      — §7: running → any but held/paused, fenced: the attempt is the row's; lease cleared;
             an error entry (failure) carries the row's attempt; max_attempts grows by one only on a
             snooze/park (no new error); result only with succeeded; finished_at iff terminal
  reclaim  — §6: running → ready|failed once the lease has expired; a lease_expired entry; lease cleared
  wake     — §8.1/§8.4: awaiting → ready (delivery, reconciler); await fields cleared
  settle   — §8.3: held → ready (state only) | held → cancelled (+ finished_at)
  retry    — §8.6: failed|cancelled → ready, or held when dep-bearing; cancel request, lease and
             finished_at cleared; max_attempts = GREATEST(max_attempts, attempt + 1); errors kept
  cancel   — §8.6: a non-terminal, non-running row → cancelled (+ finished_at, lease and await cleared)
  prune    — §8.7: only terminal rows are deleted

Rules are named (RULES) so reports and tests refer to them. Pure: no I/O, no clock — the commit time a
check needs (lease expiry) is an input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from model.rows import TERMINAL, Event, Job, RateWindow, Signal, Step

RULES: dict[str, str] = {
    "immutable": "identity columns (queue, kind, input, keys, workflow, parent, budgets, …) never change",
    "insert": "a new row is ready (held when dep-bearing) with attempt 0, no errors, spend, lease or cancel request",
    "writer": "every state change is made by a legal writer of §4 (from-state → to-state)",
    "terminal_exit": "a terminal row leaves terminal only by an operator retry (§8.6)",
    "claim_attempt": "attempt changes only on a claim, and grows by exactly one",
    "claim_due": "a claim takes only a due row (ready_at NULL or ≤ the commit time)",
    "fence": "a fenced ack's attempt equals the row's: the attempt is unchanged and an error entry names it",
    "lease_cleared": "lease_until and leased_by are cleared on every ack, park, reclaim and cancel",
    "lease_forward": "a renewal never moves lease_until backwards, and keeps the node",
    "reclaim_expired": "a reclaim takes only a row whose lease has expired",
    "max_attempts": "max_attempts grows by one only on a snooze/park, or to attempt + 1 on a retry",
    "columns": "a writer changes only the columns §§5–8 give it",
    "spend": "spent_* only grow, and only by the costs of steps journaled in the same transaction",
    "step_immutable": "belay_steps rows are never updated, and deleted only with their job (retention)",
    "step_seq": "a step's seq is above every earlier seq of its job",
    "event_append": "belay_events is append-only (deleted only with its job)",
    "signal_upsert": "a signal upsert replaces payload and inserted_at under its own (scope, name) (§8.1)",
    "prune": "only terminal job rows are deleted (§8.7)",
    "rate_grows": "a rate window's count only grows",
}

IMMUTABLE = (
    "id",
    "queue",
    "worker",
    "input",
    "meta",
    "priority",
    "inserted_at",
    "unique_key",
    "unique_mode",
    "cron_name",
    "cron_slot",
    "workflow_id",
    "wf_name",
    "wf_deps",
    "wf_ignore",
    "parent_id",
    "budget_usd_micros",
    "budget_tokens",
)
LEASE = frozenset({"lease_until", "leased_by"})
CLOCK_SLACK = timedelta(seconds=2)  # the node's `now` vs the server's commit time (one machine)

# (from, to) → writers that may make that change; None = no row
EDGES: dict[tuple[str | None, str | None], tuple[str, ...]] = {}


def _edge(writer: str, froms: Iterable[str | None], tos: Iterable[str | None]) -> None:
    for f in froms:
        for t in tos:
            EDGES.setdefault((f, t), ())
            EDGES[(f, t)] += (writer,)


_edge("insert", [None], ["ready", "held"])
_edge("claim", ["ready", "awaiting"], ["running"])
_edge("renew", ["running"], ["running"])
_edge("cancel_request", ["running"], ["running"])
_edge("ack", ["running"], ["ready", "awaiting", "succeeded", "failed", "cancelled"])
_edge("reclaim", ["running"], ["ready", "failed"])
_edge("wake", ["awaiting"], ["ready"])
_edge("settle", ["held"], ["ready", "cancelled"])
_edge("retry", ["failed", "cancelled"], ["ready", "held"])
_edge("cancel", ["ready", "awaiting", "held", "paused"], ["cancelled"])
_edge("prune", list(TERMINAL), [None])
for _s in ("ready", "running", "awaiting", "held", "paused", *sorted(TERMINAL)):
    _edge("spend", [_s], [_s])


@dataclass(frozen=True)
class TxContext:
    """What a transaction did besides the row being judged."""

    commit_time: datetime | None = None
    step_costs: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # job → (usd, tokens) journaled
    jobs_deleted: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Judgement:
    """The writer that explains a change (legal), or the broken rule and why (illegal)."""

    writer: str | None
    rule: str | None = None
    why: str = ""
    node: str | None = None  # attribution: which node wrote it (leased_by), when the row tells
    attempt: int | None = None

    @property
    def legal(self) -> bool:
        return self.rule is None


_FIELDS: dict[type, tuple[str, ...]] = {}


def changed_columns(before: Any, after: Any) -> set[str]:
    names = _FIELDS.get(type(before))
    if names is None:
        names = _FIELDS[type(before)] = tuple(f.name for f in fields(before))
    b, a = before.__dict__, after.__dict__
    return {n for n in names if b[n] != a[n]}


def _v(rule: str, why: str) -> tuple[str, str]:
    return (rule, why)


def _new_entry(before: Job, after: Job) -> tuple[dict[str, Any] | None, bool]:
    """(the one error entry appended, True) / (None, True) when unchanged / (None, False) otherwise."""
    b, a = list(before.errors or []), list(after.errors or [])
    if a == b:
        return None, True
    if len(a) == len(b) + 1 and a[:-1] == b and isinstance(a[-1], Mapping):
        return a[-1], True
    return None, False


def _check_writer(writer: str, b: Job | None, a: Job | None, ctx: TxContext) -> list[tuple[str, str]]:
    """The rules `writer` would break making the change b → a (empty: it explains the change)."""
    out: list[tuple[str, str]] = []
    if writer == "insert":
        assert a is not None
        bad = [
            f"{c} {getattr(a, c)!r}"
            for c, want in (
                ("attempt", 0),
                ("spent_usd_micros", 0),
                ("spent_tokens", 0),
                ("cancel_requested", False),
                ("lease_until", None),
                ("leased_by", None),
                ("finished_at", None),
                ("result", None),
            )
            if getattr(a, c) != want
        ]
        if a.errors:
            bad.append(f"errors {a.errors!r}")
        if a.state == "held" and not a.wf_deps:
            bad.append("held without wf_deps")
        if bad:
            out.append(_v("insert", "inserted with " + ", ".join(bad)))
        return out
    if writer == "prune":
        return out
    assert a is not None and b is not None
    changed = changed_columns(b, a)
    frozen = sorted(c for c in IMMUTABLE if c in changed)
    if frozen:
        out.append(_v("immutable", "changed " + ", ".join(frozen)))

    def only(allowed: set[str]) -> None:
        extra = sorted(changed - allowed - set(IMMUTABLE))
        if extra:
            what = ", ".join(f"{c} {_short(getattr(b, c))}→{_short(getattr(a, c))}" for c in extra)
            rule = (
                "claim_attempt"
                if "attempt" in extra
                else "max_attempts"
                if "max_attempts" in extra
                else "spend"
                if {"spent_usd_micros", "spent_tokens"} & set(extra)
                else "columns"
            )
            out.append(_v(rule, f"{writer} may not change {what}"))

    if writer == "claim":
        only({"state", "attempt", "lease_until", "leased_by", "started_at"})
        if a.attempt != b.attempt + 1:
            out.append(_v("claim_attempt", f"claim moved attempt {b.attempt}→{a.attempt}, not +1"))
        if a.lease_until is None or a.leased_by is None:
            out.append(_v("columns", "claim left no lease (lease_until/leased_by NULL)"))
        if b.started_at is not None and a.started_at != b.started_at:
            out.append(_v("columns", "claim rewrote started_at"))
        if ctx.commit_time is not None and b.ready_at is not None and b.ready_at > ctx.commit_time + CLOCK_SLACK:
            out.append(
                _v(
                    "claim_due",
                    f"claimed a row not due until {b.ready_at.isoformat()} (committed {ctx.commit_time.isoformat()})",
                )
            )
    elif writer == "renew":
        only({"lease_until"})
        if a.lease_until is None or (b.lease_until is not None and a.lease_until < b.lease_until):
            out.append(
                _v("lease_forward", f"lease_until moved backwards {_short(b.lease_until)}→{_short(a.lease_until)}")
            )
    elif writer == "cancel_request":
        only({"cancel_requested"})
        if not (a.cancel_requested and not b.cancel_requested):
            out.append(_v("columns", "cancel_request sets cancel_requested false→true"))
    elif writer == "spend":
        only({"spent_usd_micros", "spent_tokens"})
        du, dt = a.spent_usd_micros - b.spent_usd_micros, a.spent_tokens - b.spent_tokens
        if (du, dt) != (0, 0):
            costs = ctx.step_costs.get(a.id)
            if du < 0 or dt < 0:
                out.append(_v("spend", f"spent_* shrank (usd {du:+}, tokens {dt:+})"))
            elif costs is None:
                out.append(
                    _v("spend", f"spent_* grew (usd {du:+}, tokens {dt:+}) without a step journaled in the transaction")
                )
            elif costs != (du, dt):
                out.append(_v("spend", f"spent_* grew by (usd {du}, tokens {dt}) but the journaled steps cost {costs}"))
    elif writer in ("ack", "reclaim"):
        allowed = {
            "state",
            "result",
            "finished_at",
            "errors",
            "ready_at",
            "await_scope",
            "await_name",
            "max_attempts",
            "lease_until",
            "leased_by",
        }
        only(allowed)
        if a.lease_until is not None or a.leased_by is not None:
            moved = f"lease_until {_short(b.lease_until)}→{_short(a.lease_until)}" + (
                " (backwards)"
                if a.lease_until is not None and b.lease_until is not None and a.lease_until < b.lease_until
                else ""
            )
            out.append(
                _v(
                    "lease_cleared",
                    f"{writer} to {a.state} left the lease set: {moved}, leased_by {_short(a.leased_by)}",
                )
            )
        if a.attempt != b.attempt:
            out.append(_v("fence", f"{writer} changed attempt {b.attempt}→{a.attempt}"))
        entry, ok = _new_entry(b, a)
        if not ok:
            out.append(_v("columns", f"{writer} rewrote errors instead of appending one entry"))
        if entry is not None and entry.get("attempt") != b.attempt:
            out.append(
                _v(
                    "fence",
                    f"{writer} to {a.state} appended an error of attempt {entry.get('attempt')} "
                    f"while the row runs attempt {b.attempt} (a stale, unfenced write)",
                )
            )
        terminal = a.state in TERMINAL
        if terminal != (a.finished_at is not None):
            out.append(_v("columns", f"{writer} to {a.state} with finished_at {_short(a.finished_at)}"))
        if a.result != b.result and a.state != "succeeded":
            out.append(_v("columns", f"{writer} to {a.state} wrote a result"))
        if a.state == "succeeded" and a.result is None:
            out.append(_v("columns", "succeeded without a result"))
        if a.state == "failed" and entry is None:
            out.append(_v("columns", "failed without an error entry"))
        if a.state == "awaiting" and (a.await_scope is None) != (a.await_name is None):
            out.append(_v("columns", "awaiting with half an await key"))
        if (
            a.state not in ("awaiting",)
            and (a.await_scope, a.await_name) != (b.await_scope, b.await_name)
            and (a.await_scope, a.await_name) != (None, None)
        ):
            out.append(_v("columns", f"{writer} to {a.state} set an await key"))
        if a.max_attempts != b.max_attempts:
            if not (a.max_attempts == b.max_attempts + 1 and entry is None and a.state in ("ready", "awaiting")):
                out.append(
                    _v(
                        "max_attempts",
                        f"{writer} to {a.state} moved max_attempts {b.max_attempts}→{a.max_attempts} "
                        "(only a snooze/park adds one)",
                    )
                )
        if writer == "reclaim":
            if entry is None or entry.get("error") != "lease_expired":
                out.append(_v("columns", "reclaim without a lease_expired entry"))
            if a.max_attempts != b.max_attempts:
                out.append(_v("max_attempts", "reclaim changed max_attempts"))
            if (
                ctx.commit_time is not None
                and b.lease_until is not None
                and b.lease_until > ctx.commit_time + CLOCK_SLACK
            ):
                out.append(
                    _v(
                        "reclaim_expired",
                        f"reclaimed a lease live until {b.lease_until.isoformat()} "
                        f"(committed {ctx.commit_time.isoformat()})",
                    )
                )
            if a.state == "ready" and b.attempt >= b.max_attempts:
                out.append(_v("columns", f"reclaim retried attempt {b.attempt} of {b.max_attempts}"))
        elif a.state == "ready" and entry is not None and b.attempt >= b.max_attempts:
            out.append(_v("columns", f"a failed attempt {b.attempt} of {b.max_attempts} was retried"))
    elif writer == "wake":
        only({"state", "ready_at", "await_scope", "await_name"})
        if a.await_scope is not None or a.await_name is not None:
            out.append(_v("columns", "wake left the await key set"))
    elif writer == "settle":
        only({"state", "finished_at"} if a.state == "cancelled" else {"state"})
        if a.state == "cancelled" and a.finished_at is None:
            out.append(_v("columns", "settlement doom without finished_at"))
        if not b.wf_deps:
            out.append(_v("writer", "settlement moved a member without deps"))
    elif writer == "retry":
        only({"state", "ready_at", "cancel_requested", "max_attempts", "lease_until", "leased_by", "finished_at"})
        if a.cancel_requested or a.finished_at is not None or a.lease_until is not None or a.leased_by is not None:
            out.append(_v("columns", "retry must clear cancel_requested, finished_at and the lease"))
        if a.max_attempts != max(b.max_attempts, b.attempt + 1):
            out.append(
                _v(
                    "max_attempts",
                    f"retry set max_attempts {a.max_attempts}, not GREATEST({b.max_attempts}, {b.attempt}+1)",
                )
            )
        want = "held" if b.wf_deps else "ready"
        if a.state != want:
            out.append(
                _v(
                    "writer",
                    f"retry of a {'dep-bearing' if b.wf_deps else 'dep-less'} job must go to {want}, "
                    f"not {a.state} (§8.6: re-hold, then settle)",
                )
            )
    elif writer == "cancel":
        only({"state", "finished_at", "lease_until", "leased_by", "await_scope", "await_name"})
        if a.finished_at is None or a.lease_until is not None or a.leased_by is not None:
            out.append(_v("lease_cleared", "cancel must set finished_at and clear the lease"))
    return out


def _short(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds")
    text = repr(value)
    return text if len(text) <= 48 else text[:47] + "…"


def attribute(writer: str | None, before: Job | None, after: Job | None) -> tuple[str | None, int | None]:
    """(node, attempt) that wrote a change, as far as the rows tell: the lease holder of the attempt."""
    if (after is not None and writer in ("claim", "renew")) or (before is None and after is not None):
        return after.leased_by, after.attempt
    if before is not None:
        return before.leased_by, before.attempt
    return None, None


def judge_job(before: Job | None, after: Job | None, ctx: TxContext = TxContext()) -> Judgement:
    """The writer that explains belay_jobs change before → after, or the first rule it breaks."""
    if before is not None and after is not None and before == after:
        node, attempt = attribute(None, before, after)
        return Judgement("noop", node=node, attempt=attempt)
    edge = (before.state if before else None, after.state if after else None)
    writers = EDGES.get(edge, ())
    if not writers:
        node, attempt = attribute(None, before, after)
        if edge[1] is None:
            return Judgement(None, "prune", f"deleted a {edge[0]} row", node, attempt)
        rule = "terminal_exit" if edge[0] in TERMINAL else "writer"
        why = f"{edge[0]}→{edge[1]}" + (
            " (only an operator retry leaves a terminal state, to ready/held)"
            if rule == "terminal_exit"
            else " is no legal writer's transition"
        )
        extra = _check_writer("ack", before, after, ctx) if edge[0] == "running" else []
        if rule == "writer" and extra:
            why += "; " + extra[0][1]
        return Judgement(None, rule, why, node, attempt)
    best: list[tuple[str, str]] | None = None
    best_writer = writers[0]
    for writer in writers:
        broken = _check_writer(writer, before, after, ctx)
        if not broken:
            node, attempt = attribute(writer, before, after)
            return Judgement(writer, node=node, attempt=attempt)
        if best is None or len(broken) < len(best):
            best, best_writer = broken, writer
    assert best is not None, "writers is not empty and every writer that fails names what it broke"
    node, attempt = attribute(best_writer, before, after)
    rule, why = best[0]
    if edge[0] in TERMINAL and edge[1] != edge[0] and any(r == "columns" for r, _ in best):
        # only a retry leaves terminal, and this writes what no retry writes
        return Judgement(None, "terminal_exit", f"{edge[0]}→{edge[1]} not as an operator retry ({why})", node, attempt)
    if writers == ("spend",):  # a same-state change no writer but the spend update makes
        assert before is not None and after is not None, "a same-state edge has a row on both sides"
        others = sorted(changed_columns(before, after) - {"spent_usd_micros", "spent_tokens"})
        if others:
            what = ", ".join(f"{c} {_short(getattr(before, c))}→{_short(getattr(after, c))}" for c in others)
            return Judgement(
                None, "writer", f"{edge[0]}→{edge[1]}: no writer of a {edge[0]} row changes {what}", node, attempt
            )
    return Judgement(None, rule, f"as {best_writer} ({edge[0]}→{edge[1]}): {why}", node, attempt)


def judge_step(before: Step | None, after: Step | None, ctx: TxContext, last_seq: int = 0) -> Judgement:
    """belay_steps: insert with a fresh seq; never updated; deleted only with its job (§8.2, §8.7)."""
    if before is None and after is not None:
        if after.seq <= last_seq:
            return Judgement(
                None, "step_seq", f"step {after.name!r} journaled with seq {after.seq}, not above {last_seq}"
            )
        return Judgement("journal")
    if before is not None and after is None:
        if before.job_id in ctx.jobs_deleted:
            return Judgement("prune")
        return Judgement(None, "step_immutable", f"step {before.name!r} deleted while its job row stays")
    if before == after:
        return Judgement("noop")
    assert before is not None and after is not None, "insert and delete were handled above"
    what = ", ".join(
        f"{c} {_short(getattr(before, c))}→{_short(getattr(after, c))}" for c in sorted(changed_columns(before, after))
    )
    return Judgement(None, "step_immutable", f"step {before.name!r} updated: {what}")


def judge_event(before: Event | None, after: Event | None, ctx: TxContext) -> Judgement:
    if before is None:
        return Judgement("emit")
    if after is None and before.job_id in ctx.jobs_deleted:
        return Judgement("prune")
    if before == after:
        return Judgement("noop")
    return Judgement(
        None, "event_append", f"event {before.seq} of job {before.job_id} {'deleted' if after is None else 'updated'}"
    )


def judge_signal(before: Signal | None, after: Signal | None, ctx: TxContext) -> Judgement:
    """§8.1: upsert-latest under (scope, name) — payload and inserted_at replaced — cleared or TTL-pruned by
    delete. inserted_at is the writer's `now`, taken before it waits for the scope lock, so two racing
    deliveries may commit in the opposite order of their `now`s: no order of inserted_at is required."""
    if after is None:
        return Judgement("clear")
    if before is None:
        return Judgement("deliver")
    if (before.scope, before.name) != (after.scope, after.name):
        return Judgement(
            None, "signal_upsert", f"signal ({before.scope}, {before.name}) re-keyed to ({after.scope}, {after.name})"
        )
    return Judgement("deliver")


def judge_rate(before: RateWindow | None, after: RateWindow | None, ctx: TxContext) -> Judgement:
    if before is not None and after is not None and after.count < before.count:
        return Judgement(
            None,
            "rate_grows",
            f"rate window {after.bucket} {_short(after.window_start)} count {before.count}→{after.count}",
        )
    return Judgement("debit" if after is not None else "prune")


def judge_state_change(
    before: Any, after: Any, now: datetime | None, *, retry: bool = False, ignore: frozenset[str] = frozenset()
) -> list[str]:
    """Every illegal belay_jobs change between two `State`s one operation apart (the stateful test's
    per-step check). One operation may write a row twice in one transaction only as a retry of a
    dep-bearing member (re-hold, then settlement): with `retry`, such a change is judged as those two
    statements. `ignore`: rules the caller's generator breaks on purpose. Steps are judged too."""
    costs: dict[int, tuple[int, int]] = {}
    out: list[str] = []
    for key, s in after.steps.items():
        old = before.steps.get(key)
        if old is None:
            u, t = costs.get(s.job_id, (0, 0))
            costs[s.job_id] = (u + s.usd_micros, t + s.tokens)
    deleted = frozenset(set(before.jobs) - set(after.jobs))
    ctx = TxContext(now, costs, deleted)
    for key in set(before.steps) | set(after.steps):
        b, a = before.steps.get(key), after.steps.get(key)
        if b != a:
            last = max((s.seq for (j, _), s in before.steps.items() if j == key[0]), default=0)
            j = judge_step(b, a, ctx, last)
            if not j.legal and j.rule not in ignore:
                out.append(f"step {key}: [{j.rule}] {j.why}")
    for job_id in sorted(set(before.jobs) | set(after.jobs)):
        b, a = before.jobs.get(job_id), after.jobs.get(job_id)
        if b == a:
            continue
        j = judge_job(b, a, ctx)
        if not j.legal and retry and b is not None and a is not None and b.wf_deps and b.state in TERMINAL:
            from dataclasses import replace

            mid = replace(a, state="held", finished_at=None)
            j1, j2 = judge_job(b, mid, ctx), judge_job(mid, a, ctx)
            if j1.legal and (j2.legal or j2.writer == "noop"):
                continue
        if not j.legal and j.rule not in ignore:
            out.append(f"job {job_id}: [{j.rule}] {j.why}")
    return out


__all__ = [
    "EDGES",
    "IMMUTABLE",
    "RULES",
    "Judgement",
    "TxContext",
    "attribute",
    "changed_columns",
    "judge_event",
    "judge_job",
    "judge_rate",
    "judge_signal",
    "judge_state_change",
    "judge_step",
]
