"""The pg_notify accelerator's listener (impl.store.pgrows.listen_for_pokes) stops listening while nothing could
use a poke, and polls when it listens again (issue 33: a busy node received every job's result notification
on the channel pokes share, 10-15 µs of its CPU per job).

Observed from outside the listener: what its connection last ran (pg_stat_activity), and which payloads
reached the callback."""

from __future__ import annotations

import threading

import psycopg

from impl.client import Client
from impl.runtime import QueueConfig, Worker, WorkerConfig
from impl.store.pgrows import channel_name, listen_for_pokes
from impl.testing import wait_for
from impl.worker import Registry
from model.queues import QueueOpts


def listener_statement(conn: psycopg.Connection) -> str | None:
    """The last statement of the session that LISTENs or UNLISTENs on this database (None: none yet)."""
    row = conn.execute(
        "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND (query LIKE 'LISTEN %' OR query LIKE 'UNLISTEN %') ORDER BY backend_start DESC LIMIT 1"
    ).fetchone()
    return None if row is None else row[0].split()[0]


def test_the_listener_unlistens_while_unwanted_and_polls_when_it_listens_again(db_url):
    wanted, want, stopped = [True], threading.Event(), threading.Event()
    seen: list[str | None] = []
    thread = threading.Thread(
        target=listen_for_pokes,
        args=(db_url, "public", stopped, None, "test listener"),
        kwargs={"on_payload": seen.append, "wanted": lambda: wanted[0], "want": want},
        daemon=True,
    )
    thread.start()
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            channel = channel_name(conn.info.dbname, "public")

            def notify(payload: str) -> None:
                conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

            wait_for(lambda: seen == [None], 20, "the first LISTEN's poll")
            notify("a")
            wait_for(lambda: "a" in seen, 20, "a poke while wanted")
            wanted[0] = False
            notify("b")  # read, then the listener finds itself unwanted
            wait_for(lambda: listener_statement(conn) == "UNLISTEN", 20, "the UNLISTEN")
            notify("c")  # nobody listens: never delivered
            wanted[0] = True
            want.set()
            wait_for(lambda: listener_statement(conn) == "LISTEN" and seen.count(None) == 2, 20, "the re-LISTEN's poll")
            notify("d")
            wait_for(lambda: "d" in seen, 20, "a poke after the re-LISTEN")
    finally:
        stopped.set()
        want.set()
        thread.join(10)
    assert seen == [None, "a", "b", None, "d"]


def test_a_node_whose_slots_are_all_taken_stops_listening_and_listens_again_when_one_frees(db_url):
    gate, started = threading.Event(), threading.Event()
    reg = Registry()

    @reg.kind("hold", queue="lq")
    def hold(ctx, _input):
        started.set()
        gate.wait(30)
        return None

    @reg.kind("quick", queue="lq")
    def quick(ctx, _input):
        return None

    config = WorkerConfig(
        node="listener-node", queues=(QueueConfig("lq", QueueOpts(1, 1)),), notify=True, sweep_interval=3600
    )
    worker = Worker(db_url, reg, config, telemetry=()).start()
    try:
        with psycopg.connect(db_url, autocommit=True) as conn, Client(db_url) as client:
            wait_for(lambda: listener_statement(conn) == "LISTEN", 20, "the idle node to listen")
            held = client.enqueue("lq", "hold").id
            wait_for(started.is_set, 20, "the one slot to be taken")
            wait_for(lambda: listener_statement(conn) == "UNLISTEN", 20, "the saturated node to stop listening")
            gate.set()
            client.await_result(held, timeout=20)
            wait_for(lambda: listener_statement(conn) == "LISTEN", 20, "the node to listen again once its slot freed")
            job = client.enqueue("lq", "quick").id  # found through the poke (or the poll): the node is idle
            assert client.await_result(job, timeout=20).state == "succeeded"
    finally:
        gate.set()
        worker.stop(grace=5)


def test_a_poke_listener_reads_every_poke_of_a_burst_skips_results_and_listens_again_after_losing_its_backend(
    db_url,
):
    """A burst sent in one transaction: every poke in it is delivered, in order, decoded (a queue name outside
    ASCII included), and the result notifications between them never reach on_poke; when its backend is
    terminated the listener reconnects, LISTENs again and polls (on_poke(None)) before taking pokes again."""
    seen: list[str | None] = []
    stopped = threading.Event()
    thread = threading.Thread(
        target=listen_for_pokes, args=(db_url, "public", stopped, seen.append, "test listener"), daemon=True
    )
    thread.start()
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            channel = channel_name(conn.info.dbname, "public")
            wait_for(lambda: seen == [None], 20, "the first LISTEN's poll")
            queues = [f"q{i}" for i in range(50)] + ["ökö"]
            with conn.transaction():
                for i, queue in enumerate(queues):
                    conn.execute("SELECT pg_notify(%s, %s)", (channel, f'{{"t":"r","id":{i}}}'))
                    conn.execute("SELECT pg_notify(%s, %s)", (channel, f'{{"t":"p","q":"{queue}"}}'))
            wait_for(lambda: len(seen) == 1 + len(queues), 20, "every poke of the burst")
            assert seen == [None, *queues]
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'"
            ).fetchall()
            assert killed == [(True,)]
            wait_for(lambda: seen.count(None) == 2, 20, "the reconnect's poll")
            wait_for(lambda: listener_statement(conn) == "LISTEN", 20, "the new LISTEN")
            conn.execute("SELECT pg_notify(%s, %s)", (channel, '{"t":"p","q":"after"}'))
            wait_for(lambda: seen[-1] == "after", 20, "a poke after the reconnect")
    finally:
        stopped.set()
        thread.join(10)
