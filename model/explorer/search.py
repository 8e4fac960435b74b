"""Explicit-state search over every interleaving of a scenario's actors.

    result = explore(scenario)                       # breadth-first, visited-state hashing
    result.verdict                                   # "valid" | "invalid" | "unknown" (bound hit)
    print(result.summary()); print(format_trace(result.counterexample))

Breadth-first order makes every counterexample a shortest one: states are discovered in order of their
distance from the initial state, so the first violating state found has a minimal trace, and the
parent map gives that trace back.

Three kinds of property, all named after the contract:
  * safety invariants (`Invariant`), checked in every reachable state as it is discovered;
  * deadlock freedom, checked in every state: a cycle of actors each waiting on a lock another holds
    (the contract's lock order, §7, exists to make that impossible);
  * liveness (`Liveness`), checked over the whole state graph once the state space is exhausted: from
    every reachable state a goal state is still reachable ("AG EF goal"). On a finite graph this is what
    "eventually" means under fair scheduling: a state from which the goal is unreachable is a strand no
    scheduler can repair. The counterexample is the shortest path to such a state, continued (along the
    networkx state graph, `Result.graph()`) to the nearest state where only sweepers (daemons) move.

Pure: no clock. A caller that wants states per second passes `clock` (e.g. time.perf_counter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import networkx as nx

from model.explorer.db import Blocked, Layout, Tx, View
from model.explorer.program import Actor


@dataclass(frozen=True)
class Invariant:
    """A safety property: `check` returns None when it holds, else what is wrong in that state."""

    name: str  # the contract's name for it (`i9_awaiters_eventually_run`, `i5_settlement_consistent`, …)
    doc: str  # the contract sentence it encodes
    check: Callable[[View], str | None] = field(repr=False)


@dataclass(frozen=True)
class Liveness:
    """AG EF goal: from every reachable state (where `when` holds) a goal state remains reachable."""

    name: str
    doc: str
    goal: Callable[[View], bool] = field(repr=False)
    when: Callable[[View], bool] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Scenario:
    """A closed system: actors, their shared tiny database, and the properties it must keep."""

    name: str  # "r1", "r2", "park_wake", "lock_order", "settlement", …
    variant: str  # "correct", "broken", or a named variant
    title: str  # one line
    hypothesis: str  # what the variant is expected to show, and why
    layout: Layout
    initial: tuple[Any, ...]
    actors: tuple[Actor, ...]
    invariants: tuple[Invariant, ...] = ()
    liveness: tuple[Liveness, ...] = ()
    expect: str = "valid"  # "valid" (proved safe within its bounds) or "invalid" (a counterexample exists)
    size: int = 2  # the configuration's size parameter (children, waiters, …)

    @property
    def key(self) -> str:
        return f"{self.name}/{self.variant}"


@dataclass(frozen=True)
class TraceStep:
    """One statement of a counterexample, and the world right after it."""

    actor: str
    statement: str  # the named query (`ack_succeed`, `lock_scope`, `commit`, …)
    sql: str
    note: str  # what the statement saw or did (`0 rows`, `count = 1 → no signal`, …)
    committed: tuple[tuple[str, Any], ...]  # every row's committed value after the step
    uncommitted: tuple[tuple[str, str, Any], ...]  # (row, writer, value) not yet committed
    locks: tuple[tuple[str, str], ...]  # (lock or row, holder) after the step
    stuck: bool = False  # from here on the goal is unreachable (liveness counterexamples)


@dataclass(frozen=True)
class Counterexample:
    kind: str  # "safety" | "deadlock" | "liveness"
    invariant: str
    message: str
    trace: tuple[TraceStep, ...]
    stuck_from: int | None = None  # liveness: index of the first step after which the goal is unreachable
    blocked: tuple[tuple[str, str, str, str], ...] = ()  # deadlock: (actor, statement, waits for, on what)
    states: tuple[int, ...] = ()  # the state indices the trace passes through, from the initial state (0)
    stuck_states: frozenset[int] = frozenset()  # liveness: every reachable state the goal is unreachable from

    @property
    def length(self) -> int:
        """Statements up to the violating (or, for liveness, the first stuck) state."""
        return self.stuck_from + 1 if self.stuck_from is not None else len(self.trace)


@dataclass
class Result:
    scenario: Scenario
    states: int  # distinct states discovered
    transitions: int
    depth: int  # the longest shortest path from the initial state
    complete: bool  # True when every reachable state was expanded (False: cut by a bound or a violation)
    counterexample: Counterexample | None
    elapsed: float | None  # seconds, when a clock was given
    worlds: list[tuple[Any, ...]] = field(repr=False)  # every state, in BFS order (index 0: the initial state)
    parent: list[int] = field(repr=False)  # BFS tree: the state each was first reached from (-1 for 0)
    depths: list[int] = field(repr=False)  # BFS depth: the length of the shortest path to each state
    edges: tuple[list[int], list[int], list[int]] = field(repr=False)  # (src, dst, actor index)

    @property
    def verdict(self) -> str:
        """Jepsen's three outcomes: a counterexample (invalid), an exhausted state space without one
        (valid), or a search cut short by its bound (unknown)."""
        if self.counterexample is not None:
            return "invalid"
        return "valid" if self.complete else "unknown"

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.scenario.expect

    @property
    def states_per_second(self) -> float | None:
        if not self.elapsed:
            return None
        return self.states / self.elapsed

    def view(self, k: int) -> View:
        return View(self.scenario.layout, self.worlds[k])

    def graph(self, *, labels: bool = True) -> nx.DiGraph[int]:
        """The state graph: nodes are state indices (0 = initial; attribute `depth`), edges carry the
        moving actor's name and statement when `labels`."""
        g: nx.DiGraph[int] = nx.DiGraph()
        g.add_nodes_from(range(len(self.worlds)))
        src, dst, act = self.edges
        if labels:
            actors = self.scenario.actors
            g.add_edges_from(
                (u, v, {"actor": actors[a].name, "statement": actors[a].program[self.worlds[u][a]].name})
                for u, v, a in zip(src, dst, act, strict=True)
            )
        else:
            g.add_edges_from(zip(src, dst, strict=True))
        return g

    def summary(self) -> str:
        s = self.scenario
        rate = f", {self.states_per_second:,.0f} states/s" if self.states_per_second else ""
        head = (
            f"{s.key} (size {s.size}): {self.verdict} — {self.states:,} states, "
            f"{self.transitions:,} transitions, depth {self.depth}{rate}"
        )
        cx = self.counterexample
        if cx is not None:
            head += f"\n  {cx.kind} counterexample ({cx.invariant}) in {cx.length} steps: {cx.message}"
        return head


# -------------------------------------------------------------------------------------------------


def _deadlock(waits: dict[int, int]) -> list[int] | None:
    """A cycle in the wait-for graph (each actor waits on at most one holder), else None."""
    for start in waits:
        seen = []
        a = start
        while a in waits and a not in seen:
            seen.append(a)
            a = waits[a]
        if a in seen:
            return seen[seen.index(a) :]
    return None


def explore(
    scenario: Scenario,
    *,
    max_states: int = 2_000_000,
    stop_at_first: bool = True,
    check_liveness: bool = True,
    clock: Callable[[], float] | None = None,
) -> Result:
    """Breadth-first search of every interleaving of `scenario`'s actors.

    Stops at the first safety or deadlock violation (the shortest, by BFS order); with `stop_at_first`
    False it still reports that one but explores the whole space (for the graph). Liveness is checked
    over the state graph once the space is exhausted without a safety or deadlock violation.
    `max_states` bounds the search (the verdict is then "unknown" if nothing was found)."""
    started = clock() if clock else None
    layout = scenario.layout
    actors = scenario.actors
    n = len(actors)
    tx_class = Tx.of(layout)
    programs = [a.program for a in actors]
    ends = [a.end for a in actors]
    labels = [a.labels for a in actors]
    invariants = scenario.invariants

    init = scenario.initial
    index: dict[tuple[Any, ...], int] = {init: 0}
    worlds: list[tuple[Any, ...]] = [init]
    parent: list[int] = [-1]
    depth: list[int] = [0]
    src: list[int] = []
    dst: list[int] = []
    act: list[int] = []
    found: tuple[str, str, str, int] | None = None  # (kind, invariant, message, state)
    blocked: tuple[Any, ...] = ()  # deadlock: the statements left waiting

    def check(k: int, world: tuple[Any, ...]) -> tuple[str, str, str, int] | None:
        view = View(layout, world)
        for inv in invariants:
            message = inv.check(view)
            if message is not None:
                return ("safety", inv.name, message, k)
        return None

    found = check(0, init)
    i = 0
    while i < len(worlds) and (found is None or not stop_at_first):
        if len(worlds) > max_states:
            break
        world = worlds[i]
        waits: dict[int, int] | None = None
        what: dict[int, tuple[Any, ...]] = {}
        for a in range(n):
            pc = world[a]
            if pc == ends[a]:
                continue
            tx = tx_class(world, a)
            try:
                nxt = programs[a][pc].run(tx)
            except Blocked as wait:
                if wait.holder is not None:
                    if waits is None:
                        waits = {}
                    waits[a] = wait.holder
                    what[a] = wait.what
                continue
            s = tx.s
            s[a] = pc + 1 if nxt is None else labels[a][nxt]
            t = tuple(s)
            j = index.get(t)
            if j is None:
                j = len(worlds)
                index[t] = j
                worlds.append(t)
                parent.append(i)
                depth.append(depth[i] + 1)
                if invariants and found is None:
                    found = check(j, t)
            src.append(i)
            dst.append(j)
            act.append(a)
        if waits is not None and len(waits) > 1 and found is None:
            cycle = _deadlock(waits)
            if cycle is not None:
                found = ("deadlock", "no_deadlock", _describe_deadlock(layout, cycle, waits, what), i)
                blocked = tuple(
                    (actors[a].name, programs[a][world[a]].name, actors[waits[a]].name, _lock_name(layout, what[a]))
                    for a in cycle
                )
        i += 1
    complete = i >= len(worlds)  # every reachable state was expanded

    result = Result(
        scenario, len(worlds), len(src), max(depth), complete, None, None, worlds, parent, depth, (src, dst, act)
    )
    counterexample = None
    if found is not None:
        kind, name, message, k = found
        path = _path(parent, k)
        counterexample = Counterexample(
            kind,
            name,
            message,
            tuple(_trace(result, path)),
            blocked=blocked if kind == "deadlock" else (),
            states=tuple(path),
        )
    elif complete and check_liveness and scenario.liveness:
        counterexample = _check_liveness(result)
    result.counterexample = counterexample
    if clock is not None and started is not None:
        result.elapsed = clock() - started
    return result


def _lock_name(layout: Layout, what: tuple[Any, ...]) -> str:
    kind, idx = what
    return f"row {layout.rows[idx]}" if kind == "row" else f"lock {layout.locks[idx]}"


def _describe_deadlock(
    layout: Layout, cycle: list[int], waits: dict[int, int], what: dict[int, tuple[Any, ...]]
) -> str:
    parts = [f"{layout.actors[a]} waits for {layout.actors[waits[a]]} ({_lock_name(layout, what[a])})" for a in cycle]
    return "; ".join(parts) + " — a lock cycle"


def _path(parent: Sequence[int], k: int) -> list[int]:
    path = [k]
    while parent[path[-1]] != -1:
        path.append(parent[path[-1]])
    return path[::-1]


def successors(scenario: Scenario, world: tuple[Any, ...]) -> Iterator[tuple[int, tuple[Any, ...], str]]:
    """Every (actor, next world, note) one statement can reach from `world`; blocked actors are
    skipped. (explore() inlines this loop for speed, since it also records who waits on whom.)"""
    tx_class = Tx.of(scenario.layout)
    for a, actor in enumerate(scenario.actors):
        pc = world[a]
        if pc == actor.end:
            continue
        tx = tx_class(world, a)
        try:
            nxt = actor.program[pc].run(tx)
        except Blocked:
            continue
        tx.s[a] = pc + 1 if nxt is None else actor.labels[nxt]
        yield a, tuple(tx.s), tx.note


def _step(result: Result, u: int, v: int) -> tuple[int, str]:
    """Which actor moves state u to state v, and the note its statement leaves."""
    for a, world, note in successors(result.scenario, result.worlds[u]):
        if world == result.worlds[v]:
            return a, note
    raise AssertionError(f"no actor moves state {u} to state {v}")


def _trace(result: Result, path: list[int], stuck: set[int] | None = None) -> list[TraceStep]:
    steps = []
    for u, v in pairwise(path):
        a, note = _step(result, u, v)
        actor = result.scenario.actors[a]
        statement = actor.program[result.worlds[u][a]]
        view = result.view(v)
        steps.append(
            TraceStep(
                actor.name,
                statement.name,
                statement.sql,
                note,
                tuple(view.committed().items()),
                tuple((row, writer, value) for row, (writer, value) in view.uncommitted().items()),
                tuple(view.held_locks().items()),
                stuck=stuck is not None and v in stuck,
            )
        )
    return steps


def _can_reach(n: int, src: Sequence[int], dst: Sequence[int], goal: Sequence[int]) -> bytearray:
    """For every state, can it reach a goal state? (a breadth-first search backwards from the goals)."""
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(src, dst, strict=True):
        preds[v].append(u)
    reach = bytearray(n)
    frontier = list(goal)
    for k in frontier:
        reach[k] = 1
    while frontier:
        nxt = []
        for v in frontier:
            for u in preds[v]:
                if not reach[u]:
                    reach[u] = 1
                    nxt.append(u)
        frontier = nxt
    return reach


def _check_liveness(result: Result) -> Counterexample | None:
    """AG EF goal for each liveness property over the state graph.

    The backwards reachability runs on the search's own edge lists (ten times faster than building the
    networkx graph for it); the networkx graph (`Result.graph`) is built only to continue a
    counterexample to where it ends."""
    scenario = result.scenario
    n = len(result.worlds)
    src, dst, act = result.edges
    daemons = {a for a, actor in enumerate(scenario.actors) if actor.daemon}
    progress = {u for u, a in zip(src, act, strict=True) if a not in daemons}  # states where a non-daemon can move
    for prop in scenario.liveness:
        goal = [k for k in range(n) if prop.goal(result.view(k))]
        reach = _can_reach(n, src, dst, goal)
        bad = [k for k in range(n) if not reach[k] and (prop.when is None or prop.when(result.view(k)))]
        if not bad:
            continue
        first = bad[0]  # states are numbered in BFS order: the lowest index is the nearest
        path = _path(result.parent, first)
        # continue to the nearest state where only sweepers can still move, to show where it ends
        lengths = nx.single_source_shortest_path(result.graph(labels=False), first)
        quiet = min((p for k, p in lengths.items() if k not in progress), key=len, default=[first])
        trace = _trace(result, path + quiet[1:], set(bad))
        end = result.view(quiet[-1])
        message = f"{prop.doc} — unreachable from the state after step {len(path) - 1}; it ends with " + ", ".join(
            f"{r}={v}" for r, v in end.committed().items()
        )
        return Counterexample(
            "liveness",
            prop.name,
            message,
            tuple(trace),
            stuck_from=len(path) - 2,
            states=tuple(path + quiet[1:]),
            stuck_states=frozenset(bad),
        )
    return None
