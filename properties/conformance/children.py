"""Children conformance (contract §8.4): doubly idempotent spawn (memoized `$spawn:<name>` step, child
keys `$spawn:<parent>:<name>:<i>` in always mode, ids rebuilt from the keys), await-children
(re-verify, clear the stale `$children` signal, park) and the reconciler backstop (R2)."""

from __future__ import annotations

from model import ops
from model import worker_ops as w
from properties.conformance.core import case
from properties.conformance.support import (
    MIN,
    TTL,
    S,
    ack,
    check,
    claim_job,
    expect,
    expect_unchanged,
    fields,
    gone,
    insert,
    observe,
    park,
    read,
    signal,
    spawn,
    spec,
    start,
    succeed,
    value_of,
)


def journaled(store, parent_id: int, name: str):
    hit = store.apply(w.ReadStep(parent_id, f"$spawn:{name}"))
    check(isinstance(hit, w.StepHit), f"the spawn must be journaled as step '$spawn:{name}'; got {hit!r}")
    return value_of(hit.value)


@case("§8.4", "spawn inserts always-mode children keyed $spawn:<parent>:<name>:<i> and journals their ids")
def _(store, now):
    parent = start(store, now, queue="parents")
    result = store.apply(
        w.Spawn(now + S, parent.id, "kids", (spec("k0", "kids", input={"i": 0}), spec("k1", "kids", input={"i": 1})))
    )
    check(isinstance(result, w.Spawned) and not result.memoized, f"a first spawn inserts; got {result!r}")
    expect(len(result.child_ids), 2, "one id per declared child")
    for i, child_id in enumerate(result.child_ids):
        expect(
            fields(
                read(store, child_id),
                "unique_key",
                "unique_mode",
                "parent_id",
                "state",
                "queue",
                "worker",
                "input",
                "inserted_at",
            ),
            dict(
                unique_key=f"$spawn:{parent.id}:kids:{i}",
                unique_mode="always",
                parent_id=parent.id,
                state="ready",
                queue="kids",
                worker=f"k{i}",
                input={"i": i},
                inserted_at=now + S,
            ),
            f"child {i}",
        )
    expect(journaled(store, parent.id, "kids"), list(result.child_ids), "the $spawn:kids step holds the id list")


@case("§8.4", "a repeated spawn is memoized and inserts nothing")
def _(store, now):
    parent = start(store, now, queue="parents")
    first = spawn(store, now, parent.id, "kids", spec("k0", "kids"), spec("k1", "kids"))
    again = store.apply(w.Spawn(now + S, parent.id, "kids", (spec("other", "kids"),) * 3))
    expect(again, w.Spawned(first, True), "the re-run gets the journaled id list")
    sentinel = insert(store, now + S)
    strays = [i for i in range(max(first) + 1, sentinel) if not gone(store, i)]
    expect(strays, [], "no rows were inserted between the first spawn and the next enqueue")


@case("§8.4", "spawn rebuilds the id list from the keys after a partial earlier insert")
def _(store, now):
    parent = start(store, now, queue="parents")
    # A crash after inserting child 0 but before journaling: the row exists, the step does not.
    early = insert(
        store,
        now,
        "k0-early",
        "kids",
        unique_key=f"$spawn:{parent.id}:kids:0",
        unique_mode="always",
        parent_id=parent.id,
    )
    result = store.apply(w.Spawn(now + S, parent.id, "kids", (spec("k0", "kids"), spec("k1", "kids"))))
    check(isinstance(result, w.Spawned), f"Spawn returned {result!r}")
    expect(result.child_ids[0], early, "child 0 is the row the earlier attempt inserted, found by its key")
    later = result.child_ids[1]
    check(later != early, "child 1 is a new row")
    expect(read(store, early).worker, "k0-early", "the earlier row is kept, not replaced")
    expect(read(store, later).unique_key, f"$spawn:{parent.id}:kids:1", "child 1's key")
    expect(journaled(store, parent.id, "kids"), [early, later], "the journal holds the rebuilt list")


@case("§8.4", "a split spawn: children inserted first in any order, the journal later lists the keys' ids")
def _(store, now):
    parent = start(store, now, queue="parents")
    first = store.apply(w.SpawnChildren(now + S, parent.id, "kids", ((1, spec("k1", "kids")), (0, spec("k0", "kids")))))
    check(isinstance(first, w.Spawned) and not first.memoized, f"the insert half inserts; got {first!r}")
    expect(len(first.child_ids), 2, "one id per inserted child, in the order given")
    k1, k0 = first.child_ids
    check(k1 < k0, f"ids follow the order the children were inserted (index 1 first); got {first.child_ids!r}")
    expect(read(store, k1).unique_key, f"$spawn:{parent.id}:kids:1", "child 1's key")
    check(
        isinstance(store.apply(w.ReadStep(parent.id, "$spawn:kids")), w.StepMiss),
        "the insert half journals nothing: $spawn:kids is not a step yet",
    )
    again = store.apply(w.SpawnChildren(now + S, parent.id, "kids", ((0, spec("other", "kids")),)))
    expect(again, w.Spawned((k0,), False), "a repeated insert half finds the key's holder and inserts nothing")
    done = store.apply(w.Spawn(now + 2 * S, parent.id, "kids", (spec("k0", "kids"), spec("k1", "kids"))))
    expect(done, w.Spawned((k0, k1), False), "the journal lists the keys' ids in index order")
    expect(journaled(store, parent.id, "kids"), [k0, k1], "the journaled list")
    late = store.apply(w.SpawnChildren(now + 3 * S, parent.id, "kids", ((2, spec("k2", "kids")),)))
    expect(late, w.Spawned((k0, k1), True), "after the journal the insert half is memoized: nothing added")


@case("§8.4", "spawns with different names under one parent are independent")
def _(store, now):
    parent = start(store, now, queue="parents")
    a = spawn(store, now, parent.id, "a", spec("x", "kids"), spec("y", "kids"))
    b = spawn(store, now, parent.id, "b", spec("x", "kids"))
    expect(len(set(a) | set(b)), 3, "three distinct children")
    expect(read(store, b[0]).unique_key, f"$spawn:{parent.id}:b:0", "keys carry the spawn name")
    expect((journaled(store, parent.id, "a"), journaled(store, parent.id, "b")), (list(a), list(b)), "two journals")


@case("§8.4", "an empty spawn journals an empty list and awaiting no children is done at once")
def _(store, now):
    parent = start(store, now, queue="parents")
    expect(store.apply(w.Spawn(now, parent.id, "none", ())), w.Spawned((), False), "an empty spawn")
    expect(journaled(store, parent.id, "none"), [], "its journal")
    expect(
        store.apply(w.AwaitChildren(now + S, parent.id, parent.attempt)),
        w.ChildrenDone(()),
        "no live child: nothing to wait for",
    )
    expect(read(store, parent.id).state, "running", "the parent keeps running")


@case("§8.4", "await-children returns done when every child is terminal and the parent keeps running")
def _(store, now):
    parent = start(store, now, queue="parents")
    c1, c2 = spawn(store, now, parent.id, "kids", spec("k", "kids"), spec("k", "kids"))
    succeed(store, now + S, c1)
    ack(store, now + 2 * S, claim_job(store, now + 2 * S, c2), w.Fail("boom"))
    expect(
        store.apply(w.AwaitChildren(now + 3 * S, parent.id, parent.attempt, now + MIN)),
        w.ChildrenDone((c1, c2)),
        "succeeded and failed children are both terminal",
    )
    expect(
        fields(read(store, parent.id), "state", "lease_until"),
        dict(state="running", lease_until=parent.lease_until),
        "the parent was not parked",
    )


@case("§8.4", "await-children parks on $children while a child is live, clearing the stale signal")
def _(store, now):
    parent = start(store, now, queue="parents")
    c1, _c2 = spawn(store, now, parent.id, "kids", spec("k", "kids"), spec("k", "kids"))
    succeed(store, now + S, c1)
    check(signal(store, f"job:{parent.id}", "$children") is not None, "setup: c1 signalled the parent")
    expect(
        store.apply(w.AwaitChildren(now + 2 * S, parent.id, parent.attempt, now + MIN)),
        w.Parked(parent.id, "awaiting"),
        "c2 is live: the parent parks",
    )
    expect(
        signal(store, f"job:{parent.id}", "$children"),
        None,
        "the stale $children signal is cleared (else the park rule would make it ready at once)",
    )
    expect(
        fields(read(store, parent.id), "state", "await_scope", "await_name", "ready_at", "lease_until"),
        dict(
            state="awaiting",
            await_scope=f"job:{parent.id}",
            await_name="$children",
            ready_at=now + MIN,
            lease_until=None,
        ),
        "the parked parent",
    )


@case("§8.4", "the last child's terminal ack wakes the parent parked on $children")
def _(store, now):
    parent = start(store, now, queue="parents")
    c1, c2 = spawn(store, now, parent.id, "kids", spec("k", "kids"), spec("k", "kids"))
    succeed(store, now + S, c1)
    store.apply(w.AwaitChildren(now + 2 * S, parent.id, parent.attempt))
    succeed(store, now + 3 * S, c2)
    expect(
        fields(read(store, parent.id), "state", "ready_at", "await_scope", "await_name"),
        dict(state="ready", ready_at=now + 3 * S, await_scope=None, await_name=None),
        "the woken parent",
    )
    again = claim_job(store, now + 3 * S, parent.id)
    expect(
        store.apply(w.AwaitChildren(now + 4 * S, parent.id, again.attempt)),
        w.ChildrenDone((c1, c2)),
        "on wake the parent re-verifies and finds every child terminal",
    )


@case("§8.4", "the reconciler readies a parent awaiting $children whose children are all terminal")
def _(store, now):
    parent = start(store, now, queue="parents")
    (child,) = spawn(store, now, parent.id, "kids", spec("k", "kids"))
    succeed(store, now + S, child)
    # A lost wake-up (R2): the signal is gone and the parent parked anyway.
    store.apply(ops.ClearSignal(f"job:{parent.id}", "$children"))
    park(store, now + 2 * S, parent, f"job:{parent.id}", "$children")
    expect(store.apply(w.Reconcile(now + 3 * S)), w.Reconciled((parent.id,)), "the backstop wakes it")
    expect(
        fields(read(store, parent.id), "state", "ready_at", "await_scope", "await_name"),
        dict(state="ready", ready_at=now + 3 * S, await_scope=None, await_name=None),
        "the reconciled parent",
    )
    expect(store.apply(w.Reconcile(now + 4 * S)), w.Reconciled(()), "reconciling again is a no-op")


@case("§8.4", "the reconciler leaves parents with a live child, without children, or awaiting another name")
def _(store, now):
    live = start(store, now, queue="p1")
    spawn(store, now, live.id, "kids", spec("k", "kids-live"))
    store.apply(w.AwaitChildren(now, live.id, live.attempt))
    lonely = start(store, now, queue="p2")
    park(store, now, lonely, f"job:{lonely.id}", "$children")
    other = start(store, now, queue="p3")
    (done,) = spawn(store, now, other.id, "kids", spec("k", "kids-done"))
    succeed(store, now + S, done)
    park(store, now + 2 * S, other, f"job:{other.id}", "something-else")
    before = observe(store, [live.id, lonely.id, other.id])
    expect(store.apply(w.Reconcile(now + 3 * S)), w.Reconciled(()), "nothing to reconcile")
    expect_unchanged(before, store, "the reconciler only wakes $children awaiters whose children all exist and ended")


@case("§8.4", "a stale await-children changes nothing")
def _(store, now):
    parent = start(store, now, queue="parents")
    c1, _c2 = spawn(store, now, parent.id, "kids", spec("k", "kids"), spec("k", "kids"))
    succeed(store, now + S, c1)
    expect(store.apply(w.Reclaim(now + TTL)), w.Reclaimed((parent.id,), ()), "setup: the parent's lease expired")
    before = observe(store, [parent.id], [f"job:{parent.id}"])
    expect(
        store.apply(w.AwaitChildren(now + TTL + S, parent.id, parent.attempt)),
        w.Stale(parent.id, 1),
        "await-children of a reclaimed attempt",
    )
    expect_unchanged(before, store, "a stale await-children neither parks nor clears the $children signal")
