"""Workflow settlement (contract §8.3, invariant 5) as properties of the pure `model.settle.settle`.

"Workflow releases occur only with satisfied deps; dooms only with a doomed dep; settlement is a
fixpoint (re-settling is a no-op)." Workflows are random DAGs from networkx (a G(n, p) graph with
every edge oriented from the lower to the higher index, so it is acyclic by construction), with
random member states and ignore flags; a few hand-made workflows pin the named cases.
"""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from model.settle import Member, Settlement, settle

STATES = ("held", "ready", "running", "succeeded", "failed", "cancelled")
FLAGS = ("failed", "cancelled")
TERMINAL_FAILED = ("failed", "cancelled")


@st.composite
def workflows(draw) -> list[Member]:
    """A DAG's nodes as members: node j depends on node i for each edge i -> j (i < j)."""
    n = draw(st.integers(1, 9))
    p = draw(st.sampled_from([0.0, 0.2, 0.4, 0.7, 1.0]))
    # Names are a random relabelling, so name order (which settle iterates in) is not topological order.
    label = draw(st.permutations([f"m{i}" for i in range(n)]))
    seed = draw(st.integers(0, 2**32 - 1))
    graph = nx.gnp_random_graph(n, p, seed=seed)
    dag = nx.DiGraph()
    dag.add_nodes_from(range(n))
    dag.add_edges_from((min(u, v), max(u, v)) for u, v in graph.edges)
    assert nx.is_directed_acyclic_graph(dag)
    # Held is drawn more often: it is the only state settlement acts on.
    states = draw(st.lists(st.sampled_from((*STATES, "held", "held")), min_size=n, max_size=n))
    members = []
    for node in range(n):
        deps = tuple(label[d] for d in sorted(dag.predecessors(node)))
        if draw(st.integers(0, 9)) == 0:
            deps += ("ghost",)  # a dep naming no stored member is simply unmet
        ignore = tuple(sorted(draw(st.sets(st.sampled_from(FLAGS)))))
        members.append(Member(label[node], states[node], deps, ignore))
    return members


def effective(members: list[Member], result: Settlement) -> dict[str, str]:
    """Member states after applying the settlement: releases → ready, dooms → cancelled."""
    out = {m.name: m.state for m in members}
    out.update({name: "ready" for name in result.released})
    out.update({name: "cancelled" for name in result.doomed})
    return out


def applied(members: list[Member], result: Settlement) -> list[Member]:
    states = effective(members, result)
    return [Member(m.name, states[m.name], m.deps, m.ignore) for m in members]


def satisfied(member: Member, dep_state: str | None) -> bool:
    return dep_state == "succeeded" or (dep_state in TERMINAL_FAILED and dep_state in member.ignore)


def topological_reference(members: list[Member]) -> Settlement:
    """An independent oracle for DAGs: decide each member once, after all of its deps are decided."""
    by_name = {m.name: m for m in members}
    graph = nx.DiGraph()
    graph.add_nodes_from(by_name)
    graph.add_edges_from((d, m.name) for m in members for d in m.deps if d in by_name)
    states = {m.name: m.state for m in members}
    released, doomed = set(), set()
    for name in nx.topological_sort(graph):
        m = by_name[name]
        if m.state != "held" or not m.deps:
            continue
        dep_states = [states.get(d) for d in m.deps]
        if any(s in TERMINAL_FAILED and s not in m.ignore for s in dep_states):
            doomed.add(name)
            states[name] = "cancelled"
        elif all(satisfied(m, s) for s in dep_states):
            released.add(name)
            states[name] = "ready"
    return Settlement(frozenset(released), frozenset(doomed))


# ---------------------------------------------------------------------------------------------------
# properties

FAST = settings(max_examples=300, deadline=None)


@FAST
@given(workflows())
def test_settlement_is_a_fixpoint_re_settling_the_applied_result_changes_nothing(members):
    result = settle(members)
    assert settle(applied(members, result)).empty


@FAST
@given(workflows())
def test_a_release_happens_only_when_every_dep_is_succeeded_or_tolerated_terminal(members):
    result = settle(members)
    states = effective(members, result)  # doomed deps count as cancelled
    by_name = {m.name: m for m in members}
    for name in result.released:
        m = by_name[name]
        for dep in m.deps:
            assert satisfied(m, states.get(dep)), f"{name} released with dep {dep} {states.get(dep)}"


@FAST
@given(workflows())
def test_a_doom_happens_only_when_some_dep_failed_or_was_cancelled_without_its_flag(members):
    result = settle(members)
    states = effective(members, result)
    by_name = {m.name: m for m in members}
    for name in result.doomed:
        m = by_name[name]
        assert any(states.get(d) in TERMINAL_FAILED and states.get(d) not in m.ignore for d in m.deps), name


@FAST
@given(workflows(), st.randoms(use_true_random=False))
def test_the_order_of_members_does_not_change_the_result(members, rnd):
    shuffled = list(members)
    rnd.shuffle(shuffled)
    assert settle(shuffled) == settle(members)


@FAST
@given(workflows().flatmap(lambda ms: st.tuples(st.just(ms), st.permutations(ms))))
def test_any_permutation_of_the_members_settles_the_same(pair):
    members, permuted = pair
    assert settle(permuted) == settle(members)


@FAST
@given(workflows())
def test_only_held_members_with_deps_are_ever_released_or_doomed(members):
    result = settle(members)
    candidates = {m.name for m in members if m.state == "held" and m.deps}
    assert result.released <= candidates and result.doomed <= candidates
    assert not result.released & result.doomed


@FAST
@given(workflows())
def test_settlement_agrees_with_a_topological_order_reference(members):
    assert settle(members) == topological_reference(members)


@FAST
@given(workflows())
def test_settlement_is_deterministic_and_does_not_consume_a_one_shot_iterable(members):
    assert settle(iter(members)) == settle(members) == settle(tuple(members))


# ---------------------------------------------------------------------------------------------------
# hand-made workflows


def m(name: str, state: str, *deps: str, ignore: tuple[str, ...] = ()) -> Member:
    return Member(name, state, deps, ignore)


def test_a_diamond_releases_both_middles_and_holds_the_sink_until_they_finish():
    result = settle([m("a", "succeeded"), m("b", "held", "a"), m("c", "held", "a"), m("d", "held", "b", "c")])
    assert result == Settlement(frozenset({"b", "c"}), frozenset())


def test_a_diamond_with_both_middles_succeeded_releases_the_sink():
    result = settle([m("a", "succeeded"), m("b", "succeeded", "a"), m("c", "succeeded", "a"), m("d", "held", "b", "c")])
    assert result == Settlement(frozenset({"d"}), frozenset())


def test_a_diamond_with_one_failed_middle_dooms_the_sink_even_while_the_other_runs():
    result = settle([m("a", "succeeded"), m("b", "failed", "a"), m("c", "running", "a"), m("d", "held", "b", "c")])
    assert result == Settlement(frozenset(), frozenset({"d"}))


def test_a_failed_head_dooms_a_whole_chain_in_one_settlement():
    members = [m("a", "failed")] + [m(f"n{i}", "held", "a" if i == 0 else f"n{i - 1}") for i in range(5)]
    assert settle(members) == Settlement(frozenset(), frozenset(f"n{i}" for i in range(5)))


def test_a_doom_cascades_against_name_order():
    # settle visits candidates by name: x first, whose dep y is only doomed later in the same pass
    members = [m("z", "failed"), m("y", "held", "z"), m("x", "held", "y"), m("w", "held", "x")]
    assert settle(members) == Settlement(frozenset(), frozenset({"y", "x", "w"}))


def test_a_release_against_name_order_through_a_tolerated_doom():
    members = [m("z", "cancelled"), m("y", "held", "z"), m("x", "held", "y", ignore=("cancelled",))]
    assert settle(members) == Settlement(frozenset({"x"}), frozenset({"y"}))


def test_ignoring_cancelled_tolerates_a_dep_doomed_in_the_same_settlement():
    members = [
        m("a", "failed"),
        m("b", "held", "a"),
        m("c", "held", "b", ignore=("cancelled",)),
        m("d", "held", "b", ignore=("failed",)),
    ]
    # b is doomed (cancelled, not failed): c tolerates that, d only tolerates a failed dep
    assert settle(members) == Settlement(frozenset({"c"}), frozenset({"b", "d"}))


def test_ignoring_failed_releases_past_a_failed_dep_and_its_doom_does_not_cascade():
    members = [m("a", "failed"), m("b", "held", "a", ignore=("failed",)), m("c", "held", "b")]
    assert settle(members) == Settlement(frozenset({"b"}), frozenset())  # c waits on a ready b


def test_a_held_member_without_deps_is_an_operator_freeze_and_never_touched():
    assert settle([m("frozen", "held"), m("x", "held", "frozen")]).empty


def test_a_dep_naming_no_member_is_unmet_but_a_failed_sibling_dep_still_dooms():
    assert settle([m("a", "succeeded"), m("b", "held", "a", "ghost")]).empty
    assert settle([m("a", "failed"), m("b", "held", "ghost", "a")]) == Settlement(frozenset(), frozenset({"b"}))


def test_an_empty_workflow_settles_to_nothing():
    assert settle([]).empty
