"""The SDK adapter judge (properties/sdk/) at its edges: the mutation hunt of the judge that decides
whether an SDK in any language is conformant (docs/sdk-adapter.md). Each test kills one bug that
properties/test_sdk_adapter.py lets pass (properties/mutants/sdk_judge.py lists them): a handshake, a
reply or a value the judge must refuse, a comparison it must not weaken, a report or exit status that
must say what happened.

Fake adapters are small scripts: a raw one that speaks the protocol by hand (no database), or the
reference adapter (properties/sdk/python_adapter.py) with one rewrite of a request or a reply — the way
a broken SDK would answer. Programs for the state machine are run through `replay`, one scenario each.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from model import ops
from properties.sdk import codec, machine
from properties.sdk.codec import CLIENT_OPS, WireError
from properties.sdk.conformance import run_conformance
from properties.sdk.harness import AdapterFailure, AdapterProcess, SubprocessStore, reset
from properties.sdk.machine import Divergence, first_difference, replay

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
NOT_A_DATABASE = "postgresql://nobody@127.0.0.1:1/none"  # the raw fakes never connect
HELLO = {"protocol": 1, "sdk": "fake", "level": "client", "ops": ["ReadJob", "Enqueue"], "transactions": True}


# --- fakes ---------------------------------------------------------------------------------------------


def raw_adapter(tmp_path: Path, answer: str, hello: dict[str, Any] | None = None) -> str:
    """A hand-written adapter: hello answers `hello`; every other request r gets `answer` (a Python
    expression over r: the whole reply line's object, id included)."""
    script = tmp_path / "raw_adapter.py"
    script.write_text(
        "import json, sys\n"
        f"HELLO = {json.dumps(hello or HELLO)!r}\n"
        "for line in sys.stdin:\n"
        "    r = json.loads(line)\n"
        "    if r['op'] == 'bye':\n"
        "        break\n"
        "    if r['op'] == 'hello':\n"
        "        reply = {'id': r['id'], 'ok': True, 'result': json.loads(HELLO)}\n"
        "    else:\n"
        f"        reply = {answer}\n"
        "    print(json.dumps(reply), flush=True)\n"
    )
    return f"{PYTHON} {script}"


def rewriting_adapter(tmp_path: Path, hooks: str) -> str:
    """The reference adapter with hooks: `before(request) -> request` and/or `after(request, reply) ->
    reply` (module-level functions in `hooks`), the way an SDK with one bug answers."""
    script = tmp_path / "rewriting_adapter.py"
    head = f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom properties.sdk import python_adapter as pa\n"
    script.write_text(
        head + hooks + "\n_handle = pa.Adapter.handle\n"
        "def handle(self, request):\n"
        "    if 'before' in globals():\n"
        "        request = before(request)\n"
        "    reply = _handle(self, request)\n"
        "    if reply is not None and 'after' in globals():\n"
        "        reply = after(request, reply)\n"
        "    return reply\n"
        "pa.Adapter.handle = handle\n"
        "raise SystemExit(pa.main())\n"
    )
    return f"{PYTHON} {script}"


def replayed(command: str, url: str, code: str, env: dict[str, str] | None = None) -> BaseException | None:
    with AdapterProcess(command, url, timeout=10, env=env) as adapter:
        return replay(adapter, url, code)


class _Reference:
    """A stand-in for the reference store (what a client-level SDK's missing operations go to)."""

    def __init__(self) -> None:
        self.applied: list[Any] = []

    def apply(self, op: Any) -> Any:
        self.applied.append(op)
        return ops.NotFound(op.job_id)


def _refused(command: str, match: str) -> None:
    with pytest.raises(AdapterFailure, match=match) as raised:
        AdapterProcess(command, NOT_A_DATABASE, timeout=5).start()
    assert raised.value.kind == "handshake"


# --- the handshake (docs/sdk-adapter.md "Handshake") -------------------------------------------------------


@pytest.mark.parametrize("protocol", [0, None])
def test_a_handshake_in_another_or_no_protocol_version_is_refused(tmp_path, protocol) -> None:
    hello = {**HELLO, "protocol": protocol}
    if protocol is None:
        del hello["protocol"]
    _refused(raw_adapter(tmp_path, "None", hello), "the adapter speaks protocol")


def test_a_worker_level_sdk_missing_a_client_operation_is_refused(tmp_path) -> None:
    """A worker-level SDK names every operation — the client ones too; lacking one, its cases would be
    done by the reference (client area) or skipped, and a worker SDK would pass without implementing them."""
    hello = {**HELLO, "level": "worker", "ops": [n for n in codec.ALL_OPS if n != "ReadSignals"]}
    _refused(raw_adapter(tmp_path, "None", hello), r"missing \['ReadSignals'\]")


# --- replies (docs/sdk-adapter.md "Transport", "Errors") ---------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ("{'ok': True, 'result': {'type': 'NotFound', 'job_id': 5}}", "answers another request"),
        ("{'id': r['id'], 'ok': 1, 'result': {'type': 'NotFound', 'job_id': 5}}", "a reply is an object with ok"),
        ("{'id': r['id'], 'ok': 'true', 'result': {'type': 'NotFound', 'job_id': 5}}", "a reply is an object with ok"),
        ("{'id': r['id'], 'ok': True}", "ok: true without a result"),
    ],
    ids=["no-id", "ok-is-1", "ok-is-a-string", "no-result"],
)
def test_a_reply_that_breaks_the_transport_is_a_malformed_reply(tmp_path, answer, complaint) -> None:
    with AdapterProcess(raw_adapter(tmp_path, answer), NOT_A_DATABASE, timeout=5) as adapter:
        with pytest.raises(AdapterFailure, match=complaint) as raised:
            adapter.request(codec.encode_op(ops.ReadJob(5)))
    assert raised.value.kind == "malformed reply"


def test_an_error_class_outside_the_protocol_is_its_own_finding(tmp_path) -> None:
    answer = "{'id': r['id'], 'ok': False, 'error': 'NotImplemented', 'message': 'later'}"
    with AdapterProcess(raw_adapter(tmp_path, answer), NOT_A_DATABASE, timeout=5) as adapter:
        with pytest.raises(AdapterFailure, match="'NotImplemented' is none of") as raised:
            adapter.request(codec.encode_op(ops.ReadJob(5)))
    assert raised.value.kind == "unknown error class"


def test_an_operation_the_sdk_answers_unsupported_is_counted_as_the_references(tmp_path) -> None:
    """docs/sdk-adapter.md: the report counts what your SDK answered — an Unsupported is the reference's."""
    answer = "{'id': r['id'], 'ok': False, 'error': 'Unsupported', 'message': 'not yet'}"
    reference = _Reference()
    with AdapterProcess(raw_adapter(tmp_path, answer), NOT_A_DATABASE, timeout=5) as adapter:
        store = SubprocessStore(adapter, None, reference)  # type: ignore[arg-type]  # no harness row checks here
        assert store.apply(ops.ReadJob(5)) == ops.NotFound(5)
    assert reference.applied == [ops.ReadJob(5)]
    assert store.assisted == {"ReadJob": 1} and store.judged == {}


# --- values (docs/sdk-adapter.md "Values"): Python's True == 1 == 1.0, the codec must not ---------------------


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ({"type": "Cleared", "existed": 1}, "expected true or false"),
        ({"type": "BudgetOk", "cancel_requested": 0}, "expected true or false"),
        ({"type": "Inserted", "id": 1.0}, "expected an integer"),
        ({"type": "Emitted", "seq": 2.0}, "expected an integer"),
    ],
)
def test_a_value_that_only_compares_equal_is_not_a_vocabulary_value(data, complaint) -> None:
    """1 == True and 1.0 == 1 in Python: a codec that let them through would make the model comparison
    accept an SDK that writes numbers for booleans or floats for integers."""
    with pytest.raises(WireError, match=complaint):
        codec.from_wire(data, None)


# --- the report's first difference (docs/sdk-adapter.md "What the state machine does") --------------------


def test_a_row_only_the_database_has_is_named_as_extra() -> None:
    text = first_difference({1: "a"}, {1: "a", 2: "b"})
    assert "row 2" in text and "extra in the database" in text
    text = first_difference({1: "a", 3: "c"}, {1: "a"})
    assert "row 3" in text and "missing in the database" in text


# --- the state machine over an adapter ------------------------------------------------------------------------

SIGNAL_AFTER_PARK = "state = AdapterMachine()\nstate.signal_after_park(scope='s1', parked='go', sent='go')\n"


def assert_diverges(tmp_path: Path, db_url: str, hooks: str, code: str, finding: str) -> None:
    """A Python adapter whose requests or replies `hooks` rewrite, replaying `code`: the machine must end in a
    Divergence naming `finding`."""
    error = replayed(rewriting_adapter(tmp_path, hooks), db_url, code)
    assert isinstance(error, Divergence) and finding in str(error), error


def test_a_wrong_result_the_tables_do_not_show_is_a_divergence(db_url, tmp_path) -> None:
    """DeliverSignal's woken list: the SDK wakes the job (every row right) but reports nobody woken."""
    hooks = (
        "def after(request, reply):\n"
        "    if request.get('op') == 'DeliverSignal' and reply.get('ok'):\n"
        "        reply['result']['woken'] = []\n"
        "    return reply\n"
    )
    assert_diverges(tmp_path, db_url, hooks, SIGNAL_AFTER_PARK, "DeliverSignal results differ")


def test_an_internal_error_where_the_model_refuses_the_input_is_a_divergence(db_url, tmp_path) -> None:
    """docs/sdk-adapter.md: Internal is always a finding — never the same class as InvalidInput. This SDK
    inserts an event whose seq is not above the stream's last and reports the key violation as Internal."""
    hooks = (
        "SEEN = set()\n"
        "def after(request, reply):\n"
        "    args = request.get('args') or {}\n"
        "    if request.get('op') == 'EmitEvent' and args.get('seq') is not None:\n"
        "        key = (args['job_id'], args['seq'])\n"
        "        if key in SEEN:\n"
        "            return {'ok': False, 'error': 'Internal', 'message': 'duplicate key (job_id, seq)'}\n"
        "        SEEN.add(key)\n"
        "    return reply\n"
    )
    code = (  # an event seq not above the stream's last: the model refuses it with InvalidInput
        "state = AdapterMachine()\nstate.both(Enqueue(state.now, (JobSpec('q', 'echo'),)))\n"
        "state.both(EmitEvent(state.now, 1, {'a': 1}, 1))\nstate.both(EmitEvent(state.now, 1, {'a': 2}, 1))\n"
    )
    assert_diverges(tmp_path, db_url, hooks, code, "Internal")


def test_a_millisecond_clock_is_caught_by_the_machines_microseconds(db_url, tmp_path) -> None:
    """The machine's every `now` carries microseconds (the conformance cases' clock has none): an SDK that
    reads time into a millisecond clock (a JavaScript Date) must diverge."""
    hooks = (
        "from datetime import datetime\n"
        "def before(request):\n"
        "    now = (request.get('args') or {}).get('now')\n"
        "    if now:\n"
        "        t = datetime.fromisoformat(now)\n"
        "        request['args']['now'] = t.replace(microsecond=t.microsecond // 1000 * 1000).isoformat()\n"
        "    return request\n"
    )
    code = "state = AdapterMachine()\nstate.both(Enqueue(state.now, (JobSpec('q', 'echo'),)))\n"
    assert_diverges(tmp_path, db_url, hooks, code, "table jobs differs")


def test_the_printed_program_is_the_last_examples_only(db_url) -> None:
    """PROGRAM is what the report prints as the shrunk program: a machine starts it afresh."""
    command = f"{PYTHON} -m properties.sdk.python_adapter"
    first = "state = AdapterMachine()\nstate.both(ReadJob(7))\n"
    second = "state = AdapterMachine()\nstate.both(ReadJob(8))\n"
    with AdapterProcess(command, db_url, timeout=10) as adapter:
        assert replay(adapter, db_url, first) is None
        assert replay(adapter, db_url, second) is None
    assert [codec.encode_op(ops.ReadJob(8))] == machine.PROGRAM


def test_the_printed_program_holds_the_request_the_adapter_crashed_on(db_url) -> None:
    command = f"{PYTHON} -m properties.sdk.python_adapter"
    code = "state = AdapterMachine()\nstate.both(ReadJob(1))\nstate.both(Cancel(state.now, 1))\n"
    error = replayed(command, db_url, code, env={"BELAY_ADAPTER_FAULT": "crash:Cancel"})
    assert isinstance(error, AdapterFailure) and error.kind == "crash"
    assert [p["op"] for p in machine.PROGRAM] == ["ReadJob", "Cancel"]


def test_a_transactional_enqueue_outside_the_transaction_diverges_after_rollback(db_url, tmp_path) -> None:
    """The SDK enqueues on its own connection: the rollback leaves the jobs behind (the app row, written in
    the transaction, is rolled back, so only the table comparison sees it)."""
    hooks = "def before(request):\n    request.pop('tx', None)\n    return request\n"
    code = "state = AdapterMachine()\nstate.transactional_enqueue(specs=[JobSpec('q', 'echo')], commit=False)\n"
    assert_diverges(tmp_path, db_url, hooks, code, "table jobs differs")


def test_a_wrong_result_of_a_transactional_enqueue_is_a_divergence(db_url, tmp_path) -> None:
    hooks = (
        "def after(request, reply):\n"
        "    if request.get('tx') and reply.get('ok'):\n"
        "        for outcome in reply['result']['outcomes']:\n"
        "            outcome['id'] = outcome.get('id', 0) + 1000\n"
        "    return reply\n"
    )
    code = "state = AdapterMachine()\nstate.transactional_enqueue(specs=[JobSpec('q', 'echo')], commit=True)\n"
    assert_diverges(tmp_path, db_url, hooks, code, "transactional Enqueue results differ")


def test_the_nulls_first_scenario_nulls_the_later_job(db_url) -> None:
    """claim_unscheduled_first: of two equal jobs the *later* one gets ready_at NULL, so NULLS FIRST claims
    it before the older one. Nulling the older one instead, NULLS FIRST claims what an SDK ordering by
    (priority, id) alone — ignoring ready_at — claims too, and the scenario no longer tells them apart."""
    command = f"{PYTHON} -m properties.sdk.python_adapter"
    code = "state = AdapterMachine()\nstate.claim_unscheduled_first(priority=0)\n"
    assert replayed(command, db_url, code) is None
    (enqueue,) = [p for p in machine.PROGRAM if p.get("op") == "Enqueue"]
    (nulled,) = [p for p in machine.PROGRAM if "harness_sql" in p]
    assert len(enqueue["args"]["jobs"]) == 2 and nulled["params"] == [2]  # ids 1 and 2 on a reset database


# --- conformance over an adapter -------------------------------------------------------------------------


def test_a_client_level_sdk_gets_no_pass_for_worker_cases_the_reference_would_do(db_url, tmp_path) -> None:
    """docs/sdk-adapter.md: a case needing an operation the SDK does not name is not applicable, never
    passed — only client-area cases have the reference do the worker setup."""
    fake = rewriting_adapter(
        tmp_path,
        "def after(request, reply):\n"
        "    if request.get('op') == 'hello' and reply.get('ok'):\n"
        f"        reply['result'].update(level='client', ops={list(CLIENT_OPS)!r})\n"
        "    return reply\n",
    )
    with AdapterProcess(fake, db_url) as adapter:
        run = run_conformance(adapter, db_url, only="a snooze readies the job at until")
    assert adapter.level == "client"
    assert [r.status for r in run.runs] == ["skipped"], run.table()


def test_a_crash_fails_its_case_and_the_next_case_gets_a_restarted_adapter(db_url) -> None:
    command = f"{PYTHON} -m properties.sdk.python_adapter"
    with AdapterProcess(command, db_url, timeout=10, env={"BELAY_ADAPTER_FAULT": "crash:ClearSignal"}) as adapter:
        run = run_conformance(
            adapter,
            db_url,
            only=["a signal keeps the latest payload", "reading signals returns only the requested scopes"],
        )
    assert [r.status for r in run.runs] == ["failed", "passed"], run.table()
    assert "crash" in run.runs[0].message


def test_reset_empties_every_table_a_case_may_have_written(db_url) -> None:
    from datetime import timedelta

    from impl.store import PgStore
    from model import worker_ops as w
    from model.queues import QueueOpts

    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    with PgStore(db_url, pool_size=1) as store:
        store.apply(ops.Enqueue(now, (ops.JobSpec("q", "echo"),)))
        store.apply(ops.DeliverSignal(now, "s", "go", {"x": 1}))
        store.apply(ops.PutQueue(now, "q", {"rate": {"allowed": 5, "period": 60}}))
        store.apply(ops.PutCron(now, "c", "* * * * *", "echo", None, {}, False))
        opts = QueueOpts.parse({"rate": {"allowed": 5, "period": 60}})
        store.apply(w.Claim(now, "q", "n", 1, timedelta(seconds=30), opts))
    with psycopg.connect(db_url, autocommit=True) as conn:
        reset(conn)
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'belay%%'"
            ).fetchall()
        ]
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}  # type: ignore[index]
        assert counts["belay_signals"] == 0 and counts["belay_jobs"] == 0
        left = {t: n for t, n in counts.items() if n and t != "belay_meta"}  # belay_meta: the schema version
        assert not left, left
        assert conn.execute("SELECT nextval('belay_jobs_id_seq')").fetchone() == (1,)


def test_a_commit_that_loses_the_application_row_is_a_finding(db_url, tmp_path) -> None:
    """§5.1 over the protocol: after commit the caller's row must be there (this adapter writes it
    nowhere, as one whose app_row and enqueue run on different connections would)."""
    answer = (
        "{'id': r['id'], 'ok': True, 'result': "
        "{'type': 'Enqueued', 'outcomes': [{'type': 'Inserted', 'id': 1}]} if r['op'] == 'Enqueue' else None}"
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        reset(conn)
        with AdapterProcess(raw_adapter(tmp_path, answer), db_url, timeout=5) as adapter:
            store = SubprocessStore(adapter, conn)
            with pytest.raises(AssertionError, match="after commit the application row"):
                with store.caller_connection() as tx:
                    store.apply(ops.Enqueue(datetime(2026, 1, 1, tzinfo=UTC), (ops.JobSpec("q", "w"),)), conn=tx)
                    tx.commit()


# --- the command line (docs/sdk-adapter.md: exit 0 when both parts pass, 1 on a finding) ---------------------

_CONFORMANCE_ONLY_BUG = (
    "def after(request, reply):\n"
    "    if str((request.get('args') or {}).get('now', '')).startswith('2026-11-30') and reply.get('ok'):\n"
    "        return {'ok': False, 'error': 'Internal', 'message': 'planted: conformance clock only'}\n"
    "    return reply\n"
)


def test_the_command_line_exits_one_when_only_conformance_failed(db_url, tmp_path, capsys) -> None:
    from properties.sdk.__main__ import main

    fake = rewriting_adapter(tmp_path, _CONFORMANCE_ONLY_BUG)
    code = main(["--adapter", fake, "--database-url", db_url, "--only", "§5.2", "--examples", "2", "--steps", "3"])
    out = capsys.readouterr().out
    assert "FAILED " in out and "PASSED: every result" in out, out  # the machine passed, conformance did not
    assert code == 1


def test_the_command_line_exits_one_when_a_replay_fails(db_url, tmp_path, capsys) -> None:
    from properties.sdk.__main__ import main

    fake = rewriting_adapter(
        tmp_path,
        "def after(request, reply):\n"
        "    if request.get('op') == 'DeliverSignal' and reply.get('ok'):\n"
        "        reply['result']['woken'] = []\n"
        "    return reply\n",
    )
    program = tmp_path / "program.py"
    program.write_text(SIGNAL_AFTER_PARK)
    code = main(["--adapter", fake, "--database-url", db_url, "--replay", str(program)])
    assert "replay: FAILED" in capsys.readouterr().out
    assert code == 1


def test_the_command_lines_timeout_bounds_the_handshake(capsys) -> None:
    from properties.sdk.__main__ import main

    started = time.monotonic()
    code = main(["--adapter", "sleep 60", "--database-url", NOT_A_DATABASE, "--timeout", "1"])
    assert code == 1 and "timeout" in capsys.readouterr().err
    assert time.monotonic() - started < 8, "--timeout was not applied"
