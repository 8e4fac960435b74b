"""Hand-built belay_jobs rows for pure tests: the columns every such test leaves at their §5.1 defaults."""

from __future__ import annotations

from typing import Any

# Columns a freshly inserted row has empty (§5.1), and that most hand-built rows do not care about.
EMPTY: dict[str, Any] = dict(
    lease_until=None,
    leased_by=None,
    errors=[],
    result=None,
    cancel_requested=False,
    unique_key=None,
    unique_mode=None,
    cron_name=None,
    cron_slot=None,
    workflow_id=None,
    wf_name=None,
    wf_deps=None,
    wf_ignore=None,
    parent_id=None,
    await_scope=None,
    await_name=None,
    budget_usd_micros=None,
    budget_tokens=None,
    spent_usd_micros=0,
    spent_tokens=0,
)
