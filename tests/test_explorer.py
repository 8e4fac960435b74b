"""The race explorer (model/explorer/): its tiny database behaves like PostgreSQL under READ COMMITTED,
its search finds planted bugs and proves their fixes, and its counterexamples are the shortest there are.

Shortest is checked independently of the explorer's breadth-first search: by a depth-first enumeration
of every schedule up to one statement shorter (safety and deadlock), and by networkx's own shortest
paths over the state graph (liveness).
"""

from __future__ import annotations

import networkx as nx
import pytest

from model.explorer import (
    SIZES,
    Invariant,
    Liveness,
    Program,
    Scenario,
    Tx,
    catalogue,
    explore,
    format_result,
    format_trace,
    scenario,
    sequence,
)
from model.explorer.db import NOBODY, UNSET, Blocked, Layout, View
from model.explorer.scenarios import MODULES
from model.explorer.search import successors

CATALOGUE = catalogue()
CORRECT = [s for s in CATALOGUE if s.expect == "valid"]
BROKEN = [s for s in CATALOGUE if s.expect == "invalid"]

# (scenario, variant, size) → (kind, property, statements to the violating / first stuck state)
SHORTEST = {
    ("r1", "broken", 2): ("liveness", "i9_awaiters_eventually_run", 4),
    ("r1", "broken", 3): ("liveness", "i9_awaiters_eventually_run", 6),
    ("r1", "no_reverify", 2): ("safety", "children_done_only_when_terminal", 6),
    ("r2", "broken", 1): ("liveness", "i9_awaiters_eventually_run", 10),
    ("r2", "text_one_tx", 2): ("deadlock", "no_deadlock", 10),
    ("park_wake", "broken", 1): ("safety", "i9_no_lost_wakeup", 6),
    ("lock_order", "broken", 2): ("deadlock", "no_deadlock", 7),
    ("settlement", "broken", 1): ("safety", "i5_settlement_consistent", 5),
    ("cancel_ack", "broken", 1): ("deadlock", "no_deadlock", 3),
}


def _id(s: Scenario) -> str:
    return f"{s.key}-{s.size}"


# ---------------------------------------------------------------------------------------------------
# the catalogue


def test_every_scenario_has_a_correct_and_a_broken_variant():
    for name, module in MODULES.items():
        expects = {module.scenario(v, SIZES[name][0]).expect for v in module.VARIANTS}
        assert expects == {"valid", "invalid"}, name
    assert {"r1", "r2", "park_wake", "lock_order", "settlement"} <= set(MODULES)


@pytest.mark.parametrize("s", CORRECT, ids=_id)
def test_every_correct_scenario_exhausts_its_state_space_with_no_violation(s):
    result = explore(s)
    assert result.verdict == "valid", format_result(result)
    assert result.complete and result.counterexample is None
    assert result.states > 1 and result.transitions >= result.states - 1


@pytest.mark.parametrize("s", BROKEN, ids=_id)
def test_every_broken_scenario_yields_a_counterexample(s):
    result = explore(s)
    assert result.verdict == "invalid", result.summary()
    cx = result.counterexample
    assert cx is not None and cx.trace
    expected = SHORTEST.get((s.name, s.variant, s.size))
    if expected is not None:
        assert (cx.kind, cx.invariant, cx.length) == expected, format_result(result)


def test_the_correct_scenarios_are_small_configurations_of_two_to_five_actors():
    assert {len(s.actors) for s in CORRECT} <= {2, 3, 4, 5}
    assert min(len(s.actors) for s in CORRECT) == 2


# ---------------------------------------------------------------------------------------------------
# R1: the shortest trace


R1_TRACE = [
    ("C1", "ack_succeed", "1 row"),
    ("C1", "count_siblings", "count = 1 → not the last: no signal"),
    ("C2", "ack_succeed", "1 row"),
    ("C2", "count_siblings", "count = 1 → not the last: no signal"),
    ("C1", "commit", ""),
    ("C2", "commit", ""),
]


def test_the_r1_counterexample_is_both_last_children_counting_each_other_incomplete():
    result = explore(scenario("r1", "broken", 2))
    cx = result.counterexample
    assert [(t.actor, t.statement, t.note) for t in cx.trace] == R1_TRACE
    assert cx.stuck_from == 3  # after the second count, no schedule can wake P any more
    assert dict(cx.trace[-1].committed) == {
        "P": "awaiting",
        "C1": "succeeded",
        "C2": "succeeded",
        "sig(job:P,$children)": "absent",
    }
    text = format_trace(cx)
    assert "✗4  C2     count_siblings  count = 1 → not the last: no signal" in text
    assert "liveness violation of i9_awaiters_eventually_run" in text


def test_the_r1_trace_is_shortest_by_networkx_shortest_paths_over_the_state_graph():
    result = explore(scenario("r1", "broken", 2))
    g = result.graph(labels=False)
    done = [k for k in g if result.view(k).pc("P") == result.scenario.actors[0].end]
    can_finish = set(done)
    for k in done:
        can_finish |= nx.ancestors(g, k)
    stuck = [k for k in g if k not in can_finish]
    distance = nx.single_source_shortest_path_length(g, 0)
    assert min(distance[k] for k in stuck) == result.counterexample.length == 4


def _violates_within(s: Scenario, depth: int) -> bool:
    """An independent depth-first search over every schedule of at most `depth` statements: does one
    reach a state violating an invariant, or a lock cycle?"""
    layout = s.layout
    tx_class = Tx.of(layout)

    def bad(world: tuple) -> bool:
        view = View(layout, world)
        if any(inv.check(view) for inv in s.invariants):
            return True
        waits = {}
        for a, actor in enumerate(s.actors):
            if world[a] == actor.end:
                continue
            try:
                actor.program[world[a]].run(tx_class(world, a))
            except Blocked as b:
                if b.holder is not None:
                    waits[a] = b.holder
        for start in waits:  # a cycle in the wait-for graph
            seen, a = set(), start
            while a in waits and a not in seen:
                seen.add(a)
                a = waits[a]
            if a == start:
                return True
        return False

    def dfs(world: tuple, left: int) -> bool:
        if bad(world):
            return True
        if left == 0:
            return False
        return any(dfs(nxt, left - 1) for _, nxt, _ in successors(s, world))

    return dfs(s.initial, depth)


@pytest.mark.parametrize(
    "key", [k for k, v in SHORTEST.items() if v[0] != "liveness"], ids=lambda k: "/".join(map(str, k))
)
def test_safety_and_deadlock_counterexamples_are_the_shortest_possible(key):
    name, variant, size = key
    s = scenario(name, variant, size)
    length = explore(s).counterexample.length
    assert _violates_within(s, length)
    assert not _violates_within(s, length - 1), f"a schedule shorter than {length} statements also fails"


# ---------------------------------------------------------------------------------------------------
# the tiny database: READ COMMITTED, row locks, advisory locks, commits


def _world(rows: dict, actors=("A", "B"), locks=("k",)) -> tuple[Layout, tuple]:
    layout = Layout(actors, tuple(rows), locks)
    return layout, layout.initial(rows)


def test_a_statement_sees_committed_data_and_its_own_writes_only():
    layout, world = _world({"j": "running"})
    T = Tx.of(layout)
    a = T(world, 0)
    assert a.update(0, ("running",), "succeeded")
    assert a.read(0) == "succeeded"  # its own uncommitted write
    world = tuple(a.s)
    assert T(world, 1).read(0) == "running"  # READ COMMITTED: another transaction does not see it
    assert View(layout, world).row("j") == "running" and View(layout, world).pending("j") == "succeeded"
    a = T(world, 0)
    a.commit()
    world = tuple(a.s)
    assert T(world, 1).read(0) == "succeeded"
    assert View(layout, world).row_owner("j") is None and View(layout, world).pending("j") is UNSET


def test_an_update_of_a_row_another_transaction_locked_waits_for_it():
    layout, world = _world({"j": "running"})
    T = Tx.of(layout)
    a = T(world, 0)
    a.lock_row(0)
    b = T(tuple(a.s), 1)
    with pytest.raises(Blocked) as blocked:
        b.update(0, ("running",), "cancelled")
    assert blocked.value.holder == 0 and blocked.value.what == ("row", 0)


def test_a_row_that_does_not_match_in_the_statements_view_is_skipped_without_waiting():
    """The lost wake-up's mechanism: A's uncommitted park would make the row match, B does not wait."""
    layout, world = _world({"w": "running"})
    T = Tx.of(layout)
    a = T(world, 0)
    a.update(0, ("running",), "awaiting")
    b = T(tuple(a.s), 1)
    assert b.update(0, ("awaiting",), "ready") is False  # no Blocked raised: 0 rows


def test_a_waiting_update_re_checks_the_newest_committed_row_once_the_lock_is_free():
    layout, world = _world({"j": "running"})
    T = Tx.of(layout)
    a = T(world, 0)
    a.update(0, ("running",), "succeeded")
    a.commit()
    b = T(tuple(a.s), 1)
    assert b.update(0, ("running",), "cancelled") is False  # EvalPlanQual: it no longer matches


def test_advisory_locks_are_re_entrant_exclusive_and_released_at_commit():
    layout, world = _world({"j": 0})
    T = Tx.of(layout)
    a = T(world, 0)
    a.advisory(0)
    a.advisory(0)
    with pytest.raises(Blocked):
        T(tuple(a.s), 1).advisory(0)
    a.commit()
    assert tuple(a.s)[layout.adv0] == NOBODY
    T(tuple(a.s), 1).advisory(0)


def test_skip_locked_skips_a_row_another_transaction_holds():
    layout, world = _world({"j": "ready"})
    T = Tx.of(layout)
    a = T(world, 0)
    a.lock_row(0)
    assert T(tuple(a.s), 1).skip_locked(0) and not a.skip_locked(0)


# ---------------------------------------------------------------------------------------------------
# the search itself, on planted systems


def _two_lockers(reverse: bool) -> Scenario:
    layout = Layout(("A", "B"), ("x",), ("k1", "k2"))

    def locker(first: int, second: int, name: str):
        p = Program()
        p.sql("lock_a", "lock", lambda tx: tx.advisory(first))
        p.sql("lock_b", "lock", lambda tx: tx.advisory(second))
        p.commit()
        return p.build(name)

    actors = (locker(0, 1, "A"), locker(1, 0, "B") if reverse else locker(0, 1, "B"))
    return Scenario(
        "planted", "reverse" if reverse else "ordered", "two lockers", "", layout, layout.initial({"x": 0}), actors
    )


def test_a_planted_lock_cycle_is_found_as_a_deadlock_and_the_ordered_version_is_valid():
    bad = explore(_two_lockers(reverse=True))
    assert bad.verdict == "invalid" and bad.counterexample.kind == "deadlock"
    assert bad.counterexample.length == 2
    assert {b[0] for b in bad.counterexample.blocked} == {"A", "B"}
    assert "⏸" in format_trace(bad.counterexample)
    good = explore(_two_lockers(reverse=False))
    assert good.verdict == "valid"


def _waiter(with_waker: bool, daemon_waker: bool = False) -> Scenario:
    """W waits until x is 1; a waker (optional, maybe a looping daemon) sets it."""
    layout = Layout(("W", "waker", "noise") if with_waker else ("W", "noise"), ("x",), ())
    p = Program()

    def wait(tx):
        if tx.read(0) != 1:
            tx.wait("x = 1")
        tx.note = "ran"

    p.sql("wait", "SELECT", wait)
    w = p.build("W")
    noise = Program().sql("noop", "SELECT 1", lambda tx: None).commit(then="start").build("noise", daemon=True)
    actors = [w]
    if with_waker:
        q = Program().sql("set", "UPDATE x", lambda tx: tx.write(0, 1)).commit()
        if daemon_waker:
            q = Program().sql("set", "UPDATE x", lambda tx: tx.write(0, 1)).commit(then="start")
        actors.append(q.build("waker", daemon=daemon_waker))
    actors.append(noise)
    return Scenario(
        "planted",
        "waiter",
        "waiter",
        "",
        layout,
        layout.initial({"x": 0}),
        tuple(actors),
        liveness=(Liveness("w_runs", "W eventually runs", lambda v: v.pc("W") == 1),),
    )


def test_liveness_flags_a_waiter_nobody_wakes_even_while_a_daemon_keeps_moving():
    result = explore(_waiter(with_waker=False))
    assert result.verdict == "invalid" and result.counterexample.kind == "liveness"
    assert result.counterexample.stuck_from == -1  # stuck from the very start


@pytest.mark.parametrize("daemon", [False, True])
def test_liveness_holds_when_a_waker_is_always_still_possible(daemon):
    assert explore(_waiter(with_waker=True, daemon_waker=daemon)).verdict == "valid"


def test_a_safety_violation_in_the_initial_state_is_reported_with_an_empty_trace():
    s = _two_lockers(reverse=False)
    s = Scenario(
        s.name,
        s.variant,
        s.title,
        "",
        s.layout,
        s.initial,
        s.actors,
        invariants=(Invariant("never", "never holds", lambda v: "always false"),),
    )
    result = explore(s)
    assert result.verdict == "invalid" and result.counterexample.trace == ()


def test_a_search_told_not_to_stop_still_reports_the_shortest_counterexample_and_exhausts_the_space():
    first = explore(scenario("park_wake", "broken", 2))
    full = explore(scenario("park_wake", "broken", 2), stop_at_first=False)
    assert not first.complete and full.complete and full.states > first.states
    assert full.counterexample == first.counterexample and full.verdict == "invalid"


def test_a_search_cut_short_by_its_bound_is_unknown_not_valid():
    result = explore(scenario("r1", "correct", 3), max_states=50)
    assert result.verdict == "unknown" and not result.complete and result.counterexample is None


def test_states_per_second_comes_from_the_callers_clock():
    ticks = iter([10.0, 10.5])
    result = explore(scenario("park_wake", "correct", 1), clock=lambda: next(ticks))
    assert result.elapsed == 0.5 and result.states_per_second == result.states / 0.5
    assert explore(scenario("park_wake", "correct", 1)).states_per_second is None


def test_the_search_is_deterministic():
    a, b = explore(scenario("r2", "broken", 2)), explore(scenario("r2", "broken", 2))
    assert (a.states, a.transitions, a.depth) == (b.states, b.transitions, b.depth)
    assert a.counterexample == b.counterexample


def test_the_state_graph_is_a_networkx_digraph_with_labelled_edges():
    result = explore(scenario("lock_order", "correct", 2))
    g = result.graph()
    assert isinstance(g, nx.DiGraph) and g.number_of_nodes() == result.states
    assert g.number_of_edges() <= result.transitions
    names = {st.name for actor in result.scenario.actors for st in actor.program}
    assert {d["statement"] for _, _, d in g.edges(data=True)} <= names
    assert {d["actor"] for _, _, d in g.edges(data=True)} == {"chunk1", "chunk2"}
    assert nx.is_weakly_connected(g)


def test_a_counterexample_becomes_a_sequence_diagram_with_one_lane_per_actor():
    cx = explore(scenario("lock_order", "broken", 2)).counterexample
    lanes, messages = sequence(cx)
    assert lanes == ["chunk1", "chunk2"]
    assert [m.kind for m in messages[-2:]] == ["wait", "wait"]
    assert messages[1].kind == "lock" and messages[0].kind == "write"
