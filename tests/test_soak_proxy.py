"""The soak's fault-injecting proxy (soak/faults/proxy.py) and the client-side call deadline (impl/store/deadline.py)
on a real PostgreSQL: partition, stall, single-connection stall, latency, heal, retarget — and a worker
whose renewal connection stalls keeps its other leases (spec/belay-operations.txt §6, issue 13)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from impl.store import PgStore
from impl.store.deadline import Watchdog, connection_defaults
from model import ops
from model import worker_ops as w
from soak.faults.proxy import Proxy

WAIT = 20.0


def _tcp(url: str) -> tuple[str, int]:
    d = conninfo_to_dict(url)
    host = d.get("host") or d.get("hostaddr") or ""
    if not host or host.startswith("/"):
        pytest.fail(f"the test database is not reachable over TCP ({host!r}); the proxy forwards TCP only")
    return host, int(d.get("port") or 5432)


@pytest.fixture
def proxy(db_url: str):
    p = Proxy(*_tcp(db_url))
    yield p
    p.close()


def _via(proxy: Proxy, db_url: str, name: str) -> str:
    d = conninfo_to_dict(db_url)
    d.update(host="127.0.0.1", port=str(proxy.listen(name)))
    d.pop("hostaddr", None)
    return make_conninfo(**d)


def _wait_until(cond, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_a_partition_cuts_open_connections_and_refuses_new_ones_until_healed(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    c = psycopg.connect(url, autocommit=True, connect_timeout=5)
    assert c.execute("SELECT 1").fetchone() == (1,)
    assert proxy.partition("w1") == 1
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
    assert proxy.stats()["w1"]["refused"] >= 1
    proxy.heal("w1")
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as c2:
        assert c2.execute("SELECT 2").fetchone() == (2,)


def test_a_partition_of_one_route_leaves_the_others_working(proxy, db_url):
    a, b = _via(proxy, db_url, "w1"), _via(proxy, db_url, "w2")
    with psycopg.connect(b, autocommit=True, connect_timeout=5) as cb:
        proxy.partition("w1")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(a, connect_timeout=5)
        assert cb.execute("SELECT 1").fetchone() == (1,)


def test_a_stalled_query_hangs_until_the_heal_then_completes(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    c = psycopg.connect(url, autocommit=True, connect_timeout=5)
    proxy.stall("w1")
    done = threading.Event()
    out: list = []
    t = threading.Thread(target=lambda: (out.append(c.execute("SELECT 42").fetchone()), done.set()), daemon=True)
    t.start()
    assert not done.wait(0.5), "a stalled connection answered"
    proxy.heal("w1")
    assert done.wait(WAIT)
    assert out == [(42,)]
    c.close()


def test_a_new_connection_during_a_stall_hangs_until_its_connect_timeout(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    proxy.stall("w1")
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    assert time.monotonic() - t0 >= 1.5


def test_stall_one_freezes_a_single_connection_of_the_route(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    c1 = psycopg.connect(url, autocommit=True, connect_timeout=5)
    c2 = psycopg.connect(url, autocommit=True, connect_timeout=5)
    assert proxy.stall_one("w1")
    results: dict[int, object] = {}
    threads = [
        threading.Thread(target=lambda i=i, c=c: results.__setitem__(i, c.execute("SELECT 1").fetchone()), daemon=True)
        for i, c in enumerate((c1, c2))
    ]
    for t in threads:
        t.start()
    _wait_until(lambda: len(results) == 1)
    assert not proxy.stats()["w1"]["stalled"]  # the route itself still flows
    proxy.heal("w1")
    _wait_until(lambda: len(results) == 2)
    c1.close()
    c2.close()


def test_latency_delays_every_round_trip(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as c:
        proxy.set_latency("w1", 0.2)
        t0 = time.monotonic()
        c.execute("SELECT 1").fetchone()
        assert time.monotonic() - t0 >= 0.4  # request and response each delayed
        proxy.heal("w1")


def test_retarget_resets_connections_and_sends_new_ones_to_the_new_server(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    c = psycopg.connect(url, autocommit=True, connect_timeout=5)
    host, port = _tcp(db_url)
    proxy.retarget(host, port)
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as c2:
        assert c2.execute("SELECT 1").fetchone() == (1,)


def test_the_watchdog_cuts_a_call_stalled_past_its_deadline(proxy, db_url):
    url = _via(proxy, db_url, "w1")
    dog = Watchdog(0.5)
    c = psycopg.connect(url, autocommit=True, connect_timeout=5)
    proxy.stall("w1")
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError), dog.guard(c):
        c.execute("SELECT 1")
    assert time.monotonic() - t0 < 5
    assert dog.cut == 1
    dog.close()


def test_connection_defaults_add_timeouts_and_keepalives_but_never_override_the_url():
    d = connection_defaults("postgresql://u@h/db?connect_timeout=9")
    assert "connect_timeout" not in d
    assert d["keepalives"] == 1 and d["keepalives_idle"] > 0 and d["tcp_user_timeout"] > 0


def _claim_two(store: PgStore, now, node: str, ttl: timedelta) -> list[int]:
    store.apply(ops.Enqueue(now, (ops.JobSpec("q", "k", {}), ops.JobSpec("q", "k", {}))))
    claimed = store.apply(w.Claim(now, "q", node, 2, ttl))
    return sorted(j.id for j in claimed.jobs)


@pytest.mark.parametrize("guarded", [True, False], ids=["with_call_deadline", "without_call_deadline_broken"])
def test_a_stalled_connection_does_not_freeze_lease_renewal(proxy, db_url, now, guarded):
    """The renewer's connection stalls (a blackhole); with the call deadline the renewal is cut after
    1 s and retried on a fresh connection, so the node's leases are extended; without it (the broken
    variant, what a worker that sets no client-side deadline does) the renewal hangs for the whole stall."""
    url = _via(proxy, db_url, "w1")
    store = PgStore(url, pool_size=1, notify=False, call_timeout=1.0 if guarded else None)
    try:
        ids = _claim_two(store, now, "n1", timedelta(seconds=10))
        assert len(ids) == 2
        assert proxy.stats()["w1"]["open"] == 1  # pool_size=1: the renewal must use the stalled connection
        assert proxy.stall_one("w1")
        done = threading.Event()
        result: list = []

        def renew() -> None:
            from impl.runtime.faults import with_retries

            result.append(
                with_retries(
                    lambda: store.apply(
                        w.Renew(now + timedelta(seconds=3), "n1", tuple(ids), now + timedelta(seconds=13))
                    ),
                    what="renew",
                )
            )
            done.set()

        threading.Thread(target=renew, daemon=True).start()
        renewed = done.wait(WAIT if guarded else 4)  # the stall lasts until the heal below either way
        proxy.heal("w1")
        if guarded:
            assert renewed, "renewal stayed frozen behind a stalled connection"
            assert sorted(result[0].kept) == ids
        else:
            assert not renewed, "the unguarded renewal should have hung on the stalled connection"
            assert done.wait(WAIT)
    finally:
        store.close()


@pytest.mark.parametrize("guarded", [True, False], ids=["with_idle_in_transaction_timeout", "without_it_broken"])
def test_a_transaction_stalled_while_holding_a_job_row_does_not_block_the_nodes_renewal(proxy, db_url, now, guarded):
    """One connection of the node stalls after locking a job's row (its next statement is held by the
    path). The client's deadline cuts its socket, but the server keeps the transaction and the lock;
    the node's one-statement renewal of all its leases then waits on that row. With the session
    `idle_in_transaction_session_timeout` the worker sets (connection_defaults) the server ends the
    stuck transaction and the renewal succeeds; without it (broken) the renewal is still blocked."""
    store = PgStore(db_url, pool_size=2, notify=False, call_timeout=1.0)  # the renewer, on a healthy path
    stuck_url = _via(proxy, db_url, "w1")
    stuck = psycopg.connect(stuck_url, **connection_defaults(stuck_url, idle_in_transaction=1.0 if guarded else None))
    try:
        ids = _claim_two(store, now, "n1", timedelta(seconds=10))
        stuck.execute("SELECT 1 FROM belay_jobs WHERE id = %s FOR UPDATE", (ids[0],))  # a transaction, row locked
        assert proxy.stall_one("w1")

        def next_statement() -> None:  # sent into the stall: the server sees it only after the heal
            try:
                stuck.execute("SELECT 1")
                stuck.rollback()  # after the heal: the transaction ends, the lock goes
            except psycopg.Error:
                pass

        threading.Thread(target=next_statement, daemon=True).start()
        done = threading.Event()
        result: list = []

        def renew() -> None:
            from impl.runtime.faults import with_retries

            op = w.Renew(now + timedelta(seconds=3), "n1", tuple(ids), now + timedelta(seconds=13))
            result.append(with_retries(lambda: store.apply(op), what="renew"))
            done.set()

        threading.Thread(target=renew, daemon=True).start()
        renewed = done.wait(8)
        proxy.heal("w1")
        if guarded:
            assert renewed, "the renewal stayed blocked behind the stalled transaction's row lock"
            assert sorted(result[0].kept) == ids
        else:
            assert not renewed, "without the timeout the renewal should wait on the stalled transaction's lock"
            assert done.wait(WAIT)
    finally:
        stuck.close()
        store.close()
