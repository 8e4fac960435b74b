"""The harness side of the SDK adapter protocol (docs/sdk-adapter.md): an adapter subprocess, and a
store that speaks to it, so the conformance suite and the state machine judge any SDK as one more store.

    with AdapterProcess("node adapters/node/adapter.js", url) as adapter:
        store = SubprocessStore(adapter, harness_conn)
        store.apply(ops.Enqueue(now, (JobSpec("q", "w"),)))

Every way an adapter can misbehave on the wire — it dies, writes a line that is not a reply, answers
late or never, answers another request, returns a value outside the vocabulary, names an error class
the protocol does not know — raises `AdapterFailure` whose message names the finding and the request
(never a hang: each request has a deadline, after which the process is killed).
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from model import ops
from properties.conformance import NotApplicable
from properties.sdk.codec import ALL_OPS, ERROR_CLASSES, WireError, encode_op, from_wire

PROTOCOL = 1
APP_TABLE = "belay_adapter_app"
DEFAULT_TIMEOUT = float(os.environ.get("BELAY_ADAPTER_TIMEOUT", "20"))


class AdapterFailure(Exception):
    """The adapter broke the protocol (crash, malformed line, timeout, unknown result): a finding."""

    def __init__(self, kind: str, detail: str, request: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.request = request
        text = f"{kind}: {detail}"
        if request is not None:
            shown = json.dumps(request, separators=(",", ":"))
            text += f"\n  request #{request.get('id')}: {shown[:600]}{' ...' if len(shown) > 600 else ''}"
        super().__init__(text)


class AdapterError(Exception):
    """The adapter answered with an error class the operation's contract does not allow (Internal: an
    exception inside the SDK). Compared by class in the state machine, a finding in conformance cases."""

    def __init__(self, error: str, message: str, request: dict[str, Any]) -> None:
        self.error = error
        super().__init__(f"{error}: {message.strip()[:800]}\n  request #{request.get('id')}: {_show(request)}")


def _show(request: dict[str, Any]) -> str:
    shown = json.dumps(request, separators=(",", ":"))
    return shown[:600] + (" ..." if len(shown) > 600 else "")


class AdapterProcess:
    """One adapter subprocess: the handshake, then one request and one reply per line."""

    def __init__(
        self,
        command: str,
        database_url: str,
        *,
        schema: str = "public",
        timeout: float = DEFAULT_TIMEOUT,
        env: dict[str, str] | None = None,
    ) -> None:
        self.command = command
        self.database_url = database_url
        self.schema = schema
        self.timeout = timeout
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.stderr: deque[str] = deque(maxlen=40)
        self.next_id = 0
        self.level = ""
        self.sdk = ""
        self.ops: frozenset[str] = frozenset()
        self.transactions = False
        self.starts = 0

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> AdapterProcess:
        env = {**os.environ, **(self.env or {})}
        self.proc = subprocess.Popen(
            self.command,
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",  # bytes that are not UTF-8 make a malformed reply, not a dead reader
            bufsize=1,
            env=env,
            start_new_session=True,  # its own process group: a timeout kills the adapter and its children
        )
        self.starts += 1
        self.replies = queue.Queue()
        threading.Thread(target=self._pump_stdout, args=(self.proc, self.replies), daemon=True).start()
        threading.Thread(target=self._pump_stderr, args=(self.proc,), daemon=True).start()
        hello = self.request(
            {"op": "hello", "version": PROTOCOL, "database_url": self.database_url, "schema": self.schema}
        )
        self._handshake(hello)
        return self

    def _handshake(self, result: Any) -> None:
        request = {"op": "hello", "version": PROTOCOL}
        if not isinstance(result, dict):
            raise AdapterFailure("handshake", f"hello's result must be an object, got {result!r}", request)
        level, named = result.get("level"), result.get("ops")
        if result.get("protocol") != PROTOCOL:
            raise AdapterFailure("handshake", f"the adapter speaks protocol {result.get('protocol')!r}, not 1", request)
        if level not in ("client", "worker"):
            raise AdapterFailure("handshake", f"level must be client or worker, got {level!r}", request)
        if not isinstance(named, list) or not all(isinstance(n, str) for n in named):
            raise AdapterFailure("handshake", "ops must be an array of operation names", request)
        unknown = sorted(set(named) - set(ALL_OPS))
        if unknown:
            raise AdapterFailure("handshake", f"unknown operations {unknown}", request)
        missing = sorted(set(ALL_OPS) - set(named))
        if level == "worker" and missing:
            raise AdapterFailure(
                "handshake", f"a worker-level SDK implements every operation; missing {missing}", request
            )
        self.level, self.ops = level, frozenset(named)
        self.sdk = str(result.get("sdk", "?"))
        self.transactions = result.get("transactions") is True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> AdapterProcess:
        """Restart the adapter if a previous finding killed it."""
        if not self.alive():
            self.kill()
            self.start()
        return self

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def close(self) -> None:
        if self.alive() and self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"id": self.next_id + 1, "op": "bye"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=3)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        self.kill()

    def __enter__(self) -> AdapterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _pump_stdout(proc: subprocess.Popen[str], replies: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                replies.put(line)
        except (OSError, ValueError):
            pass
        replies.put(None)  # EOF: the adapter exited or closed stdout

    def _pump_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                self.stderr.append(line.rstrip("\n"))
        except (OSError, ValueError):
            pass

    # --- one request --------------------------------------------------------------------------------

    def _died(self, request: dict[str, Any], when: str) -> AdapterFailure:
        proc = self.proc
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
        tail = "\n    ".join(list(self.stderr)[-8:])
        self.kill()
        detail = f"the adapter exited (code {code}) {when}" + (f"; its stderr ends:\n    {tail}" if tail else "")
        return AdapterFailure("crash", detail, request)

    def request(self, message: dict[str, Any]) -> Any:
        """Send one request; the reply's result, or raise (the SDK's error class, or AdapterFailure)."""
        if not self.alive() or self.proc is None or self.proc.stdin is None:
            raise AdapterFailure("crash", "the adapter is not running", message)
        self.next_id += 1
        request = {"id": self.next_id, **message}
        line = json.dumps(request, separators=(",", ":"), ensure_ascii=False)
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            raise self._died(request, "before the request could be written") from None
        deadline = time.monotonic() + self.timeout
        try:
            raw = self.replies.get(timeout=max(deadline - time.monotonic(), 0))
        except queue.Empty:
            tail = "\n    ".join(list(self.stderr)[-5:])
            self.kill()
            raise AdapterFailure(
                "timeout",
                f"no reply within {self.timeout:g} s (the adapter was killed)"
                + (f"; stderr:\n    {tail}" if tail else ""),
                request,
            ) from None
        if raw is None:
            raise self._died(request, "without replying")
        try:
            reply = json.loads(raw)
        except ValueError:
            self.kill()
            raise AdapterFailure("malformed reply", f"not a JSON line: {raw.strip()[:200]!r}", request) from None
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self.kill()
            raise AdapterFailure(
                "malformed reply", f"a reply is an object with ok: true|false, got {raw.strip()[:200]}", request
            )
        if reply.get("id") != request["id"]:
            self.kill()
            raise AdapterFailure("malformed reply", f"reply id {reply.get('id')!r} answers another request", request)
        if reply["ok"]:
            if "result" not in reply:
                raise AdapterFailure("malformed reply", "ok: true without a result", request)
            return reply["result"]
        error, text = reply.get("error"), str(reply.get("message", ""))
        if error == "InvalidInput":
            raise ops.InvalidInput(text)
        if error == "IncompatibleSchema":
            raise ops.IncompatibleSchema(text)
        if error == "Overflow":
            raise OverflowError(text)
        if error == "Unsupported":
            raise Unsupported(text)
        if error == "Internal":
            raise AdapterError("Internal", text, request)
        raise AdapterFailure(
            "unknown error class", f"{error!r} is none of {', '.join(ERROR_CLASSES)}, Internal", request
        )


class Unsupported(Exception):
    """The SDK does not implement this operation (or this variant of it) and changed nothing."""


# ---------------------------------------------------------------------------------------------
# the store


class SubprocessStore:
    """A store over an adapter. Operations the SDK does not implement go to `reference` when given
    (the project's PgStore on the same database: worker setup for a client-level SDK), else raise
    NotApplicable. `judged` and `assisted` count what the SDK answered and what the reference did."""

    def __init__(self, adapter: AdapterProcess, harness: psycopg.Connection, reference: Any = None) -> None:
        self.adapter = adapter
        self.harness = harness  # autocommit, the harness's own: app-row checks
        self.reference = reference
        self.judged: Counter[str] = Counter()
        self.assisted: Counter[str] = Counter()
        self.tx_open = False
        self.last_request: dict[str, Any] | None = None

    @property
    def supports_transactional_enqueue(self) -> bool:
        return self.adapter.transactions

    def implements(self, op: Any) -> bool:
        return type(op).__name__ in self.adapter.ops

    def apply(self, op: Any, conn: Any = None) -> Any:
        name = type(op).__name__
        if name not in self.adapter.ops:
            return self._assist(op, conn, f"the SDK ({self.adapter.level} level) does not implement {name}")
        message = encode_op(op)
        if conn is not None:
            message["tx"] = True
        self.last_request = message
        try:
            result = self.adapter.request(message)
        except Unsupported as exc:
            return self._assist(op, conn, f"the SDK answered Unsupported to {name}: {exc}")
        self.judged[name] += 1
        try:
            return from_wire(result, None, f"{name} result")
        except WireError as exc:
            raise AdapterFailure("unknown result", str(exc), {"id": self.adapter.next_id, **message}) from None

    def _assist(self, op: Any, conn: Any, why: str) -> Any:
        if self.reference is None or conn is not None:
            raise NotApplicable(why)
        self.assisted[type(op).__name__] += 1
        return self.reference.apply(op)

    @contextmanager
    def caller_connection(self) -> Iterator[CallerTransaction]:
        """The §5.1 transactional enqueue over the protocol: the adapter opens a transaction on its own
        connection and writes an application row in it; the harness then checks that the row and the
        enqueued jobs commit or roll back together."""
        if not self.adapter.transactions:
            raise NotApplicable("the adapter does not offer transactions")
        tx = CallerTransaction(self)
        self.adapter.request({"op": "begin"})
        self.tx_open = True
        self.adapter.request({"op": "app_row", "key": tx.key})
        try:
            yield tx
        finally:
            if self.tx_open:
                tx.rollback()

    def close(self) -> None:
        if self.tx_open and self.adapter.alive():
            try:
                self.adapter.request({"op": "rollback"})
            except (AdapterFailure, AdapterError, ops.InvalidInput):
                self.adapter.kill()
            self.tx_open = False


class CallerTransaction:
    """What a transactional-enqueue case holds as `conn`: commit/rollback go to the adapter."""

    count = 0

    def __init__(self, store: SubprocessStore) -> None:
        CallerTransaction.count += 1
        self.store = store
        self.key = f"app-row-{os.getpid()}-{CallerTransaction.count}"

    def _app_row(self) -> bool:
        found = self.store.harness.execute(f"SELECT 1 FROM {APP_TABLE} WHERE key = %s", (self.key,)).fetchone()
        return found is not None

    def commit(self) -> None:
        self.store.adapter.request({"op": "commit"})
        self.store.tx_open = False
        if not self._app_row():
            raise AssertionError(
                f"§5.1: after commit the application row {self.key!r} written in the transaction is missing"
            )

    def rollback(self) -> None:
        self.store.tx_open = False
        self.store.adapter.request({"op": "rollback"})
        if self._app_row():
            raise AssertionError(f"§5.1: after rollback the application row {self.key!r} is still there")


# ---------------------------------------------------------------------------------------------
# the database the harness owns

RESET_SQL = f"""
CREATE TABLE IF NOT EXISTS {APP_TABLE} (key text PRIMARY KEY);
DELETE FROM {APP_TABLE};
DELETE FROM belay_jobs; DELETE FROM belay_steps; DELETE FROM belay_events; DELETE FROM belay_signals;
DELETE FROM belay_rate; DELETE FROM belay_queues; DELETE FROM belay_crons;
SELECT setval('belay_jobs_id_seq', 1, false);
"""


def reset(conn: psycopg.Connection) -> None:
    """Empty every Belay table and restart the id sequence (a fresh, migrated store for the next case)."""
    conn.execute("SET lock_timeout = '10s'")
    conn.execute(RESET_SQL)


def split_command(command: str) -> list[str]:
    return shlex.split(command)
