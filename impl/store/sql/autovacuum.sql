-- The jobs table's autovacuum storage parameters (issue 54; docs/decisions.md "Autovacuum storage parameters
-- on belay_jobs", docs/benchmarks.md "Scale"). Not a migration: storage parameters change no table, column,
-- index or name (§1: additive; §3's names untouched), so belay_meta.version stays 3 — the revision numbers
-- belong to the contract. impl/store/migrate.py applies this after the migrations, and only while belay_jobs
-- has no autovacuum_* storage parameter of its own: an operator's ALTER TABLE belay_jobs SET (...) is never
-- overwritten.
-- A claim moves its row out of the partial claim indexes (state 'ready' → 'running'), but the old entry
-- stays in the index until VACUUM, and every claim walks the entries of the jobs claimed since the last
-- one: about one leaf page per 165 jobs. PostgreSQL's default trigger (50 + 20 % of the table's rows dead)
-- waits longer the more rows the table keeps — retained finished jobs included — so the claim's cost grew
-- with the table. An absolute threshold vacuums the jobs table at every autovacuum round (the server's
-- autovacuum_naptime, 1 min by default) once 5,000 row versions are dead, whatever its size, unthrottled.
-- vacuum_index_cleanup = on: by default (auto) a VACUUM skips the index passes when under 2 % of the heap's
-- pages hold dead rows — the usual case on a large table of retained jobs — and the claim index then keeps
-- every claimed row's entry; with it on, autovacuum (and any plain VACUUM) removes them.
ALTER TABLE {jobs} SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_index_cleanup = on
);
