"""The reference adapter: the project's own SDK (impl/store/client_store.py's PgStore, worker level) behind the
SDK adapter protocol (docs/sdk-adapter.md), so CI proves the protocol end to end.

    python -m properties.sdk.python_adapter

Reads one JSON request per line on stdin, writes one JSON reply per line on stdout; logs go to stderr.

BELAY_ADAPTER_FAULT=<kind>:<Op> plants a protocol fault for the harness's own tests (never set in a real
run): crash (exit without replying), hang (never reply), garbage (a line that is not JSON), unknown (a
result of a type outside the vocabulary), wrong-id (a reply to another request) — each when the named
operation arrives.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

import psycopg

from impl.store import PgStore
from model import ops
from properties.sdk.codec import ALL_OPS, WireError, decode_op, to_wire

PROTOCOL = 1
APP_TABLE = "belay_adapter_app"


class Adapter:
    def __init__(self) -> None:
        self.store: PgStore | None = None
        self.url = ""
        self.tx: psycopg.Connection | None = None
        fault = os.environ.get("BELAY_ADAPTER_FAULT", "")
        self.fault_kind, _, self.fault_op = fault.partition(":")

    def handle(self, request: dict[str, Any]) -> dict[str, Any] | None:
        op = request.get("op")
        if op == "hello":
            return self.hello(request)
        if self.store is None:
            return {"ok": False, "error": "InvalidInput", "message": "the first request must be hello"}
        if op == "begin":
            if self.tx is not None:
                return {"ok": False, "error": "InvalidInput", "message": "a transaction is already open"}
            self.tx = psycopg.connect(self.url)  # not autocommit: the first statement opens the transaction
            return {"ok": True, "result": None}
        if op == "app_row":
            if self.tx is None:
                return {"ok": False, "error": "InvalidInput", "message": "app_row needs an open transaction"}
            self.tx.execute(f"INSERT INTO {APP_TABLE} (key) VALUES (%s)", (request["key"],))
            return {"ok": True, "result": None}
        if op in ("commit", "rollback"):
            if self.tx is None:
                return {"ok": False, "error": "InvalidInput", "message": f"{op} without an open transaction"}
            ending, self.tx = self.tx, None
            try:
                ending.commit() if op == "commit" else ending.rollback()
            finally:
                ending.close()
            return {"ok": True, "result": None}
        if op == "bye":
            return None
        self.plant(op)
        if self.fault_kind == "unknown" and op == self.fault_op:
            return {"ok": True, "result": {"type": "Mystery", "id": 1}}
        try:
            decoded = decode_op(request)
        except ops.InvalidInput as exc:
            return {"ok": False, "error": "InvalidInput", "message": str(exc)}
        except WireError as exc:
            return {"ok": False, "error": "InvalidInput", "message": f"malformed request: {exc}"}
        conn: psycopg.Connection | None = None
        if request.get("tx"):
            if self.tx is None:
                return {"ok": False, "error": "InvalidInput", "message": "tx: true but no transaction is open"}
            conn = self.tx
        try:
            return {"ok": True, "result": to_wire(self.store.apply(decoded, conn=conn))}
        except ops.InvalidInput as exc:
            return {"ok": False, "error": "InvalidInput", "message": str(exc)}
        except ops.IncompatibleSchema as exc:
            return {"ok": False, "error": "IncompatibleSchema", "message": str(exc)}
        except OverflowError as exc:
            return {"ok": False, "error": "Overflow", "message": str(exc)}

    def hello(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("version") != PROTOCOL:
            return {"ok": False, "error": "Unsupported", "message": f"this adapter speaks protocol {PROTOCOL}"}
        self.url = request["database_url"]
        self.store = PgStore(self.url, schema=request.get("schema", "public"), pool_size=2)
        result = {"protocol": PROTOCOL, "sdk": "belay-toolkit impl (Python)", "level": "worker"}
        return {"ok": True, "result": {**result, "ops": list(ALL_OPS), "transactions": True}}

    def plant(self, op: Any) -> None:
        if op != self.fault_op:
            return
        if self.fault_kind == "crash":
            os._exit(3)
        if self.fault_kind == "hang":
            time.sleep(3600)
        if self.fault_kind == "garbage":
            sys.stdout.write("this is not JSON\n")
            sys.stdout.flush()
            time.sleep(3600)

    def close(self) -> None:
        if self.tx is not None:
            self.tx.close()
        if self.store is not None:
            self.store.close()


def main() -> int:
    adapter = Adapter()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError:
                reply: dict[str, Any] | None = {"ok": False, "error": "InvalidInput", "message": "not JSON"}
                request = {}
            else:
                try:
                    reply = adapter.handle(request)
                except Exception as exc:  # noqa: BLE001 - reported to the harness as Internal, with the trace
                    trace = traceback.format_exc(limit=4)
                    reply = {"ok": False, "error": "Internal", "message": f"{type(exc).__name__}: {exc}\n{trace}"}
            if reply is None:
                break
            reply["id"] = request.get("id")
            if adapter.fault_kind == "wrong-id" and request.get("op") == adapter.fault_op:
                reply["id"] = -1
            sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
            sys.stdout.flush()
    finally:
        adapter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
