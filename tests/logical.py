"""Fixtures of the committed-history tests (test_history_capture, test_refine, test_capture_crash,
test_spill): an embedded cluster with wal_level = logical per test module (the session's server may not
allow logical decoding, and some of these tests crash-restart their cluster), and a fresh migrated
database on it per test, dropped with its replication slots afterwards.

    from tests.logical import logical_cluster, logical_url  # noqa: F401  (the fixtures `cluster` and `url`)

(Registered under the names `cluster` and `url`, imported under others: a test's `url` parameter then
shadows no imported name.)
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from impl.provision import ClusterConfig, EmbeddedCluster
from impl.store.migrate import migrate


@pytest.fixture(scope="module", name="cluster")
def logical_cluster() -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(ClusterConfig(extra_settings={"wal_level": "logical"})).start()
    yield c
    c.destroy()


@pytest.fixture(name="url")
def logical_url(cluster: EmbeddedCluster) -> Iterator[str]:
    name = f"l_{secrets.token_hex(4)}"
    with psycopg.connect(cluster.url, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    u = cluster.url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(u, autocommit=True) as c:
        migrate(c)
    yield u
    with psycopg.connect(cluster.url, autocommit=True) as c:
        c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s", (name,))
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
