"""Actors as small programs: a list of statements, each one SQL statement (or COMMIT) of a contract
operation, in the order the implementation issues them.

A `Statement` runs against a `Tx` (model/explorer/db.py) and returns the label of the next statement,
or None for the one after it. Local computation — an `if` on what a SELECT returned — belongs to the
statement whose result it inspects: it touches no shared data, so it is not an interleaving point.

    p = Program()
    p.sql("ack_succeed", "UPDATE belay_jobs SET state='succeeded' WHERE id=C1 AND state='running'",
          lambda tx: tx.update(C1, ("running",), "succeeded"))
    p.commit()
    actor = p.build("C1")

Labels: `p.label("park")` names the next statement; every program also has "start" (the first
statement) and "end" (finished). A daemon actor (a sweeper) loops forever: it is never required to
finish, and liveness never waits on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from model.explorer.db import Tx

START, END = "start", "end"


@dataclass(frozen=True)
class Statement:
    """One interleaving point: a SQL statement of the modelled operation."""

    name: str  # the named query in impl/store/sql it models (`ack_succeed`, `lock_scope`, …) or `commit`
    sql: str  # the statement as a reader recognises it, with the scenario's ids filled in
    run: Callable[[Tx], str | None] = field(repr=False, compare=False)  # its effect; the next label or None


@dataclass(frozen=True)
class Actor:
    """One concurrent client (a worker, an operator, a sweeper) and its program."""

    name: str
    program: tuple[Statement, ...]
    labels: Mapping[str, int]
    daemon: bool = False  # loops forever (a sweeper): never "unfinished", never waited for

    @property
    def end(self) -> int:
        return len(self.program)

    def target(self, label: str) -> int:
        try:
            return self.labels[label]
        except KeyError:
            raise KeyError(f"actor {self.name}: no statement labelled {label!r}") from None


class Program:
    """Builds an `Actor`: statements in order, labels for jumps."""

    def __init__(self) -> None:
        self._statements: list[Statement] = []
        self._labels: dict[str, int] = {START: 0}

    def label(self, name: str) -> Program:
        """Name the next statement (a jump target)."""
        if name in self._labels and name != START:
            raise ValueError(f"label {name!r} defined twice")
        self._labels[name] = len(self._statements)
        return self

    def sql(self, name: str, text: str, run: Callable[[Tx], str | None]) -> Program:
        self._statements.append(Statement(name, text, run))
        return self

    def commit(self, then: str | None = None) -> Program:
        """COMMIT, then continue with the next statement (or jump to `then`)."""

        def run(tx: Tx) -> str | None:
            tx.commit()
            return then

        return self.sql("commit", "COMMIT", run)

    def extend(self, steps: Callable[[Program], None]) -> Program:
        """Append a reusable statement sequence (see model/explorer/protocols.py)."""
        steps(self)
        return self

    def build(self, name: str, *, daemon: bool = False) -> Actor:
        labels = dict(self._labels)
        labels[END] = len(self._statements)
        for label, index in labels.items():
            if index > len(self._statements):
                raise ValueError(f"label {label!r} points past the end")
        return Actor(name, tuple(self._statements), MappingProxyType(labels), daemon)
