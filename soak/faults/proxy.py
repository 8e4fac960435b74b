"""A fault-injecting TCP proxy between every soak worker and PostgreSQL (issue 13: network faults).

The harness owns one `Proxy`: an asyncio event loop on a daemon thread with one *listener* per route —
`w1`, `w2`, … (one per worker slot, so a fault hits one worker), `harness` (the driver, progress,
snapshot; never faulted) and `repl` (the standby's replication stream, when failover is on). Every
listener forwards to the same *target*, the current primary; `retarget` moves every route to a new
primary after a failover, so workers reconnect through the address they already have.

Faults, per listener, each until `heal(name)`:

- `partition`  — every open connection is reset and new ones are reset right after accept: the
                 worker keeps running but reaches no one (the classic zombie). The client sees
                 "server closed the connection unexpectedly" at once, like a firewall that rejects.
- `stall`      — open connections stop forwarding in both directions; new connections are accepted
                 and then hang the same way (the startup packet goes nowhere). Queries hang until the
                 heal (then the buffered bytes flow, late) or until the *client* gives up: a
                 blackhole, the fault only client-side deadlines survive (docs/connections.md).
- `stall_one`  — like stall, but only one open connection, picked at random: the worker's other
                 connections keep working, so a worker whose renewals share one blocked thread shows.
- `latency`    — every chunk is delayed by the given seconds, in both directions.

Why not HAProxy (Debian's, with its runtime API)? Its runtime API can disable a server and kill its
sessions (our `partition`) but cannot freeze established sessions in place or delay bytes; stalls and
latency would need tc/netem (root, kernel modules — unavailable in containers and on CI). One small
proxy that does all four, in-process and tested (tests/test_soak_proxy.py), is the simpler honest choice.
Throughput through it is ample for a soak (tens of MB/s on one core); it is not a production proxy.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Any

CHUNK = 65536


@dataclass(eq=False)
class _Conn:
    listener: _Listener
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    stalled_alone: bool = False
    closed: bool = False

    def abort(self) -> None:
        self.closed = True
        self.flowing.set()  # wake a pump parked on a stall, which then sees `closed`
        for w in (self.client, self.server):
            if w is not None:
                w.transport.abort()


@dataclass(eq=False)
class _Listener:
    name: str
    server: asyncio.base_events.Server | None = None
    port: int = 0
    partitioned: bool = False
    stalled: bool = False
    latency: float = 0.0
    conns: set[_Conn] = field(default_factory=set)
    accepted: int = 0
    refused: int = 0


class Proxy:
    """Thread-safe facade over the event loop; every public method blocks until the loop applied it."""

    def __init__(
        self, target_host: str, target_port: int, *, host: str = "127.0.0.1", rng: random.Random | None = None
    ) -> None:
        self.host = host
        self.target = (target_host, target_port)
        self.rng = rng or random.Random()
        self.listeners: dict[str, _Listener] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="soak-proxy", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # --- routes -----------------------------------------------------------------------------------------

    def listen(self, name: str) -> int:
        """Open listener `name` on a free port of `host`; returns the port."""
        if name in self.listeners:
            return self.listeners[name].port

        async def go() -> int:
            lst = _Listener(name)
            lst.server = await asyncio.start_server(lambda r, w: self._accept(lst, r, w), self.host, 0)
            lst.port = lst.server.sockets[0].getsockname()[1]
            self.listeners[name] = lst
            return lst.port

        return self._call(go())

    def url(self, name: str, url: str) -> str:
        """`url` (a postgresql:// URL of the target) rewritten to go through listener `name`."""
        import urllib.parse

        port = self.listen(name)
        parts = urllib.parse.urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{self.host}:{port}" if userinfo else f"{self.host}:{port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def retarget(self, host: str, port: int) -> None:
        """Send every route to a new server; connections to the old one are reset."""

        async def go() -> None:
            self.target = (host, port)
            for lst in self.listeners.values():
                for c in list(lst.conns):
                    c.abort()

        self._call(go())

    # --- faults -----------------------------------------------------------------------------------------

    def partition(self, name: str) -> int:
        """Reset every connection of `name` and refuse new ones until heal; returns how many were cut."""

        async def go() -> int:
            lst = self.listeners[name]
            lst.partitioned = True
            cut = len(lst.conns)
            for c in list(lst.conns):
                c.abort()
            return cut

        return self._call(go())

    def stall(self, name: str) -> int:
        """Stop forwarding on every connection of `name`, new ones included, until heal."""

        async def go() -> int:
            lst = self.listeners[name]
            lst.stalled = True
            for c in lst.conns:
                c.flowing.clear()
            return len(lst.conns)

        return self._call(go())

    def stall_one(self, name: str) -> bool:
        """Stop forwarding on one open connection of `name` (random) until heal; False if none is open."""

        async def go() -> bool:
            lst = self.listeners[name]
            open_ = sorted((c for c in lst.conns if c.flowing.is_set()), key=id)
            if not open_:
                return False
            c = self.rng.choice(open_)
            c.stalled_alone = True
            c.flowing.clear()
            return True

        return self._call(go())

    def set_latency(self, name: str, seconds: float) -> None:
        async def go() -> None:
            self.listeners[name].latency = max(0.0, seconds)

        self._call(go())

    def heal(self, name: str) -> None:
        """End every fault on `name`: accept again, forward again (stalled bytes flow now), no latency."""

        async def go() -> None:
            lst = self.listeners[name]
            lst.partitioned = lst.stalled = False
            lst.latency = 0.0
            for c in lst.conns:
                c.stalled_alone = False
                c.flowing.set()

        self._call(go())

    def stats(self) -> dict[str, dict[str, Any]]:
        async def go() -> dict[str, dict[str, Any]]:
            return {
                n: {
                    "port": lst.port,
                    "open": len(lst.conns),
                    "accepted": lst.accepted,
                    "refused": lst.refused,
                    "partitioned": lst.partitioned,
                    "stalled": lst.stalled,
                    "latency": lst.latency,
                }
                for n, lst in self.listeners.items()
            }

        return self._call(go())

    def close(self) -> None:
        async def go() -> None:
            for lst in self.listeners.values():
                if lst.server is not None:
                    lst.server.close()
                for c in list(lst.conns):
                    c.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            try:
                self._call(go())
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(timeout=5)

    # --- the loop side ------------------------------------------------------------------------------------

    async def _accept(self, lst: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if lst.partitioned:
            lst.refused += 1
            writer.transport.abort()
            return
        lst.accepted += 1
        conn = _Conn(lst, writer)
        if not lst.stalled:
            conn.flowing.set()
        lst.conns.add(conn)
        try:
            try:
                s_reader, s_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return  # the target is down (crash-restart, failover): the client sees a reset
            conn.server = s_writer
            if lst.partitioned:  # partitioned while we connected
                return
            await asyncio.gather(self._pump(conn, reader, s_writer), self._pump(conn, s_reader, writer))
        except asyncio.CancelledError:
            # The proxy is shutting down. Ending the connection's task normally keeps asyncio's
            # start_server callback from logging each cancelled connection as an error.
            return
        finally:
            lst.conns.discard(conn)
            conn.abort()

    async def _pump(self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if conn.listener.latency:
                    await asyncio.sleep(conn.listener.latency)
                await conn.flowing.wait()
                if conn.closed:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            conn.abort()  # one side ended: end both (PostgreSQL's protocol has no half-close)
