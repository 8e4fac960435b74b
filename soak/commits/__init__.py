"""History checking: every committed state of a soak, not only the last one (issue 12).

The soak's database runs with `wal_level = logical`; `capture` reads every committed change of the
Belay tables through a logical replication slot (the `pgoutput` plugin, decoded by `pgoutput`), in
commit order with each transaction's commit LSN and time. `replay` applies the history transaction by
transaction to the model's `State`, checks every belay_jobs row change against the §4 transition
relation of `model.transitions`, and evaluates the §11 state predicates of `model.invariants` after
each commit. `timeline` draws per-job attempt lanes for report.html.

Modules:
  pgoutput — a decoder of the documented pgoutput message format (protocol version 1)
  capture  — publication + slot set-up, a polling thread, LSN de-duplication, guaranteed slot drop
  replay   — replay, transition checks, per-commit invariants, attribution, the verdict
  timeline — the per-job picture
"""
