"""A tiny PostgreSQL for the race explorer: rows, READ COMMITTED visibility, row locks, advisory
transaction locks and commit points — just enough to interleave the statements of contract §6–§8.

A world state is one flat tuple (hashable, cheap to copy), laid out by `Layout`:

    pcs      one program counter per actor                        (where each actor is)
    regs     one register per actor                               (what its last SELECT returned)
    rows     the committed value of each row                      (what every other transaction sees)
    owners   the actor holding each row's lock, or NOBODY         (FOR UPDATE / UPDATE / DELETE / upsert)
    pending  the owner's uncommitted value of each row, or UNSET  (visible to the owner only)
    advisory the actor holding each advisory xact lock, or NOBODY (pg_advisory_xact_lock)

A row is whatever a scenario needs as one lockable unit: a `belay_jobs` row (its value is the job's
state), a `belay_signals` row (present / absent), … Only the lock owner can have an uncommitted value,
because every write takes the row lock first — so one (owner, pending) pair per row is the whole
multi-version picture READ COMMITTED needs.

Modelling choices (each one a simplification of PostgreSQL that the scenarios do not depend on):
  * A statement is atomic: it either runs to completion in one step or is blocked before it changes
    anything. A blocked statement is simply not enabled; it re-runs from scratch, against the newest
    committed data, once the lock is free. That is PostgreSQL's EvalPlanQual re-check for the rows the
    statement was waiting on. (PostgreSQL keeps the statement's snapshot for rows that did *not* match
    when it started; the model would also pick up a row that starts to match while it waits. That can
    only add behaviours, never hide one, and no scenario statement scans such a row.)
  * A row that does not match a statement's WHERE in the statement's view is skipped without waiting,
    even when another transaction holds its lock with an uncommitted change that would make it match —
    exactly PostgreSQL's behaviour, and the heart of every lost-wake-up race.
  * Advisory locks are transaction-scoped and re-entrant for their holder; all locks are released at
    commit. There is no abort: a deadlock is reported as such (PostgreSQL's detector would abort one
    victim after deadlock_timeout; the contract's lock order exists so that never happens).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NOBODY = -1  # no actor holds this lock


class _Unset:
    """No uncommitted value: the owner reads the committed one (a row locked FOR UPDATE, unwritten)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET = _Unset()


class Blocked(Exception):
    """The statement cannot run now: it waits on a lock `holder` holds, or (holder None) on a condition
    of the data — e.g. a parked job waiting to become claimable."""

    def __init__(self, holder: int | None, what: tuple[str, object]) -> None:
        self.holder = holder
        self.what = what  # ("row", index) | ("lock", index) | ("data", description)


@dataclass(frozen=True)
class Layout:
    """Where each part of the flat world tuple lives, and the names of actors, rows and locks."""

    actors: tuple[str, ...]
    rows: tuple[str, ...]
    locks: tuple[str, ...]
    actor_index: Mapping[str, int] = field(init=False, repr=False)
    row_index: Mapping[str, int] = field(init=False, repr=False)
    lock_index: Mapping[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for kind, names in (("actor", self.actors), ("row", self.rows), ("lock", self.locks)):
            if len(set(names)) != len(names):
                raise ValueError(f"duplicate {kind} names in {names}")
        object.__setattr__(self, "actor_index", {a: i for i, a in enumerate(self.actors)})
        object.__setattr__(self, "row_index", {r: i for i, r in enumerate(self.rows)})
        object.__setattr__(self, "lock_index", {k: i for i, k in enumerate(self.locks)})

    # offsets into the flat tuple
    @property
    def n(self) -> int:
        return len(self.actors)

    @property
    def reg0(self) -> int:
        return self.n

    @property
    def row0(self) -> int:
        return 2 * self.n

    @property
    def own0(self) -> int:
        return 2 * self.n + len(self.rows)

    @property
    def pend0(self) -> int:
        return 2 * self.n + 2 * len(self.rows)

    @property
    def adv0(self) -> int:
        return 2 * self.n + 3 * len(self.rows)

    @property
    def size(self) -> int:
        return self.adv0 + len(self.locks)

    def initial(self, rows: Mapping[str, Any], regs: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
        """The world before any actor moves: every actor at its first statement, no locks held."""
        missing = set(self.rows) - set(rows)
        if missing:
            raise ValueError(f"no initial value for rows {sorted(missing)}")
        regs = regs or {}
        return (
            (0,) * self.n
            + tuple(regs.get(a) for a in self.actors)
            + tuple(rows[r] for r in self.rows)
            + (NOBODY,) * len(self.rows)
            + (UNSET,) * len(self.rows)
            + (NOBODY,) * len(self.locks)
        )


class Tx:
    """One statement of actor `me` running against one world: its READ COMMITTED view, the lock
    tables, and the working copy of the world it edits. `note` is what the statement observed or did,
    for traces; it is not part of the state."""

    __slots__ = ("me", "note", "s")
    # Offsets of the world layout: class attributes of the per-layout subclass `Tx.of(layout)`.
    reg0 = row0 = own0 = pend0 = adv0 = nrows = nlocks = 0

    def __init__(self, world: tuple[Any, ...], me: int) -> None:
        self.s = list(world)
        self.me = me
        self.note = ""

    @staticmethod
    def of(layout: Layout) -> type[Tx]:
        """The Tx class for one layout (offsets as class attributes keep statement steps cheap)."""
        return type(
            "Tx",
            (Tx,),
            {
                "__slots__": (),
                "reg0": layout.reg0,
                "row0": layout.row0,
                "own0": layout.own0,
                "pend0": layout.pend0,
                "adv0": layout.adv0,
                "nrows": len(layout.rows),
                "nlocks": len(layout.locks),
            },
        )

    # --- what a statement sees --------------------------------------------------------------------

    def read(self, row: int) -> Any:
        """The row as this transaction's next statement sees it: its own uncommitted write, else the
        latest committed value (READ COMMITTED: a fresh snapshot per statement)."""
        s = self.s
        if s[self.own0 + row] == self.me:
            value = s[self.pend0 + row]
            if value is not UNSET:
                return value
        return s[self.row0 + row]

    @property
    def reg(self) -> Any:
        return self.s[self.reg0 + self.me]

    @reg.setter
    def reg(self, value: Any) -> None:
        self.s[self.reg0 + self.me] = value

    # --- locks ------------------------------------------------------------------------------------

    def lock_row(self, row: int) -> None:
        """Take the row lock (SELECT … FOR UPDATE, or the lock an UPDATE/DELETE/upsert takes)."""
        i = self.own0 + row
        holder = self.s[i]
        if holder == self.me:
            return
        if holder != NOBODY:
            raise Blocked(holder, ("row", row))
        self.s[i] = self.me

    def skip_locked(self, row: int) -> bool:
        """FOR UPDATE SKIP LOCKED: True when another transaction holds the row (so it is skipped)."""
        holder = self.s[self.own0 + row]
        return bool(holder != NOBODY and holder != self.me)

    def advisory(self, key: int) -> None:
        """pg_advisory_xact_lock(key): wait while another transaction holds it; re-entrant."""
        i = self.adv0 + key
        holder = self.s[i]
        if holder == self.me:
            return
        if holder != NOBODY:
            raise Blocked(holder, ("lock", key))
        self.s[i] = self.me

    # --- writes -----------------------------------------------------------------------------------

    def write(self, row: int, value: Any) -> None:
        """Write a row under its lock (uncommitted until this transaction commits)."""
        self.lock_row(row)
        self.s[self.pend0 + row] = value

    def update(self, row: int, where: Callable[[Any], bool] | tuple[Any, ...], value: Any) -> bool:
        """UPDATE … WHERE id = row AND <where>: True when the row was written.

        A row that does not match in this statement's view is skipped without waiting; a matching row
        whose lock another transaction holds blocks the statement, which is re-run once it is free
        (the EvalPlanQual re-check). `where` is a predicate or a tuple of accepted values; `value` the
        new value or a function of the old one."""
        current = self.read(row)
        matches = where(current) if callable(where) else current in where
        if not matches:
            return False
        self.write(row, value(current) if callable(value) else value)
        return True

    def commit(self) -> None:
        """COMMIT: publish every uncommitted write of this transaction and release all its locks."""
        s, me = self.s, self.me
        row0, own0, pend0 = self.row0, self.own0, self.pend0
        for r in range(self.nrows):
            if s[own0 + r] == me:
                value = s[pend0 + r]
                if value is not UNSET:
                    s[row0 + r] = value
                    s[pend0 + r] = UNSET
                s[own0 + r] = NOBODY
        adv0 = self.adv0
        for k in range(self.nlocks):
            if s[adv0 + k] == me:
                s[adv0 + k] = NOBODY

    def wait(self, what: str) -> None:
        """Not enabled until the data changes (e.g. a parked job waiting to become claimable)."""
        raise Blocked(None, ("data", what))


class View:
    """A read-only look at one world for invariants and traces: committed rows, actors, locks."""

    __slots__ = ("layout", "world")

    def __init__(self, layout: Layout, world: tuple[Any, ...]) -> None:
        self.layout = layout
        self.world = world

    def row(self, name: str) -> Any:
        """The committed value of a row (what any other transaction would read)."""
        return self.world[self.layout.row0 + self.layout.row_index[name]]

    def rows(self, names: Sequence[str]) -> tuple[Any, ...]:
        return tuple(self.row(n) for n in names)

    def pc(self, actor: str) -> int:
        return int(self.world[self.layout.actor_index[actor]])

    def reg(self, actor: str) -> Any:
        return self.world[self.layout.reg0 + self.layout.actor_index[actor]]

    def row_owner(self, name: str) -> str | None:
        holder = self.world[self.layout.own0 + self.layout.row_index[name]]
        return None if holder == NOBODY else self.layout.actors[holder]

    def pending(self, name: str) -> Any:
        return self.world[self.layout.pend0 + self.layout.row_index[name]]

    def lock_holder(self, key: str) -> str | None:
        holder = self.world[self.layout.adv0 + self.layout.lock_index[key]]
        return None if holder == NOBODY else self.layout.actors[holder]

    def committed(self) -> dict[str, Any]:
        return {name: self.row(name) for name in self.layout.rows}

    def held_locks(self) -> dict[str, str]:
        """Every lock someone holds: `row:<name>` and `lock:<key>` → actor."""
        out = {}
        for name in self.layout.rows:
            holder = self.row_owner(name)
            if holder is not None:
                out[f"row {name}"] = holder
        for key in self.layout.locks:
            holder = self.lock_holder(key)
            if holder is not None:
                out[f"lock {key}"] = holder
        return out

    def uncommitted(self) -> dict[str, tuple[str, Any]]:
        """Rows with an uncommitted write: name → (writer, value)."""
        out = {}
        for name in self.layout.rows:
            value = self.pending(name)
            if value is not UNSET:
                owner = self.row_owner(name)
                assert owner is not None  # only the lock owner can have an uncommitted value
                out[name] = (owner, value)
        return out
