"""The Hypothesis state machine (properties/stateful.py) with an adapter in place of impl/: every
operation goes to the model and to the SDK; results and the full database snapshot (read by the
harness itself, impl/store/snapshot.py) must agree after every step, and the §11 predicates and the §4
transition judge run on every step, as in the in-process comparison.

A failure is shrunk by Hypothesis; the report gives the shortest program twice — as the operations
sent (one protocol request per line: what the SDK saw) and as Hypothesis's replayable rule program —
plus the first differing row and column. Errors compare by class (an SDK's messages are its own).
Operations the SDK does not implement (a client-level SDK: claim, ack, ...) are done by the project's
reference store on the same database, so client operations are judged on every state workers reach;
`judged` and `assisted` count both.
"""

from __future__ import annotations

import dataclasses
import datetime as datetime_module
import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from impl.store import PgStore
from impl.store.pgrows import configure_connection
from impl.store.snapshot import snapshot
from model import ops
from model import worker_ops as w
from model.ops import WorkflowMember
from properties import stateful
from properties.sdk.codec import encode_op
from properties.sdk.harness import AdapterError, AdapterFailure, AdapterProcess, SubprocessStore, reset
from properties.stateful import OPTS, TABLES, TARGET, BelayMachine, job_specs

# The program of the example being run (the last one run is the shrunk failure Hypothesis reports).
PROGRAM: list[dict[str, Any]] = []


class Divergence(AssertionError):
    """The SDK and the model disagree (a result, a table, an invariant)."""


def _error_class(exc: BaseException) -> str:
    if isinstance(exc, ops.InvalidInput):
        return "InvalidInput"
    if isinstance(exc, ops.IncompatibleSchema):
        return "IncompatibleSchema"
    if isinstance(exc, OverflowError):
        return "Overflow"
    if isinstance(exc, AdapterError):
        return exc.error
    return type(exc).__name__


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except AdapterFailure:
        raise  # a protocol finding, not a value to compare
    except Exception as exc:  # noqa: BLE001 - compared by class between the model and the SDK
        return ("raised", _error_class(exc))


def first_difference(mine: Any, theirs: Any) -> str:
    """The first differing row of a table (by key) and its differing columns."""
    if not hasattr(mine, "keys"):
        return f"  model: {mine}\n  sdk:   {theirs}"
    for key in sorted(set(mine) | set(theirs), key=repr):
        a, b = mine.get(key), theirs.get(key)
        if a == b:
            continue
        if a is None or b is None:
            return (
                f"  row {key!r}: "
                + ("missing in the database (the model has it)" if b is None else "extra in the database")
                + f"\n  model: {a}\n  sdk:   {b}"
            )
        return f"  row {key!r}:\n" + columns(a, b)
    return "  (no row differs)"


def _shown(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime_module.datetime) else repr(value)


def columns(a: Any, b: Any, path: str = "") -> str:
    """Where two values first differ: descends into dataclass fields and equal-length sequences, and
    names every differing column of the innermost row (path like `jobs[0].ready_at`)."""
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        differing = [f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)]
        if len(differing) == 1:
            inner = columns(getattr(a, differing[0]), getattr(b, differing[0]), f"{path}.{differing[0]}".lstrip("."))
            if inner:
                return inner
        return "\n".join(
            f"    column {f'{path}.' if path else ''}{name}: model {_shown(getattr(a, name))} / sdk {_shown(getattr(b, name))}"
            for name in differing
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return columns(x, y, f"{path}[{i}]")
    return f"    column {path}: model {_shown(a)} / sdk {_shown(b)}" if path else f"    model: {a!r}\n    sdk:   {b!r}"


class _Recording:
    """The harness connection, recording the rows the machine writes itself (foreign_unscheduled_row:
    what a foreign SDK may leave behind) into the printed program."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn

    def execute(self, query: Any, params: Any = None) -> Any:
        if isinstance(query, str) and query.lstrip().upper().startswith("UPDATE"):
            PROGRAM.append({"harness_sql": query, "params": list(params or ())})
        return self._conn.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class AdapterMachine(BelayMachine):
    """BelayMachine whose implementation store is a SubprocessStore (TARGET['store'])."""

    retries_emit = False  # EmitEvent.once is the reference's retry, not a protocol operation (codec.wire_fields)

    def __init__(self) -> None:
        TARGET["adapter"].ensure()  # a finding may have killed it in the previous example
        PROGRAM.clear()
        super().__init__()
        self.conn.execute("DELETE FROM belay_adapter_app")
        self.conn = _Recording(self.conn)  # type: ignore[assignment]  # the harness's own row writes join the program
        # Every `now` carries microseconds (timestamptz keeps them, §2): an SDK that reads timestamps into a
        # millisecond clock type (a JavaScript Date) writes and reports instants the model does not.
        self.now += timedelta(microseconds=123457)

    def both(self, op: Any) -> Any:
        store: SubprocessStore = self.pg  # type: ignore[assignment]
        PROGRAM.append(encode_op(op))
        before = self.model.state
        expected = _outcome(lambda: self.model.apply(op))
        actual = _outcome(lambda: store.apply(op))
        if expected != actual:
            detail = (
                columns(expected, actual)
                if type(expected) is type(actual)
                else f"    model: {expected}\n    sdk:   {actual}"
            )
            raise Divergence(f"{type(op).__name__} results differ:\n{detail}")
        state = snapshot(self.conn)
        for table in TABLES:
            mine, theirs = getattr(self.model.state, table), getattr(state, table)
            if mine != theirs:
                raise Divergence(f"after {type(op).__name__}: table {table} differs:\n{first_difference(mine, theirs)}")
        self.steps += 1
        self.contract_invariants(op, expected, before, state)
        return expected

    @rule(outcome=st.sampled_from(["succeed", "fail"]), again=st.booleans())
    def stale_ack_after_reclaim(self, outcome: str, again: bool) -> None:
        """§7's canonical stale ack: a job is claimed, its lease expires, the sweeper retries it and
        another node claims it; then the first attempt acks (stale: must change nothing), and with
        `again` the live attempt acks too."""
        self.both(ops.Enqueue(self.now, (ops.JobSpec("z", "echo", max_attempts=2),)))
        first = self.both(w.Claim(self.now, "z", "n1", 1, timedelta(seconds=10), OPTS["plain"]))
        self.now += timedelta(seconds=11)
        self.both(w.Reclaim(self.now, w.Backoff(0, 2, 20), limit=5))
        second = self.both(w.Claim(self.now, "z", "n2", 1, timedelta(seconds=30), OPTS["plain"]))
        done: w.Outcome = w.Succeed({"by": "first"}) if outcome == "succeed" else w.Fail("late", None, None)
        for job in first.jobs:
            self.both(w.Ack(self.now, job.id, job.attempt, done))
        if again:
            for job in second.jobs:
                self.both(w.Ack(self.now, job.id, job.attempt, w.Succeed({"by": "second"})))

    @rule(priority=st.integers(0, 1))
    def claim_unscheduled_first(self, priority: int) -> None:
        """§6's order is ready_at ASC NULLS FIRST: of two equal-priority jobs, the one a foreign SDK left
        with ready_at NULL (§4: claimable) is claimed before an older scheduled one."""
        result = self.both(ops.Enqueue(self.now, tuple(ops.JobSpec("u", "echo", priority=priority) for _ in range(2))))
        later = max(result.ids)
        self.foreign_unscheduled_row(later)
        self.both(w.Claim(self.now, "u", "n1", 1, timedelta(seconds=30), OPTS["plain"]))

    @rule(
        modes=st.lists(st.sampled_from(["incomplete", "always", "window"]), min_size=2, max_size=4), done=st.booleans()
    )
    def one_key_across_modes(self, modes: list[str], done: bool) -> None:
        """§5.2: one key in several unique modes, one enqueue each (with `done`, the first holder is
        claimed and succeeded in between): each index admits its own holder, and a duplicate names the
        newest holder *in the index it conflicts with*."""
        for i, mode in enumerate(modes):
            window = 60 if mode == "window" else None
            self.both(
                ops.Enqueue(
                    self.now, (ops.JobSpec("k", "echo", unique_key="k3", unique_mode=mode, unique_window=window),)
                )
            )
            if done and i == 0:
                claimed = self.both(w.Claim(self.now, "k", "n1", 1, timedelta(seconds=30), OPTS["plain"]))
                for job in claimed.jobs:
                    self.both(w.Ack(self.now, job.id, job.attempt, w.Succeed(None)))

    @rule(
        which=st.integers(0, 2),
        ignore=st.sampled_from([(), ("cancelled",), ("failed", "cancelled")]),
        claim_first=st.booleans(),
        retry=st.booleans(),
        prune=st.booleans(),
    )
    def cancel_in_workflow(
        self, which: int, ignore: tuple[str, ...], claim_first: bool, retry: bool, prune: bool
    ) -> None:
        """§8.6 + §8.3: a chain m0 <- m1 <- m2 (each tolerating `ignore`); member `which` is cancelled
        (with `claim_first`, the root is running first: a cancel request), then optionally retried — the
        cancel settles the workflow (dooms or releases dependents), the retry re-holds and re-settles."""
        run = f"cw{self.steps}"
        members = (
            WorkflowMember("m0", ops.JobSpec("c", "echo")),
            WorkflowMember("m1", ops.JobSpec("c", "echo"), ("m0",), ignore),
            WorkflowMember("m2", ops.JobSpec("c", "echo"), ("m1",), ignore),
        )
        result = self.both(ops.EnqueueWorkflow(self.now, run, members))
        if not isinstance(result, ops.WorkflowEnqueued):
            return
        ids = dict(result.ids)
        if claim_first:
            self.both(w.Claim(self.now, "c", "n1", 1, timedelta(seconds=30), OPTS["plain"]))
        self.both(ops.Cancel(self.now, ids[f"m{which}"]))
        if retry:
            self.both(ops.Retry(self.now, ids[f"m{which}"]))
        if prune:  # §8.7: two days on, terminal members of a workflow that still has live ones are kept
            self.now += timedelta(days=2)
            self.both(w.Prune(self.now, {"succeeded": 0, "failed": 0, "cancelled": 0}, None, 10))

    @rule(
        max_attempts=st.integers(1, 2),
        requested=st.booleans(),
        outcome=st.sampled_from(["fail", "fail-with-retry", "cancel-self"]),
    )
    def finish_then_retry(self, max_attempts: int, requested: bool, outcome: str) -> None:
        """§7 + §8.6: a running job (with `requested`, an operator's cancel request first: CancelRequested)
        ends by a Fail (no retry time, or one that applies only with attempts left) or a cooperative
        CancelSelf; the operator retries it (max_attempts = GREATEST(max_attempts, attempt + 1),
        cancel_requested cleared) and it is claimed again."""
        self.both(ops.Enqueue(self.now, (ops.JobSpec("f", "echo", max_attempts=max_attempts),)))
        claimed = self.both(w.Claim(self.now, "f", "n1", 1, timedelta(seconds=30), OPTS["plain"]))
        for job in claimed.jobs:
            if requested:
                self.both(ops.Cancel(self.now, job.id))
            done: w.Outcome = {  # type: ignore[assignment]  # the dict's values are all outcomes
                "fail": w.Fail("boom", "detail", None),
                "fail-with-retry": w.Fail("boom", None, self.now + timedelta(seconds=1)),
                "cancel-self": w.CancelSelf(),
            }[outcome]
            self.both(w.Ack(self.now, job.id, job.attempt, done))
            self.both(ops.Retry(self.now, job.id))
        self.both(w.Claim(self.now + timedelta(seconds=1), "f", "n2", 1, timedelta(seconds=30), OPTS["plain"]))

    @rule(n=st.integers(1, 2), end=st.sampled_from(["succeed", "fail", "cancel"]))
    def children_finish(self, n: int, end: str) -> None:
        """§8.4 + §7: a parent spawns children; each child ends (acked, or cancelled by the operator),
        and every terminal write delivers $children to job:<parent> — unconditionally (R1)."""
        self.both(ops.Enqueue(self.now, (ops.JobSpec("s", "echo"),)))
        parents = self.both(w.Claim(self.now, "s", "n1", 1, timedelta(seconds=30), OPTS["plain"]))
        for parent in parents.jobs:
            spawned = self.both(
                w.Spawn(self.now, parent.id, "kids", tuple(ops.JobSpec("sc", "echo") for _ in range(n)))
            )
            if end == "cancel":
                for child in getattr(spawned, "child_ids", ()):
                    self.both(ops.Cancel(self.now, child))
                continue
            kids = self.both(w.Claim(self.now, "sc", "n2", n, timedelta(seconds=30), OPTS["plain"]))
            for kid in kids.jobs:
                outcome = w.Succeed({"kid": kid.id}) if end == "succeed" else w.Fail("kid", None, None)
                self.both(w.Ack(self.now, kid.id, kid.attempt, outcome))

    @rule(
        scope=st.sampled_from(["s1", "job:1"]),
        parked=st.sampled_from(["go", "stop"]),
        sent=st.sampled_from(["go", "stop"]),
    )
    def signal_after_park(self, scope: str, parked: str, sent: str) -> None:
        """§8.1 + §7: a job parks on (scope, parked); a signal (scope, sent) wakes it only when the names
        match — and the job's own scope is job:<id>."""
        self.both(ops.Enqueue(self.now, (ops.JobSpec("p", "echo"),)))
        claimed = self.both(w.Claim(self.now, "p", "n1", 1, timedelta(seconds=30), OPTS["plain"]))
        for job in claimed.jobs:
            self.both(w.ParkAwait(self.now, job.id, job.attempt, scope, parked, None))
        self.both(ops.DeliverSignal(self.now, scope, sent, {"sent": sent}))

    @precondition(lambda self: self.pg.supports_transactional_enqueue)
    @rule(specs=st.lists(job_specs(), min_size=1, max_size=2), commit=st.booleans())
    def transactional_enqueue(self, specs: list[ops.JobSpec], commit: bool) -> None:
        """§5.1: an enqueue on the caller's transaction (the adapter's, with an application row in it),
        then commit or rollback: the jobs and the row land together or not at all. A rollback still
        consumes the ids (a sequence is not transactional), which the model is told."""
        store: SubprocessStore = self.pg  # type: ignore[assignment]
        op = ops.Enqueue(self.now, tuple(specs))
        PROGRAM.append({"op": "begin"})
        PROGRAM.append({**encode_op(op), "tx": True})
        PROGRAM.append({"op": "commit" if commit else "rollback"})
        before = self.model.state
        expected = _outcome(lambda: self.model.apply(op))
        with store.caller_connection() as tx:
            actual = _outcome(lambda: store.apply(op, conn=tx))
            tx.commit() if commit else tx.rollback()
        if expected != actual:
            raise Divergence(f"transactional Enqueue results differ:\n    model: {expected}\n    sdk:   {actual}")
        if not commit:  # nothing happened, but the ids are gone
            self.model.state = replace(before, next_id=self.model.state.next_id)
            self.model.history.pop()
        state = snapshot(self.conn)
        for table in TABLES:
            mine, theirs = getattr(self.model.state, table), getattr(state, table)
            if mine != theirs:
                raise Divergence(
                    f"after transactional Enqueue ({'commit' if commit else 'rollback'}): table {table} differs:\n{first_difference(mine, theirs)}"
                )
        self.steps += 1


def profile(examples: int, steps: int, *, derandomize: bool = True) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=derandomize,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        print_blob=False,
        report_multiple_bugs=False,
    )


@dataclass
class MachineRun:
    examples: int
    steps: int
    seconds: float
    judged: Counter[str]
    assisted: Counter[str]
    error: BaseException | None
    program: list[dict[str, Any]]
    printed: str  # Hypothesis's replayable rule program (on failure)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def length(self) -> int:
        """The shrunk program's length in vocabulary operations (not counting begin/commit/rollback
        or the harness's own row writes)."""
        return sum(1 for p in self.program if "args" in p)

    def report(self) -> str:
        judged = sum(self.judged.values())
        assisted = sum(self.assisted.values())
        head = (
            f"state machine over the adapter: {self.examples} examples, {self.steps} compared steps in {self.seconds:.1f}s; "
            f"{judged} operations answered by the SDK ({len(self.judged)} kinds), {assisted} by the reference"
        )
        if self.error is None:
            return head + "\nPASSED: every result and every snapshot agreed with the model"
        lines = [
            head,
            f"FAILED: {self.error}",
            "",
            f"shortest program ({self.length} operations, as sent to the adapter):",
        ]
        lines += ["  " + json.dumps(p, separators=(",", ":")) for p in self.program]
        if self.printed:
            lines += [
                "",
                "replayable rule program (python -m properties.sdk --adapter ... --replay FILE):",
                self.printed,
            ]
        return "\n".join(lines)


def run_machine(
    adapter: AdapterProcess,
    url: str,
    *,
    examples: int = 50,
    steps: int = 30,
    derandomize: bool = True,
    shrink_seconds: int | None = None,
) -> MachineRun:
    runs: list[int] = []
    printed: list[str] = []

    class Machine(AdapterMachine):
        def teardown(self) -> None:
            runs.append(self.steps)
            super().teardown()

    Machine.__name__ = Machine.__qualname__ = "AdapterMachine"
    error: BaseException | None = None
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn, PgStore(url, pool_size=2) as reference:
        configure_connection(conn)
        reset(conn)
        store = SubprocessStore(adapter, conn, reference)
        TARGET.update(store=store, conn=conn, adapter=adapter)
        # Hypothesis stops shrinking after MAX_SHRINKING_SECONDS (300); a mutant matrix bounds it lower
        # (the shrunk program's length is reported either way).
        limit = engine.MAX_SHRINKING_SECONDS
        if shrink_seconds is not None:
            engine.MAX_SHRINKING_SECONDS = shrink_seconds
        try:
            run_state_machine_as_test(Machine, settings=profile(examples, steps, derandomize=derandomize))
        except Exception as exc:  # noqa: BLE001 - reported
            error = exc
            notes = getattr(exc, "__notes__", [])
            printed = [n for n in notes if "state = " in n or n.startswith("state.")]
        finally:
            engine.MAX_SHRINKING_SECONDS = limit
            TARGET.clear()
            store.close()
    return MachineRun(
        len(runs),
        sum(runs),
        time.perf_counter() - started,
        store.judged,
        store.assisted,
        error,
        list(PROGRAM),
        "\n".join(printed),
    )


class _Replaying(AdapterMachine):
    def teardown(self) -> None:
        """Outside Hypothesis: no target() scores."""


def replay(adapter: AdapterProcess, url: str, code: str) -> BaseException | None:
    """Run a rule program Hypothesis printed (state = AdapterMachine() ... state.teardown())."""
    with psycopg.connect(url, autocommit=True) as conn, PgStore(url, pool_size=2) as reference:
        configure_connection(conn)
        reset(conn)
        store = SubprocessStore(adapter, conn, reference)
        TARGET.update(store=store, conn=conn, adapter=adapter)
        try:
            namespace = {**vars(stateful), **vars(ops), **vars(w), "datetime": datetime_module}
            exec(compile(code, "<replay>", "exec"), {**namespace, "AdapterMachine": _Replaying})
        except Exception as exc:  # noqa: BLE001 - reported
            return exc
        finally:
            TARGET.clear()
    return None


__all__ = ["AdapterMachine", "MachineRun", "first_difference", "replay", "run_machine"]

_ = timedelta
