"""Who may act: the dashboard token, cookie sessions, CSRF tokens and the bind rule.

belay-operations.txt, "The dashboard": mutations require the dashboard token; a tokenless dashboard
is read-only; it binds 127.0.0.1 by default. Here:

- a dashboard started without a token never mutates (every action endpoint answers 403 saying so);
- with a token, a request may act if it carries `Authorization: Bearer <token>` (scripts: browsers
  never attach that header on their own, so it needs no CSRF defence), or a session cookie obtained
  by logging in with the token *and* the form's CSRF token (a cross-site form post carries the cookie
  but cannot know the CSRF token); the cookie is HttpOnly and SameSite=Strict as well;
- every comparison of a secret is `hmac.compare_digest` (constant time);
- sessions are stateless: cookie = nonce.HMAC(token, "session:" + nonce); CSRF = HMAC(token,
  "csrf:" + nonce). Changing the token invalidates every session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from impl.http.server import is_loopback

COOKIE = "belay_dashboard_session"
CSRF_FIELD = "csrf_token"
READ_ONLY = (
    "this dashboard is read-only: it was started without a token. Restart it with --token "
    "(or $BELAY_DASHBOARD_TOKEN) to enable retry, cancel, signal and steer."
)
NOT_LOGGED_IN = "actions need the dashboard token: log in at /login (or send Authorization: Bearer <token>)."
BAD_CSRF = (
    "the form's CSRF token is missing or wrong (a cross-site request, or a page older than your "
    "session): reload the page and try again."
)


class BindRefused(ValueError):
    """The dashboard was asked to listen beyond loopback without a token."""


def check_bind(host: str, token: str | None) -> None:
    if not token and not is_loopback(host):
        raise BindRefused(
            f"refusing to bind {host}: a dashboard without a token binds loopback only (127.0.0.1, ::1, "
            "localhost). Set a token (--token / $BELAY_DASHBOARD_TOKEN) to listen elsewhere."
        )


def _mac(token: str, purpose: str, nonce: str) -> str:
    return hmac.new(token.encode(), f"{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()


class Auth:
    """The token rules of one dashboard (token None: read-only)."""

    def __init__(self, token: str | None) -> None:
        self.token = token or None

    @property
    def enabled(self) -> bool:
        return self.token is not None

    def token_matches(self, candidate: str | None) -> bool:
        if self.token is None or candidate is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def new_session(self) -> str:
        assert self.token is not None
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{_mac(self.token, 'session', nonce)}"

    def session_nonce(self, cookie: str | None) -> str | None:
        """The nonce of a valid session cookie, else None."""
        if self.token is None or not cookie or "." not in cookie:
            return None
        nonce, mac = cookie.split(".", 1)
        return nonce if hmac.compare_digest(mac.encode(), _mac(self.token, "session", nonce).encode()) else None

    def csrf_for(self, nonce: str) -> str:
        assert self.token is not None
        return _mac(self.token, "csrf", nonce)

    def csrf_ok(self, nonce: str, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.csrf_for(nonce).encode())

    def bearer(self, authorization: str | None) -> str | None:
        if authorization and authorization[:7].lower() == "bearer ":
            return authorization[7:].strip()
        return None
