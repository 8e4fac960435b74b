"""The scenario catalogue: each race of the contract in a correct and a broken variant (and, where the
explorer found something worth keeping, a named extra variant).

    scenario("r1", "broken", size=2)      -> Scenario
    catalogue()                           -> every (name, variant, size) in SIZES

Sizes are the configurations checked exhaustively by the tests and the benchmark: the number of
children (r1, r2, lock_order) or waiters (park_wake); settlement and cancel_ack have one shape.
"""

from __future__ import annotations

from types import ModuleType

from model.explorer.scenarios import cancel_ack, lock_order, park_wake, r1, r2, settlement
from model.explorer.search import Scenario

MODULES: dict[str, ModuleType] = {
    "r1": r1,  # §11 R1: count-gated `$children` vs unconditional signal + re-verify
    "r2": r2,  # §11 R2: await-children with and without the reconciler backstop
    "park_wake": park_wake,  # §7/§8.1: await park vs delivery, with and without the scope lock
    "lock_order": lock_order,  # §7: workflow lock before scope lock, vs a reversed path
    "settlement": settlement,  # §8.6: retry of a dependent re-held and settled, vs straight to ready
    "cancel_ack": cancel_ack,  # finding (fixed): cancel of a running member vs its ack
}
SIZES: dict[str, tuple[int, ...]] = {
    "r1": (2, 3),
    "r2": (1, 2),
    "park_wake": (1, 2),
    "lock_order": (2, 3),
    "settlement": (1,),
    "cancel_ack": (1,),
}


def variants(name: str) -> tuple[str, ...]:
    variants: tuple[str, ...] = MODULES[name].VARIANTS
    return variants


def scenario(name: str, variant: str, size: int | None = None) -> Scenario:
    if name not in MODULES:
        raise KeyError(f"no scenario {name!r}; known: {', '.join(MODULES)}")
    made: Scenario = MODULES[name].scenario(variant, SIZES[name][0] if size is None else size)
    return made


def catalogue(names: tuple[str, ...] | None = None) -> list[Scenario]:
    """Every variant of every scenario at every catalogued size."""
    return [
        MODULES[name].scenario(variant, size)
        for name in (names or tuple(MODULES))
        for variant in MODULES[name].VARIANTS
        for size in SIZES[name]
    ]


__all__ = ["MODULES", "SIZES", "catalogue", "scenario", "variants"]
