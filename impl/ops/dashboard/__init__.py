"""The operator's dashboard (belay-operations.txt, "The dashboard"): live queue tiles, a filterable
job list, each job's full journal, workflow DAGs, retry / cancel / signal / steer, and the soak
reports of this toolkit. `belay dashboard` serves it; impl/ops/dashboard/app.py builds the ASGI app.

Modules: app (routes, auth checks, actions through PgStore.apply), web (what holds no request state:
the template environment, the action vocabulary and form parsing, the security middleware), reports
(the soak reports pages), auth (token, sessions, CSRF, the bind rule), queries
(impl/store/sql/dashboard.sql, the optional index variants), views (previews, cost running totals,
timelines, the layered DAG). Templates and static assets ship inside the package.
"""

from impl.ops.dashboard.app import create_app

__all__ = ["create_app"]
