"""The Client SDK's transactional enqueue as a property (wire contract §5.1, §9.2).

Hypothesis draws a caller's transaction on its own connection: enqueues, enqueue-manys and workflows
(with held members), nested savepoints that are released or rolled back, SQL errors inside a savepoint
(rolled back to it) or outside one (the whole transaction is aborted and rolled back), and an ending —
commit, rollback, or an exception out of the `with conn.transaction()` block. Then: a job exists if and
only if every transaction scope it was enqueued in committed, and the wake-up notification for a queue
(§9.2 `{"t":"p","q":...}`) is delivered if and only if a ready job of that queue committed. A sentinel
NOTIFY sent after the caller's transaction ended bounds the wait: notifications arrive in commit order.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.client import Client
from impl.store.pgrows import channel_name
from model.ops import JobSpec, WorkflowMember

EXAMPLES = int(os.environ.get("BELAY_CLIENT_TX_EXAMPLES", "30"))


# --- the caller's transaction, as data ------------------------------------------------------------------


@dataclass
class Enqueue:
    many: int  # 0: client.enqueue; n >= 1: client.enqueue_many of n jobs
    queue: int


@dataclass
class Workflow:
    queue: int  # a root member (ready) and a dependent (held)


@dataclass
class SqlError:
    pass


@dataclass
class Savepoint:
    body: list = field(default_factory=list)
    rollback: bool = False


ACTIONS = st.deferred(
    lambda: st.one_of(
        st.builds(Enqueue, st.integers(0, 3), st.integers(0, 3)),
        st.builds(Workflow, st.integers(0, 3)),
        st.just(SqlError()),
        st.builds(Savepoint, st.lists(ACTIONS, max_size=3), st.booleans()),
    )
)
ENDINGS = st.sampled_from(["commit", "rollback", "raise"])


class CallerError(Exception):
    """The caller's own code failing mid-transaction."""


@dataclass
class Outcome:
    jobs: dict[str, int] = field(default_factory=dict)  # tag → queue index, for jobs that must exist
    ready_queues: set[int] = field(default_factory=set)  # queues whose wake-up must be delivered


def run_actions(
    client: Client,
    conn: psycopg.Connection,
    actions: list,
    run: str,
    committed: bool,
    expected: Outcome,
    tags: list[str],
) -> None:
    """Perform `actions` inside the caller's open transaction; record what a commit would keep."""
    for action in actions:
        if isinstance(action, Enqueue):
            tag = f"{run}-{len(tags)}"
            queue = f"{run}q{action.queue}"
            if action.many == 0:
                client.enqueue(queue, "w", {"tag": tag}, conn=conn)
                new = [tag]
            else:
                new = [f"{tag}.{i}" for i in range(action.many)]
                client.enqueue_many([JobSpec(queue, "w", {"tag": t}) for t in new], conn=conn)
            tags.extend(new)
            if committed:
                expected.jobs.update({t: action.queue for t in new})
                expected.ready_queues.add(action.queue)
        elif isinstance(action, Workflow):
            tag = f"{run}-{len(tags)}"
            queue = f"{run}q{action.queue}"
            client.enqueue_workflow(
                f"wf-{tag}",
                [
                    WorkflowMember("root", JobSpec(queue, "w", {"tag": f"{tag}.root"})),
                    WorkflowMember("next", JobSpec(queue, "w", {"tag": f"{tag}.next"}), deps=("root",)),
                ],
                conn=conn,
            )
            tags.append(tag)
            if committed:
                expected.jobs.update({f"{tag}.root": action.queue, f"{tag}.next": action.queue})
                expected.ready_queues.add(action.queue)
        elif isinstance(action, SqlError):
            with conn.transaction():  # a savepoint: the error rolls back to it, the caller carries on
                with pytest.raises(psycopg.errors.DivisionByZero):
                    conn.execute("SELECT 1 / 0")
                raise psycopg.Rollback()
        else:
            with conn.transaction():
                run_actions(client, conn, action.body, run, committed and not action.rollback, expected, tags)
                if action.rollback:
                    raise psycopg.Rollback()


def notified_queues(listener: psycopg.Connection, channel: str, run: str, sentinel: str) -> set[int]:
    seen: set[int] = set()
    for note in listener.notifies(timeout=10):
        if note.payload == sentinel:
            return seen
        data = json.loads(note.payload)
        if data.get("t") == "p" and data["q"].startswith(f"{run}q"):
            seen.add(int(data["q"][len(run) + 1 :]))
    raise AssertionError("the sentinel notification never arrived")


@pytest.fixture
def caller(db_url):
    with (
        Client(db_url) as client,
        psycopg.connect(db_url) as conn,
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as pg,
    ):
        channel = channel_name(listener.info.dbname)
        listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        yield client, conn, listener, pg, channel


def test_a_transactionally_enqueued_job_exists_and_wakes_workers_iff_the_callers_transaction_committed(caller):
    client, conn, listener, pg, channel = caller
    assert client.store.notify, "the wake-up accelerator must be on for this property"

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.lists(ACTIONS, max_size=5), ENDINGS, st.booleans())
    def check(actions: list, ending: str, abort_outside_savepoint: bool) -> None:
        run = "r" + uuid.uuid4().hex[:10]
        expected, tags = Outcome(), []
        try:
            with conn.transaction():
                run_actions(client, conn, actions, run, ending == "commit", expected, tags)
                if ending == "commit" and abort_outside_savepoint and actions:
                    # An error outside any savepoint aborts the transaction: nothing may survive it.
                    expected.jobs.clear()
                    expected.ready_queues.clear()
                    conn.execute("SELECT 1 / 0")
                if ending == "rollback":
                    raise psycopg.Rollback()
                if ending == "raise":
                    raise CallerError("the caller's code failed mid-transaction")
        except (CallerError, psycopg.errors.DivisionByZero):
            pass
        sentinel = f"sentinel-{run}"
        pg.execute("SELECT pg_notify(%s, %s)", (channel, sentinel))
        rows = pg.execute(
            "SELECT input->>'tag', queue FROM belay_jobs WHERE input->>'tag' LIKE %s", (f"{run}-%",)
        ).fetchall()
        found = {tag: int(queue[len(run) + 1 :]) for tag, queue in rows}
        assert found == expected.jobs, (
            f"jobs present {sorted(found)} but the committed scopes hold {sorted(expected.jobs)} "
            f"(actions {actions}, ending {ending}, abort {abort_outside_savepoint})"
        )
        assert notified_queues(listener, channel, run, sentinel) == expected.ready_queues, (
            f"wake-ups delivered ≠ committed ready queues {expected.ready_queues} (actions {actions}, ending {ending})"
        )

    check()
