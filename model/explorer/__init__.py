"""The race explorer: every interleaving of the contract's SQL statements, searched exhaustively.

Concurrent actors (workers, operators, sweepers) run small programs whose steps are the statements of
a contract operation — in the order impl/store/client_store.py and impl/store/worker_store.py issue them — against a tiny
database with READ COMMITTED visibility, row locks, advisory transaction locks and commit points
(model/explorer/db.py). A breadth-first search with visited-state hashing (model/explorer/search.py)
checks named safety invariants in every reachable state, deadlock freedom in every state, and liveness
("every awaiter with a delivered signal eventually runs") over the state graph as a networkx DiGraph.
It reports the states explored and, when a property fails, the shortest counterexample trace.

    from model.explorer import explore, scenario, format_result
    result = explore(scenario("r1", "broken", size=2))
    result.verdict                     # "invalid"
    print(format_result(result))       # the shortest trace: both last children count 1, no one signals

    explore(s, clock=perf_counter).states_per_second   # the caller owns the clock (bench/explorer.py)

Scenarios (model/explorer/scenarios/), each a correct and a broken variant:
    r1          count-gated `$children` (broken) vs unconditional signal + re-verify on wake (§11 R1)
    r2          await-children without (broken) / with the reconciler backstop (§8.4, §11 R2)
    park_wake   await park vs signal delivery without (broken) / with the scope lock (§7, §8.1)
    lock_order  workflow lock → scope lock (correct) vs a path taking them in reverse (deadlock, §7)
    settlement  operator retry of a dependent straight to ready (broken) vs re-hold + settle (§8.6)
    cancel_ack  a finding: impl's Cancel of a running workflow member vs its ack (deadlock) and a fix

Pictures for the notebooks (the state graph, a counterexample as a sequence diagram) are in
model/explorer/drawing.py, which imports matplotlib only when called.

Pure like the rest of model/: no I/O, no clock, no randomness, no threads.
"""

from __future__ import annotations

from model.explorer.db import Layout, Tx, View
from model.explorer.program import Actor, Program, Statement
from model.explorer.scenarios import SIZES, catalogue, scenario, variants
from model.explorer.search import Counterexample, Invariant, Liveness, Result, Scenario, TraceStep, explore
from model.explorer.trace import format_result, format_trace, sequence

__all__ = [
    "SIZES",
    "Actor",
    "Counterexample",
    "Invariant",
    "Layout",
    "Liveness",
    "Program",
    "Result",
    "Scenario",
    "Statement",
    "TraceStep",
    "Tx",
    "View",
    "catalogue",
    "explore",
    "format_result",
    "format_trace",
    "scenario",
    "sequence",
    "variants",
]
