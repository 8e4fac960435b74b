"""Who may act: the dashboard token, an authorizer, server-side sessions, CSRF tokens, the bind rule.

belay-operations.txt, "The dashboard": mutations require "either a dashboard token or the same
authorizer: contract as the MCP server"; a tokenless dashboard is read-only; it binds 127.0.0.1 by
default. Here:

- a dashboard started with neither a token nor an authorizer never mutates (every action endpoint
  answers 403 saying so);
- with a token, a request may act if it carries `Authorization: Bearer <token>` (scripts: browsers
  never attach that header on their own, so it needs no CSRF defence), or a session cookie obtained
  by logging in with the token *and* that session's CSRF token (a cross-site form post carries the
  cookie — SameSite=Strict aside — but cannot know the CSRF token);
- with an authorizer (`--authorizer MODULE:CALLABLE`, impl/ops/mcp_server.py's contract), every action
  is also put to `authorizer(tool, arguments)` with the MCP tool's name and arguments (`cancel_job`
  {"job_id"}, `retry_job` {"job_id"}, `signal` {"scope", "name", "payload"}, `steer` {"job_id",
  "payload"}); a falsy return or an exception refuses. A callable that accepts a `request` keyword
  also gets a `RequestInfo` (who, client address, headers). Without a token the authorizer alone
  decides: browsers get an anonymous session (for its CSRF token), scripts send what the authorizer
  checks (a proxy's header, say);
- sessions live on the server (`Sessions`): a random id in an HttpOnly SameSite=Strict cookie, an
  absolute lifetime and an idle timeout, and logout deletes the session — the old cookie and its
  CSRF token are refused from then on. A restart ends every session;
- every comparison of a secret is `hmac.compare_digest` (constant time); sessions are looked up by
  the SHA-256 of their id.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from impl.http.server import is_loopback

COOKIE = "belay_dashboard_session"
CSRF_FIELD = "csrf_token"
SESSION_TTL = 8 * 3600.0  # seconds a session lives at most after its login
SESSION_IDLE = 3600.0  # seconds a session survives without a request
MAX_SESSIONS = 10_000  # beyond this the least recently used session is dropped
READ_ONLY = (
    "this dashboard is read-only: it was started without a token. Restart it with --token "
    "(or $BELAY_DASHBOARD_TOKEN) or --authorizer MODULE:CALLABLE to enable retry, cancel, signal and steer."
)
NOT_LOGGED_IN = "actions need the dashboard token: log in at /login (or send Authorization: Bearer <token>)."
SESSION_ENDED = "your session has ended (logged out, expired, or the dashboard restarted): log in again at /login."
BAD_CSRF = (
    "the form's CSRF token is missing or wrong (a cross-site request, or a page older than your "
    "session): reload the page and try again."
)

Authorizer = Callable[..., Any]


class BindRefused(ValueError):
    """The dashboard was asked to listen beyond loopback without a token."""


def check_bind(host: str, token: str | None, authorizer: Authorizer | None = None) -> None:
    if not token and authorizer is None and not is_loopback(host):
        raise BindRefused(
            f"refusing to bind {host}: a dashboard without a token binds loopback only (127.0.0.1, ::1, "
            "localhost). Set a token (--token / $BELAY_DASHBOARD_TOKEN) or an --authorizer to listen elsewhere."
        )


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


@dataclass
class Session:
    key: str  # sha256 of the cookie's id
    csrf: str
    kind: str  # "token" (logged in with the token) | "anonymous" (authorizer-only dashboards)
    created: float
    last_seen: float

    @property
    def label(self) -> str:
        """A short, non-secret name for the audit log (the first 8 hex digits of the id's hash)."""
        return f"{self.kind}-session:{self.key[:8]}"


@dataclass
class Sessions:
    """Server-side sessions with an absolute lifetime (`ttl`) and an idle timeout (`idle`), seconds
    on `clock` (monotonic by default). Thread-safe."""

    ttl: float = SESSION_TTL
    idle: float = SESSION_IDLE
    clock: Callable[[], float] = time.monotonic
    limit: int = MAX_SESSIONS
    _by_key: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, kind: str) -> tuple[str, Session]:
        """A new session: (the cookie value, the session)."""
        sid = secrets.token_urlsafe(32)
        now = self.clock()
        session = Session(_digest(sid), secrets.token_hex(32), kind, now, now)
        with self._lock:
            self._sweep(now)
            while len(self._by_key) >= self.limit:
                oldest = min(self._by_key.values(), key=lambda s: s.last_seen)
                del self._by_key[oldest.key]
            self._by_key[session.key] = session
        return sid, session

    def get(self, cookie: str | None) -> Session | None:
        """The live session of a cookie (and it counts as a use), else None."""
        if not cookie:
            return None
        key = _digest(cookie)
        now = self.clock()
        with self._lock:
            session = self._by_key.get(key)
            if session is None:
                return None
            if self._expired(session, now):
                del self._by_key[key]
                return None
            session.last_seen = now
            return session

    def end(self, cookie: str | None) -> bool:
        """Log out: the session is gone; its cookie and CSRF token are refused from now on."""
        if not cookie:
            return False
        with self._lock:
            return self._by_key.pop(_digest(cookie), None) is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)

    def _expired(self, s: Session, now: float) -> bool:
        return now - s.created >= self.ttl or now - s.last_seen >= self.idle

    def _sweep(self, now: float) -> None:
        for key in [k for k, s in self._by_key.items() if self._expired(s, now)]:
            del self._by_key[key]


@dataclass(frozen=True)
class RequestInfo:
    """What an authorizer that accepts a `request` keyword learns about the request."""

    who: str  # "bearer", "<kind>-session:<hash prefix>", or "anonymous"
    client: str | None
    headers: Mapping[str, str]


def wants_request(authorizer: Authorizer) -> bool:
    """Whether the callable takes a `request` keyword (or **kwargs)."""
    try:
        params = inspect.signature(authorizer).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "request" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class Auth:
    """The rules of one dashboard: its token (None: none), its authorizer (None: none), its sessions."""

    def __init__(
        self, token: str | None, authorizer: Authorizer | None = None, sessions: Sessions | None = None
    ) -> None:
        self.token = token or None
        self.authorizer = authorizer
        self.sessions = sessions if sessions is not None else Sessions()  # (an empty one is falsy)
        self._pass_request = authorizer is not None and wants_request(authorizer)

    @property
    def enabled(self) -> bool:
        """Whether anyone may ever act here."""
        return self.token is not None or self.authorizer is not None

    @property
    def needs_login(self) -> bool:
        """Browsers act through a token login (else, with an authorizer only, an anonymous session)."""
        return self.token is not None

    def token_matches(self, candidate: str | None) -> bool:
        if self.token is None or candidate is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def session(self, cookie: str | None) -> Session | None:
        s = self.sessions.get(cookie)
        if s is not None and self.needs_login and s.kind != "token":
            return None
        return s

    def csrf_ok(self, session: Session, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), session.csrf.encode())

    def bearer(self, authorization: str | None) -> str | None:
        if authorization and authorization[:7].lower() == "bearer ":
            return authorization[7:].strip()
        return None

    def ask_authorizer(self, tool: str, arguments: dict[str, Any], request: RequestInfo) -> str | None:
        """None if the authorizer allows (or there is none); else the refusal's reason."""
        if self.authorizer is None:
            return None
        try:
            if self._pass_request:
                allowed = self.authorizer(tool, dict(arguments), request=request)
            else:
                allowed = self.authorizer(tool, dict(arguments))
        except Exception as exc:  # noqa: BLE001 - the authorizer's refusal, with its reason
            return f"refused by the authorizer: {tool}: {type(exc).__name__}: {exc}; nothing was changed"
        if not allowed:
            return f"refused by the authorizer: {tool}; nothing was changed"
        return None
