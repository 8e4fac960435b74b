"""docs/architecture.md's checklist stays true: every operation of the shared vocabulary has a model
handler, a PostgreSQL store handler, at least one conformance case and a stateful rule.

The vocabulary is found without asking the handler tables: every public dataclass of model/ops.py and
model/worker_ops.py is an operation unless it is a result (a member of some model handler's return
type) or an input value (a field type of an operation without a `now` of its own, e.g. JobSpec, Backoff, the ack outcomes). A
new operation therefore shows up here the moment its dataclass exists. Conformance coverage is
observed, not guessed: every case runs on the in-memory model through a recording wrapper. Stateful
coverage is read from properties/stateful.py with `ast`: the operation classes each @rule (or
@initialize) method names, following the machine's own helper methods it calls.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

from impl.store import client_store as pg_store
from model import ops
from model import store as model_store
from model import worker_ops as w
from properties.conformance import CASES

ROOT = Path(__file__).resolve().parent.parent


def _members(tp: object) -> set[type]:
    """The classes a type hint names (through unions, Optional, tuples)."""
    if isinstance(tp, type):
        return {tp}
    return {m for arg in typing.get_args(tp) for m in _members(arg)}


def vocabulary() -> set[type]:
    classes = {
        obj
        for module in (ops, w)
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
    }
    results: set[type] = set()
    for handler in model_store.HANDLERS.values():
        results |= _members(typing.get_type_hints(handler, vars(model_store)).get("return"))
    grown = True
    while grown:  # a result's fields hold results too (Enqueued holds Inserted | Duplicate)
        inner = {
            m
            for r in results
            if dataclasses.is_dataclass(r)
            for hint in typing.get_type_hints(r, vars(inspect.getmodule(r))).values()
            for m in _members(hint)
        }
        grown = not inner <= results
        results |= inner
    candidates = classes - results
    inputs: set[type] = set()
    for op in candidates:
        for hint in typing.get_type_hints(op, vars(inspect.getmodule(op))).values():
            inputs |= _members(hint)
    # an input value carries no `now` of its own (JobSpec, Backoff, Succeed…); Ack inside AckMany does
    return candidates - {
        i for i in inputs if dataclasses.is_dataclass(i) and "now" not in {f.name for f in dataclasses.fields(i)}
    }


class _Recorder:
    def __init__(self, seen: set[type]) -> None:
        self.inner = model_store.ModelStore()
        self.seen = seen
        self.supports_transactional_enqueue = False

    def apply(self, op: object, conn: object = None) -> object:
        self.seen.add(type(op))
        return self.inner.apply(op, conn)


def conformance_coverage() -> set[type]:
    seen: set[type] = set()
    for case in CASES:
        try:
            case(_Recorder(seen), case_now())
        except Exception:  # noqa: BLE001 - coverage only; test_conformance judges the outcomes
            pass
    return seen


def case_now():
    from properties.conformance import DEFAULT_NOW

    return DEFAULT_NOW


def stateful_coverage(source: str) -> set[str]:
    """Names of classes referenced by @rule/@initialize methods (and the helpers they call)."""
    tree = ast.parse(source)
    methods: dict[str, ast.FunctionDef] = {}
    rules: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    methods[item.name] = item
                    for deco in item.decorator_list:
                        target = deco.func if isinstance(deco, ast.Call) else deco
                        if isinstance(target, ast.Name) and target.id in ("rule", "initialize"):
                            rules.append(item.name)
    names: set[str] = set()
    todo, done = list(rules), set()
    while todo:
        name = todo.pop()
        if name in done or name not in methods:
            continue
        done.add(name)
        for node in ast.walk(methods[name]):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "self":
                    todo.append(node.attr)
                else:
                    names.add(node.attr)
            elif isinstance(node, ast.Name):
                names.add(node.id)
    return names


def test_the_vocabulary_is_found_from_the_dataclasses():
    vocab = vocabulary()
    assert {ops.Enqueue, ops.Cancel, w.Claim, w.Ack, w.RecordStep, w.Prune, ops.ReadJob} <= vocab
    assert not {ops.JobSpec, ops.WorkflowMember, w.Backoff, w.Succeed, w.Fail, ops.Inserted, w.Stale, w.Claimed} & vocab


def test_every_operation_has_a_model_handler_a_store_handler_a_conformance_case_and_a_stateful_rule():
    vocab = vocabulary()
    covered_by_cases = conformance_coverage()
    covered_by_rules = stateful_coverage((ROOT / "properties" / "stateful.py").read_text())
    missing = {
        op.__name__: [
            what
            for what, ok in (
                ("model handler (model/store.py HANDLERS)", op in model_store.HANDLERS),
                ("store handler (impl/store/client_store.py _HANDLERS)", op in pg_store._HANDLERS),
                ("conformance case (properties/conformance/)", op in covered_by_cases),
                ("stateful rule (properties/stateful.py)", op.__name__ in covered_by_rules),
            )
            if not ok
        ]
        for op in sorted(vocab, key=lambda c: c.__name__)
    }
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, "operations missing a piece of docs/architecture.md's checklist:\n" + "\n".join(
        f"  {name}: {', '.join(v)}" for name, v in sorted(missing.items())
    )


def test_the_stateful_scan_follows_helpers_and_ignores_undecorated_methods():
    source = (
        "class M:\n"
        "    @rule()\n    def a(self):\n        self._h()\n"
        "    def _h(self):\n        self.both(w.Claim(1))\n"
        "    def unused(self):\n        self.both(ops.Retry(1))\n"
        "    @initialize(target=x)\n    def seed(self):\n        ops.Enqueue(1)\n"
    )
    names = stateful_coverage(source)
    assert {"Claim", "Enqueue"} <= names and "Retry" not in names
