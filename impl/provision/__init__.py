"""Provision a PostgreSQL for Belay with no setup by the user (README, "Where PostgreSQL comes from").

    from impl.provision import provision, redact
    with provision() as db:                 # BELAY_DATABASE_URL, else Docker, else an embedded cluster
        print(db.kind, redact(db.url))

The package, bottom to top (each module imports only the ones above it; tests/test_import_graph.py):

    binaries.py    the install: finding initdb/postgres/pg_ctl, their version, running them as
                   user nobody when we are root (cache dir, a copy of the install nobody can run)
    processes.py   a cluster's processes in /proc: crash (SIGKILL postmaster and backends, wait until
                   gone), child subreaper and reaping, stale cluster dirs of dead owners
    cluster.py     `ClusterConfig`, `EmbeddedCluster`: start, stop, crash, restart, destroy; the
                   cached initdb'd template data dir; clean-up at interpreter exit
    databases.py   `provision()` and `Provisioned` (env URL, testcontainers, embedded), `docker_available`,
                   `redact()`, `TemplateDatabases` (a fresh database per test, cloned from a template)

This file only re-exports: import from `impl.provision`, not from the modules.
"""

# `__all__` is the former impl/provision.py's; the `x as x` names are re-exported too, as before the split
# (its constants, and the internals tests/test_provision.py reaches for).
from impl.provision.binaries import NOBODY_GID as NOBODY_GID
from impl.provision.binaries import NOBODY_UID as NOBODY_UID
from impl.provision.binaries import REQUIRED_BINARIES as REQUIRED_BINARIES
from impl.provision.binaries import ProvisionError, find_pg_bindir, pg_version
from impl.provision.binaries import _wheel_bindir as _wheel_bindir
from impl.provision.cluster import _LIVE as _LIVE
from impl.provision.cluster import START_TIMEOUT as START_TIMEOUT
from impl.provision.cluster import STOP_TIMEOUT as STOP_TIMEOUT
from impl.provision.cluster import ClusterConfig, EmbeddedCluster
from impl.provision.databases import Provisioned, TemplateDatabases, docker_available, provision, redact
from impl.provision.processes import _children_of as _children_of
from impl.provision.processes import _procs_with_cwd as _procs_with_cwd

__all__ = [
    "ClusterConfig",
    "EmbeddedCluster",
    "ProvisionError",
    "Provisioned",
    "TemplateDatabases",
    "docker_available",
    "find_pg_bindir",
    "pg_version",
    "provision",
    "redact",
]
